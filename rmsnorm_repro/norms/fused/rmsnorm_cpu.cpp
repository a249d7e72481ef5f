// Fused RMSNorm / pRMSNorm over the last dimension for CPU: forward, exact backward, autograd.
//
// y = x * s * g (+ b), s = 1 / (RMS(x[:k]) + eps)  (eps outside, the authors' PyTorch)
//                   or s = rsqrt(mean(x[:k]^2) + eps) (eps inside, TF / torch.nn.RMSNorm).
// Each row is read once for the statistic and once for the output while it is still in cache;
// the backward does the same with one pass for S = sum(g * dy * x) and one for dx:
//   dx_i = s * g_i * dy_i - [i < k] * c * S * x_i,
//   c = s^3 / k                 (eps inside)
//   c = s^2 / (k * RMS)         (eps outside; = s^3 / (k (1 - eps s)), written with RMS so rows
//                                with a tiny RMS do not cancel; 0 for rows whose RMS is 0, where
//                                the correction's limit is 0 and the derivative is s * g * dy).
// Partial p (k < d) only shortens the statistic and the correction: no extra cost.
// Rows run in parallel (at::parallel_for); dgain/dbias come from per-chunk partial sums that are
// added at the end, so the result does not depend on thread timing. dx is written over dy when
// autograd hands over the only reference to dy (owns_dense_buffer): no fresh, cold allocation.
// Outputs too large to stay cached are written with streaming stores (stream_min_bytes).
// Under autocast the gain and bias may be float32 while x is bfloat16 (as F.layer_norm takes them):
// they are read as float32, y and dx come out in x's dtype, dgain and dbias in theirs. (float16 is not
// compiled in: its instantiations made GCC inline less of the float32 loops, whose forward then ran
// 1.2x slower at 80x2048; CPU autocast defaults to bfloat16.)
// The entry point is a C++ autograd Function called straight from Python through pybind11: of the
// ways PyTorch offers to expose a kernel with its backward, the one with the least cost per call
// (scripts/bench_binding.py; README, Speed). `forward` and `backward` on their own serve the
// torch.library ops a compiled graph calls (ops.py). Built with -DRMSNORM_TORCH_LIBRARY=<namespace>,
// the same Function is also registered as the dispatcher op <namespace>::rms_norm (for that comparison).
// Only the headers used (not <torch/extension.h>, which pulls in all of libtorch's C++ API):
// the one-time build takes about half as long.
#include <ATen/ATen.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <ATen/TensorUtils.h>
#include <ATen/record_function.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/utils/pybind.h>
#ifdef RMSNORM_TORCH_LIBRARY
#include <torch/library.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <tuple>
#include <type_traits>
#if defined(__AVX512F__) || defined(__AVX__)
#include <immintrin.h>
#define RMSNORM_STREAMING 1
#endif

