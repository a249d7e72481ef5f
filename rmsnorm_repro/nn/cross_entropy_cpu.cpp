// Label-smoothed cross-entropy summed over the rows of logits (N, V) for CPU: what
// F.cross_entropy(logits, target, ignore_index=ignore, label_smoothing=eps, reduction="sum") computes,
//
//   loss = sum over rows with target != ignore of  (1 - eps) * (lse - z_t) + eps * (lse - mean(z)),
//   lse = log(sum_v exp(z_v)),
//
// and its gradient dz_v = g * (exp(z_v - lse) - eps / V - (1 - eps) [v = t]) (0 on ignored rows), each
// in one pass over a row (forward: its maximum, then exp-sum and sum in one more). torch's composition
// writes the log-probabilities, reads them for the NLL and again for the smoothing term, fills and then
// scatters into a gradient buffer and runs log_softmax's backward: about ten passes over the largest
// tensor of a translation step (tokens x BPE vocabulary, 20-80 MB at the small recipes), here three.
// Saved for the backward: the logits (which the output layer keeps anyway) and one lse per row.
// exp calls SLEEF on float32 vectors (exported by libtorch_cpu, whose own kernels use it; within 1 ulp);
// double (the tests' reference dtype) the C library's.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/utils/pybind.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>
#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
extern "C" {
#if defined(__AVX512F__)
__m512 Sleef_expf16_u10(__m512);
#else
__m256 Sleef_expf8_u10(__m256);
#endif
}
#endif

namespace {

using at::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// out[i] = exp(z[i] - shift) for i in [0, n).
template <typename T>
void exp_shifted(const T* z, T shift, T* out, int64_t n) {
  int64_t i = 0;
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<T, float>) {
    const __m512 s = _mm512_set1_ps(shift);
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(out + i, Sleef_expf16_u10(_mm512_sub_ps(_mm512_loadu_ps(z + i), s)));
  }
#elif defined(__AVX2__)
  if constexpr (std::is_same_v<T, float>) {
    const __m256 s = _mm256_set1_ps(shift);
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, Sleef_expf8_u10(_mm256_sub_ps(_mm256_loadu_ps(z + i), s)));
  }
#endif
  for (; i < n; ++i) out[i] = std::exp(z[i] - shift);
}

// max of z[0..n), in 64 lanes: a single running maximum (or omp's max reduction) stayed scalar here,
// 1.4 ns an element against the memory's 0.4.
template <typename T>
T row_max(const T* z, int64_t n) {
  constexpr int64_t kLanes = 64;
  T part[kLanes];
  std::fill(part, part + kLanes, -std::numeric_limits<T>::infinity());
  int64_t v = 0;
  for (; v + kLanes <= n; v += kLanes) {
#pragma omp simd
    for (int64_t j = 0; j < kLanes; ++j) part[j] = z[v + j] > part[j] ? z[v + j] : part[j];
  }
  T m = -std::numeric_limits<T>::infinity();
  for (; v < n; ++v) m = z[v] > m ? z[v] : m;
  for (int64_t j = 0; j < kLanes; ++j) m = part[j] > m ? part[j] : m;
  return m;
}

// The row's log-sum-exp and sum, exp values going through buf (a block of kBlock at a time).
constexpr int64_t kBlock = 512;

template <typename T>
void row_lse_and_sum(const T* z, int64_t V, T* buf, T& lse, T& sum) {
  const T m = row_max(z, V);
  T s = 0, total = 0;
  for (int64_t begin = 0; begin < V; begin += kBlock) {
    const int64_t n = std::min(kBlock, V - begin);
    exp_shifted(z + begin, m, buf, n);
#pragma omp simd reduction(+ : s, total)
    for (int64_t v = 0; v < n; ++v) {
      s += buf[v];
      total += z[begin + v];
    }
  }
  lse = m + std::log(s);
  sum = total;
}

// One row's gradient: d = g * softmax(z) - off, and on less at the target.
template <typename T>
void gradient_row(const T* z, T lse, int64_t target, T g, T off, T on, T* d, int64_t V) {
  exp_shifted(z, lse, d, V);
#pragma omp simd
  for (int64_t v = 0; v < V; ++v) d[v] = g * d[v] - off;
  d[target] -= on;
}