namespace {

using at::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Element loads and stores in the accumulation type. For bfloat16 these are c10's conversions (widen by a
// 16-bit shift; narrow rounding to nearest even, NaN to 0x7FC0) written branch-free: c10's narrowing
// branches on NaN, which kept every loop storing bfloat16 scalar. Same bits, vectorized loops.
template <typename acc_t, typename scalar_t>
inline acc_t load(scalar_t v) {
  if constexpr (std::is_same_v<scalar_t, c10::BFloat16>) {
    const uint32_t bits = static_cast<uint32_t>(v.x) << 16;
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return static_cast<acc_t>(f);
  } else {
    return static_cast<acc_t>(v);
  }
}

template <typename scalar_t, typename acc_t>
inline scalar_t store(acc_t v) {
  if constexpr (std::is_same_v<scalar_t, c10::BFloat16>) {
    const float f = static_cast<float>(v);
    uint32_t bits;
    std::memcpy(&bits, &f, sizeof bits);
    const uint16_t rounded = static_cast<uint16_t>((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
    return c10::BFloat16(f != f ? uint16_t{0x7FC0} : rounded, c10::BFloat16::from_bits());
  } else {
    return static_cast<scalar_t>(v);
  }
}

// About 32K elements per task: enough work to amortize waking a thread, small enough to balance.
constexpr int64_t kElementsPerTask = 32768;

// sum of term(i) for i in [0, n) with four vectors of partial sums: with a single accumulator the
// loop waits on the add latency, not on memory. term may also update element i of an output.
// The partial sums are then added pairwise, one vector add per level: a serial sum of the 64 would
// cost about 200 cycles a row, which made short rows (d = 512) 1.4x slower than a copy.
template <typename acc_t, typename Term>
inline acc_t row_sum(int64_t n, Term term) {
  constexpr int64_t kBlock = 4 * 64 / static_cast<int64_t>(sizeof(acc_t));  // four 512-bit vectors
  acc_t part[kBlock] = {};
  int64_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
#pragma omp simd
    for (int64_t j = 0; j < kBlock; ++j) part[j] += term(i + j);
  }
  acc_t total = 0;
  for (; i < n; ++i) total += term(i);
  for (int64_t width = kBlock / 2; width > 0; width /= 2) {
#pragma omp simd
    for (int64_t j = 0; j < width; ++j) part[j] += part[j + width];
  }
  return total + part[0];
}

// Outputs of at least this many bytes are written with streaming (non-temporal) stores, which do not
// read each destination line into the cache before overwriting it: a third less memory traffic for
// an output that could not stay cached for its consumer anyway. cpu.py sets it from the size of the
// last-level cache; until then nothing streams.
int64_t stream_min_bytes = std::numeric_limits<int64_t>::max();

bool streams(const Tensor& out) { return static_cast<int64_t>(out.nbytes()) >= stream_min_bytes; }

#ifdef RMSNORM_STREAMING
#if defined(__AVX512F__)
constexpr int64_t kVectorBytes = 64;
inline void stream_store(float* p, const float* v) { _mm512_stream_ps(p, _mm512_load_ps(v)); }
inline void stream_store(double* p, const double* v) { _mm512_stream_pd(p, _mm512_load_pd(v)); }
#else
constexpr int64_t kVectorBytes = 32;
inline void stream_store(float* p, const float* v) { _mm256_stream_ps(p, _mm256_load_ps(v)); }
inline void stream_store(double* p, const double* v) { _mm256_stream_pd(p, _mm256_load_pd(v)); }
#endif
#endif

// Streaming stores are weakly ordered: each task fences its own before the result is used.
inline void stream_fence(bool stream) {
#ifdef RMSNORM_STREAMING
  if (stream) _mm_sfence();
#endif
}

// out[i] = value(i) for i in [begin, end), vectorized without runtime alias checks (out is a fresh
// tensor, or dy itself, whose element i is read only to compute out[i]). stream: see stream_min_bytes
// (float and double; bf16 outputs are stored normally).
template <typename scalar_t, typename Value>
inline void write_row(scalar_t* out, int64_t begin, int64_t end, Value value, bool stream) {
#ifdef RMSNORM_STREAMING
  if constexpr (std::is_same_v<scalar_t, float> || std::is_same_v<scalar_t, double>) {
    if (stream) {
      constexpr int64_t lanes = kVectorBytes / sizeof(scalar_t);
      for (; begin < end && reinterpret_cast<std::uintptr_t>(out + begin) % kVectorBytes; ++begin) out[begin] = value(begin);
      for (; begin + lanes <= end; begin += lanes) {
        alignas(kVectorBytes) scalar_t block[lanes];
#pragma omp simd
        for (int64_t j = 0; j < lanes; ++j) block[j] = value(begin + j);
        stream_store(out + begin, block);
      }
    }
  }
#endif
#pragma omp simd
  for (int64_t i = begin; i < end; ++i) out[i] = store<scalar_t>(value(i));
}

// The distance between the starts of two consecutive rows (last-dimension vectors) of x, where all its
// rows lie at one fixed stride: a contiguous tensor of any shape, or a slice of wider rows such as one
// gate block of a recurrent cell's joint projection, for one time step (B, d) or for all of them at
// once (T, B, d). Nothing where they do not. No view is made: the kernels take x's data pointer.
std::optional<int64_t> uniform_row_stride(const Tensor& x) {
  const int64_t d = x.size(-1), n = d > 0 ? x.numel() / d : 0;
  if (x.is_contiguous()) return d;
  if (x.stride(-1) != 1 && d != 1) return std::nullopt;
  if (x.dim() == 2) return (n <= 1 || x.stride(0) >= d) ? std::optional<int64_t>(x.stride(0)) : std::nullopt;
  const int64_t shape[2] = {n, d};
  const auto strides = at::detail::computeStride(x.sizes(), x.strides(), at::IntArrayRef(shape, 2));
  if (!strides || (n > 1 && (*strides)[0] < d)) return std::nullopt;
  return (*strides)[0];
}

// x itself where its rows lie at one fixed stride (uniform_row_stride), else a contiguous copy.
Tensor rows_of(const Tensor& x) { return uniform_row_stride(x) ? x : x.contiguous(); }

// The row stride of rows_of(x).
int64_t row_stride(const Tensor& rows) { return uniform_row_stride(rows).value_or(rows.size(-1)); }

// param_t: the gain's and bias's dtype, x's own or (autocast) float32 for bfloat16 x.
template <typename scalar_t, typename param_t>
void forward_kernel(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& y,
                    Tensor& stats, int64_t k, double eps, bool eps_inside) {
  using acc_t = at::opmath_type<scalar_t>;
  const int64_t d = x.size(-1), n = x.numel() / d;
  const scalar_t* X = x.data_ptr<scalar_t>();
  const int64_t xs = row_stride(x);
  const param_t* W = weight.defined() ? weight.data_ptr<param_t>() : nullptr;
  const param_t* B = bias.defined() ? bias.data_ptr<param_t>() : nullptr;
  scalar_t* Y = y.data_ptr<scalar_t>();
  acc_t* S = stats.data_ptr<acc_t>();  // row 0: the scale per row; row 1: the coefficient
  acc_t* C = S + n;
  const acc_t e = static_cast<acc_t>(eps), kk = static_cast<acc_t>(k);
  const int64_t grain = std::max<int64_t>(1, kElementsPerTask / d);
  const bool stream = streams(y);

  at::parallel_for(0, n, grain, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const scalar_t* xr = X + row * xs;
      scalar_t* yr = Y + row * d;
      const acc_t ms = row_sum<acc_t>(k, [&](int64_t i) { const acc_t v = load<acc_t>(xr[i]); return v * v; }) / kk;
      acc_t s, c;
      if (eps_inside) {
        s = acc_t(1) / std::sqrt(ms + e);
        c = s * s * s / kk;
      } else {
        const acc_t r = std::sqrt(ms);
        s = acc_t(1) / (r + e);
        c = r > 0 ? s * s / (kk * r) : acc_t(0);
      }
      S[row] = s;
      C[row] = c;
      // Four loops instead of branches inside one.
      if (W && B) {
        write_row(yr, 0, d, [&](int64_t i) { return load<acc_t>(xr[i]) * s * load<acc_t>(W[i]) + load<acc_t>(B[i]); }, stream);
      } else if (W) {
        write_row(yr, 0, d, [&](int64_t i) { return load<acc_t>(xr[i]) * s * load<acc_t>(W[i]); }, stream);
      } else if (B) {
        write_row(yr, 0, d, [&](int64_t i) { return load<acc_t>(xr[i]) * s + load<acc_t>(B[i]); }, stream);
      } else {
        write_row(yr, 0, d, [&](int64_t i) { return load<acc_t>(xr[i]) * s; }, stream);
      }
    }
    stream_fence(stream);
  });
}

template <typename scalar_t, typename param_t>
void backward_kernel(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& stats, int64_t k,
                     int64_t chunks, Tensor& dx, Tensor& dw_partial, Tensor& db_partial) {
  using acc_t = at::opmath_type<scalar_t>;
  const int64_t d = x.size(-1), n = x.numel() / d;
  const scalar_t* DY = dy.data_ptr<scalar_t>();
  const scalar_t* X = x.data_ptr<scalar_t>();
  const int64_t xs = row_stride(x);
  const param_t* W = weight.defined() ? weight.data_ptr<param_t>() : nullptr;
  const acc_t* S = stats.data_ptr<acc_t>();
  const acc_t* C = S + n;
  scalar_t* DX = dx.defined() ? dx.data_ptr<scalar_t>() : nullptr;
  acc_t* DWP = dw_partial.defined() ? dw_partial.data_ptr<acc_t>() : nullptr;
  acc_t* DBP = db_partial.defined() ? db_partial.data_ptr<acc_t>() : nullptr;
  const bool stream = DX && streams(dx);

  // One task per chunk of rows; each chunk owns one row of the partial-sum buffers.
  at::parallel_for(0, chunks, 1, [&](int64_t chunk_begin, int64_t chunk_end) {
    for (int64_t chunk = chunk_begin; chunk < chunk_end; ++chunk) {
      acc_t* dwp = DWP ? DWP + chunk * d : nullptr;
      acc_t* dbp = DBP ? DBP + chunk * d : nullptr;
      const int64_t row_end = n * (chunk + 1) / chunks;
      for (int64_t row = n * chunk / chunks; row < row_end; ++row) {
        const scalar_t* xr = X + row * xs;
        const scalar_t* dyr = DY + row * d;
        const acc_t s = S[row];
        // One pass: S = sum(g * dy * x) (the backward's only row reduction) and dgain's partial sum.
        acc_t sum;
        if (W && dwp) {
          sum = row_sum<acc_t>(d, [&](int64_t i) {
            const acc_t dyx = load<acc_t>(dyr[i]) * load<acc_t>(xr[i]);
            dwp[i] += dyx * s;
            return load<acc_t>(W[i]) * dyx;
          });
        } else if (W) {
          sum = row_sum<acc_t>(d, [&](int64_t i) {
            return load<acc_t>(W[i]) * load<acc_t>(dyr[i]) * load<acc_t>(xr[i]);
          });
        } else {
          sum = row_sum<acc_t>(d, [&](int64_t i) { return load<acc_t>(dyr[i]) * load<acc_t>(xr[i]); });
        }
        if (dbp) {
#pragma omp simd
          for (int64_t i = 0; i < d; ++i) dbp[i] += load<acc_t>(dyr[i]);
        }
        if (!DX) continue;
        const acc_t cs = C[row] * sum;
        scalar_t* dxr = DX + row * d;
        if (W) {
          write_row(dxr, 0, k, [&](int64_t i) { return s * load<acc_t>(W[i]) * load<acc_t>(dyr[i]) - cs * load<acc_t>(xr[i]); }, stream);
          write_row(dxr, k, d, [&](int64_t i) { return s * load<acc_t>(W[i]) * load<acc_t>(dyr[i]); }, stream);
        } else {
          write_row(dxr, 0, k, [&](int64_t i) { return s * load<acc_t>(dyr[i]) - cs * load<acc_t>(xr[i]); }, stream);
          write_row(dxr, k, d, [&](int64_t i) { return s * load<acc_t>(dyr[i]); }, stream);
        }
      }
    }
    stream_fence(stream);
  });
}