struct SmoothedCrossEntropy : public torch::autograd::Function<SmoothedCrossEntropy> {
  static Tensor forward(AutogradContext* ctx, const Tensor& logits_in, const Tensor& target_in, int64_t ignore_index,
                        double eps) {
    RECORD_FUNCTION("rmsnorm_repro::smoothed_cross_entropy", std::vector<c10::IValue>());
    TORCH_CHECK(logits_in.dim() == 2 && target_in.dim() == 1 && target_in.size(0) == logits_in.size(0),
                "smoothed_cross_entropy: logits (N, V) and target (N) expected, got ", logits_in.sizes(), " and ",
                target_in.sizes());
    TORCH_CHECK(target_in.scalar_type() == at::kLong, "smoothed_cross_entropy: target must be int64");
    const Tensor logits = logits_in.contiguous(), target = target_in.contiguous();
    const int64_t N = logits.size(0), V = logits.size(1);
    const int64_t* tgt = target.data_ptr<int64_t>();
    for (int64_t i = 0; i < N; ++i) {
      TORCH_CHECK(tgt[i] == ignore_index || (0 <= tgt[i] && tgt[i] < V), "smoothed_cross_entropy: target ", tgt[i],
                  " is out of bounds for ", V, " classes");
    }
    Tensor lse = at::empty({N}, logits.options());
    Tensor loss;
    AT_DISPATCH_FLOATING_TYPES(logits.scalar_type(), "smoothed_cross_entropy", [&] {
      using T = scalar_t;
      const T* Z = logits.data_ptr<T>();
      T* L = lse.data_ptr<T>();
      const int64_t chunks = std::max<int64_t>(1, std::min<int64_t>(at::get_num_threads(), N));
      std::vector<double> partial(chunks, 0.0);  // per chunk, so the sum does not depend on thread timing
      at::parallel_for(0, chunks, 1, [&](int64_t chunk_begin, int64_t chunk_end) {
        std::vector<T> buf(kBlock);
        for (int64_t chunk = chunk_begin; chunk < chunk_end; ++chunk) {
          double acc = 0;
          for (int64_t i = N * chunk / chunks; i < N * (chunk + 1) / chunks; ++i) {
            if (tgt[i] == ignore_index) continue;
            const T* z = Z + i * V;
            T sum;
            row_lse_and_sum(z, V, buf.data(), L[i], sum);
            acc += (1 - eps) * (double(L[i]) - double(z[tgt[i]])) + eps * (double(L[i]) - double(sum) / double(V));
          }
          partial[chunk] = acc;
        }
      });
      double total = 0;
      for (double p : partial) total += p;
      loss = at::scalar_tensor(total, logits.options());
    });
    ctx->save_for_backward({logits, target, lse});
    ctx->saved_data["ignore_index"] = ignore_index;
    ctx->saved_data["eps"] = eps;
    return loss;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    RECORD_FUNCTION("rmsnorm_repro::smoothed_cross_entropy_backward", std::vector<c10::IValue>());
    TORCH_CHECK(!at::GradMode::is_enabled(), "the fused cross-entropy is differentiable once (no create_graph / "
                "double backward)");
    const auto saved = ctx->get_saved_variables();
    const Tensor &logits = saved[0], &target = saved[1], &lse = saved[2];
    const int64_t ignore_index = ctx->saved_data["ignore_index"].toInt();
    const double eps = ctx->saved_data["eps"].toDouble();
    const int64_t N = logits.size(0), V = logits.size(1);
    Tensor dlogits = at::empty_like(logits);
    AT_DISPATCH_FLOATING_TYPES(logits.scalar_type(), "smoothed_cross_entropy_backward", [&] {
      using T = scalar_t;
      const T g = grads[0].item<T>(), off = T(g * eps / V), on = T(g * (1 - eps));
      const T *Z = logits.data_ptr<T>(), *L = lse.data_ptr<T>();
      const int64_t* tgt = target.data_ptr<int64_t>();
      T* D = dlogits.data_ptr<T>();
      at::parallel_for(0, N, 1, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          T* d = D + i * V;
          if (tgt[i] == ignore_index) {
            std::fill(d, d + V, T(0));
            continue;
          }
          gradient_row(Z + i * V, L[i], tgt[i], g, off, on, d, V);
        }
      });
    });
    return {dlogits, Tensor(), Tensor(), Tensor()};
  }
};

Tensor smoothed_cross_entropy(const Tensor& logits, const Tensor& target, int64_t ignore_index, double eps) {
  return SmoothedCrossEntropy::apply(logits, target, ignore_index, eps);
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("smoothed_cross_entropy", &smoothed_cross_entropy,
        "label-smoothed cross-entropy summed over rows, forward and backward fused", py::arg("logits"),
        py::arg("target"), py::arg("ignore_index"), py::arg("eps"));
}