// The dtype of the gain and bias: x's own, or float32 beside bfloat16 x (autocast).
bool mixed_params(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  const Tensor& p = weight.defined() ? weight : bias;
  return p.defined() && p.scalar_type() != x.scalar_type();
}

void check_args(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t k) {
  TORCH_CHECK(x.device().is_cpu(), "fused CPU rms_norm: x must be on the CPU, got ", x.device());
  TORCH_CHECK(x.dim() >= 1 && x.size(-1) >= 1, "fused CPU rms_norm: x needs a non-empty last dimension");
  const int64_t d = x.size(-1);
  TORCH_CHECK(1 <= k && k <= d, "fused CPU rms_norm: k must be in [1, ", d, "], got ", k);
  const bool low = x.scalar_type() == at::kBFloat16;
  for (const Tensor* t : {&weight, &bias}) {
    if (!t->defined()) continue;
    TORCH_CHECK(t->dim() == 1 && t->size(0) == d, "fused CPU rms_norm: weight/bias must have shape (", d, "), got ", t->sizes());
    TORCH_CHECK(t->scalar_type() == x.scalar_type() || (low && t->scalar_type() == at::kFloat),
                "fused CPU rms_norm: weight/bias dtype ", t->scalar_type(), " does not go with x dtype ", x.scalar_type(),
                " (the same dtype, or float32 for bfloat16 x)");
    TORCH_CHECK(t->device().is_cpu(), "fused CPU rms_norm: weight/bias must be on the CPU");
  }
  TORCH_CHECK(!weight.defined() || !bias.defined() || weight.scalar_type() == bias.scalar_type(),
              "fused CPU rms_norm: weight and bias must have the same dtype");
}

// Runs KERNEL<scalar_t, param_t>(...) for x's dtype and the parameters' (x's own, or float32 when mixed).
#define RMSNORM_DISPATCH(x, mixed, name, KERNEL, ...)                                       \
  AT_DISPATCH_FLOATING_TYPES_AND(at::kBFloat16, (x).scalar_type(), name, [&] {              \
    using param_acc_t = at::opmath_type<scalar_t>;                                           \
    if constexpr (!std::is_same_v<param_acc_t, scalar_t>) {                                  \
      if (mixed) return KERNEL<scalar_t, param_acc_t>(__VA_ARGS__);                          \
    }                                                                                        \
    KERNEL<scalar_t, scalar_t>(__VA_ARGS__);                                                 \
  })

Tensor contiguous_or_undefined(const Tensor& t) { return t.defined() ? t.contiguous() : t; }

// y (x's shape, contiguous) and stats (2, n): per row the scale s and the backward's coefficient c (in
// the accumulation dtype), from x's rows (rows_of; arguments checked).
std::tuple<Tensor, Tensor> rms_norm_forward(const Tensor& x, const Tensor& weight_in, const Tensor& bias_in,
                                                    int64_t k, double eps, bool eps_inside) {
  const Tensor weight = contiguous_or_undefined(weight_in), bias = contiguous_or_undefined(bias_in);
  const int64_t d = x.size(-1), n = x.numel() / d;
  const auto acc_type = at::toOpMathType(x.scalar_type());
  Tensor y = at::empty(x.sizes(), x.options());  // contiguous, whatever x's row stride
  Tensor stats = at::empty({2, n}, x.options().dtype(acc_type));  // one allocation for both (contiguous)
  RMSNORM_DISPATCH(x, mixed_params(x, weight, bias), "rms_norm_forward", forward_kernel, x, weight, bias, y, stats, k,
                   eps, eps_inside);
  return {y, stats};
}

// Whether dx may overwrite dy: when nothing else can see dy's memory (no other tensor, view or
// saved copy refers to it), which is the usual case in training, where dy is a fresh result of
// the next layer's backward. Each element of dy is read before its dx is written, and the writes
// then land on cache lines the reads just brought in instead of a fresh, cold allocation.
bool owns_dense_buffer(const Tensor& dy, const Tensor& x) {
  return dy.use_count() == 1 && dy.storage().use_count() == 1 && !dy.requires_grad() &&
         dy.scalar_type() == x.scalar_type() && dy.numel() == x.numel() && dy.is_contiguous() &&
         dy.storage_offset() == 0 && dy.storage().nbytes() == dy.nbytes();
}

// Per-chunk partial sums, (chunks, d), or (d) for one chunk: then, in the parameters' own dtype, the
// buffer is the result as it is.
Tensor zero_partial(int64_t chunks, int64_t d, const at::TensorOptions& options) {
  return chunks == 1 ? at::zeros({d}, options) : at::zeros({chunks, d}, options);
}

Tensor reduce_partial(const Tensor& partial, at::ScalarType dtype) {
  if (partial.dim() == 1) return partial.scalar_type() == dtype ? partial : partial.to(dtype);
  return partial.sum(0).to(dtype);
}

// (dx, dgain, dbias), each undefined where not asked for; x: the forward's rows (rows_of), dy: contiguous,
// x's shape; dx: dy's shape. With may_reuse_dy, dx is written over dy when nothing
// else holds it (owns_dense_buffer).
std::tuple<Tensor, Tensor, Tensor> rms_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight,
                                                     const Tensor& stats, int64_t k, bool need_dx,
                                                     bool need_dw, bool need_db, at::ScalarType param_type,
                                                     bool may_reuse_dy) {
  const int64_t d = x.size(-1), n = x.numel() / d;
  need_dw = need_dw && weight.defined();
  const auto acc_options = x.options().dtype(at::toOpMathType(x.scalar_type()));
  const int64_t chunks = std::max<int64_t>(1, std::min<int64_t>({at::get_num_threads(), n, n * d / kElementsPerTask}));
  Tensor dx = need_dx ? (may_reuse_dy && owns_dense_buffer(dy, x) ? dy : at::empty(dy.sizes(), x.options())) : Tensor();
  Tensor dw_partial = need_dw ? zero_partial(chunks, d, acc_options) : Tensor();
  Tensor db_partial = need_db ? zero_partial(chunks, d, acc_options) : Tensor();
  if (n > 0) {
    RMSNORM_DISPATCH(x, weight.defined() && weight.scalar_type() != x.scalar_type(), "rms_norm_backward",
                     backward_kernel, dy, x, weight, stats, k, chunks, dx, dw_partial, db_partial);
  }
  Tensor dw = need_dw ? reduce_partial(dw_partial, param_type) : Tensor();
  Tensor db = need_db ? reduce_partial(db_partial, param_type) : Tensor();
  return {dx, dw, db};
}

struct RMSNormFunction : public torch::autograd::Function<RMSNormFunction> {
  // weight and bias are optionals: an absent one is no input of the graph (no edge, no gradient).
  static Tensor forward(AutogradContext* ctx, const Tensor& x, const std::optional<Tensor>& weight_opt,
                        const std::optional<Tensor>& bias_opt, int64_t k, double eps, bool eps_inside) {
    RECORD_FUNCTION("rmsnorm_repro::rms_norm", std::vector<c10::IValue>());  // profiler (bench --profile)
    const Tensor weight = weight_opt.value_or(Tensor()), bias = bias_opt.value_or(Tensor());
    check_args(x, weight, bias, k);
    const Tensor rows = rows_of(x);  // x's memory unless it had to be copied: backward reads the same rows
    auto [y, stats] = rms_norm_forward(rows, weight, bias, k, eps, eps_inside);
    ctx->save_for_backward({rows, contiguous_or_undefined(weight), stats});
    ctx->saved_data["k"] = k;
    ctx->saved_data["has_bias"] = bias.defined();
    // the parameters' dtype (float32 under autocast): dgain and dbias come back in it
    ctx->saved_data["param_type"] = static_cast<int64_t>(weight.defined() ? weight.scalar_type()
                                                         : bias.defined() ? bias.scalar_type() : x.scalar_type());
    return y;
  }

  // grads by reference: autograd moves its buffers in, so a use count of 1 below means ours alone.
  static variable_list backward(AutogradContext* ctx, variable_list& grads) {
    RECORD_FUNCTION("rmsnorm_repro::rms_norm_backward", std::vector<c10::IValue>());
    // The kernel's gradients carry no graph: refuse create_graph rather than return wrong 2nd derivatives.
    TORCH_CHECK(!at::GradMode::is_enabled(), "fused rms_norm is differentiable once (no create_graph / double "
                "backward); use norm.impl=reference for higher-order gradients");
    const auto saved = ctx->get_saved_variables();
    const Tensor &x = saved[0], &weight = saved[1], &stats = saved[2];
    const int64_t k = ctx->saved_data["k"].toInt();
    const bool has_bias = ctx->saved_data["has_bias"].toBool();
    const auto param_type = static_cast<at::ScalarType>(ctx->saved_data["param_type"].toInt());
    const Tensor dy = grads[0].contiguous();  // x's shape: so is dx
    grads[0].reset();  // dy may now be the only reference to its buffer
    // needs_input_grad counts graph inputs only: bias is input 1 when there is no weight.
    auto [dx, dw, db] = rms_norm_backward(dy, x, weight, stats, k, ctx->needs_input_grad(0),
                                          weight.defined() && ctx->needs_input_grad(1),
                                          has_bias && ctx->needs_input_grad(weight.defined() ? 2 : 1), param_type, true);
    return {dx, dw, db, Tensor(), Tensor(), Tensor()};
  }
};

Tensor rms_norm(const Tensor& x, const std::optional<Tensor>& weight, const std::optional<Tensor>& bias, int64_t k,
                double eps, bool eps_inside) {
  return RMSNormFunction::apply(x, weight, bias, k, eps, eps_inside);
}

// The forward and backward on their own (no autograd), for the custom ops torch.compile traces (ops.py)
// and the other bindings of scripts/bench_binding.py. stats: (2, n), the scale and the coefficient per row.
std::tuple<Tensor, Tensor> forward_only(const Tensor& x, const std::optional<Tensor>& weight,
                                        const std::optional<Tensor>& bias, int64_t k, double eps, bool eps_inside) {
  check_args(x, weight.value_or(Tensor()), bias.value_or(Tensor()), k);
  auto [y, stats] = rms_norm_forward(rows_of(x), weight.value_or(Tensor()), bias.value_or(Tensor()), k, eps, eps_inside);
  return {y, stats};
}

// (dx, dgain, dbias), undefined where not asked for; dx is never written over dy (dy may be seen by others).
std::tuple<Tensor, Tensor, Tensor> backward_only(const Tensor& dy, const Tensor& x, const std::optional<Tensor>& weight,
                                                 const std::optional<Tensor>& bias, const Tensor& stats, int64_t k,
                                                 bool need_dx, bool need_dw, bool need_db) {
  const Tensor w = weight.value_or(Tensor()), b = bias.value_or(Tensor());
  const auto param_type = w.defined() ? w.scalar_type() : b.defined() ? b.scalar_type() : x.scalar_type();
  TORCH_CHECK(stats.dim() == 2 && stats.size(0) == 2 && stats.is_contiguous() &&
              stats.scalar_type() == at::toOpMathType(x.scalar_type()), "rms_norm backward: stats must be forward's (2, n)");
  return rms_norm_backward(dy.contiguous(), rows_of(x), w.defined() ? w.contiguous() : w, stats, k, need_dx, need_dw,
                           need_db, param_type, false);
}

}  // namespace

#ifdef RMSNORM_TORCH_LIBRARY
// The same autograd Function behind the dispatcher (torch.ops.<namespace>.rms_norm): the Autograd key
// runs it, the CPU key the forward alone (no graph wanted).
Tensor rms_norm_cpu(const Tensor& x, const std::optional<Tensor>& weight, const std::optional<Tensor>& bias, int64_t k,
                    double eps, bool eps_inside) {
  return std::get<0>(forward_only(x, weight, bias, k, eps, eps_inside));
}

TORCH_LIBRARY(RMSNORM_TORCH_LIBRARY, m) {
  m.def("rms_norm(Tensor x, Tensor? weight, Tensor? bias, int k, float eps, bool eps_inside) -> Tensor");
}
TORCH_LIBRARY_IMPL(RMSNORM_TORCH_LIBRARY, CPU, m) { m.impl("rms_norm", &rms_norm_cpu); }
TORCH_LIBRARY_IMPL(RMSNORM_TORCH_LIBRARY, Autograd, m) { m.impl("rms_norm", &rms_norm); }
#endif

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("rms_norm", &rms_norm, "RMSNorm/pRMSNorm over the last dim with a fused exact backward",
        py::arg("x"), py::arg("weight"), py::arg("bias"), py::arg("k"), py::arg("eps"), py::arg("eps_inside"));
  m.def("forward", &forward_only, "(y, stats) without autograd; stats (2, n): scale and coefficient per row",
        py::arg("x"), py::arg("weight"), py::arg("bias"), py::arg("k"), py::arg("eps"), py::arg("eps_inside"));
  m.def("backward", &backward_only, "(dx, dgain, dbias) from forward's stats, None where not asked for", py::arg("dy"),
        py::arg("x"), py::arg("weight"), py::arg("bias"), py::arg("stats"), py::arg("k"), py::arg("need_dx"),
        py::arg("need_dw"), py::arg("need_db"));
  m.def("set_stream_min_bytes", [](int64_t bytes) { stream_min_bytes = bytes; },
        "outputs of at least this many bytes are written with streaming stores (x86 with AVX only)", py::arg("bytes"));
  m.def("stream_min_bytes", [] { return stream_min_bytes; });
}
