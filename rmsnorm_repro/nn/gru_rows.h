// A GRU transition's row arithmetic on CPU, shared by the fused kernels of nn/gru_cell_cpu.cpp (one
// transition; one direction of a layer) and nn/cgru_cpu.cpp (the RNNSearch conditional GRU decoder):
//
//   [s_r, s_z] = N3(s[:, :2H]),  s_c = N4(s[:, 2H:])
//   r, z = sigmoid(a_r + s_r), sigmoid(a_z + s_z);  n = tanh(a_c + r * s_c);  h' = n + z * (h - n)
//
// and one row of a norm: identity, RMSNorm / pRMSNorm (either eps placement) or LayerNorm, with an optional
// gain and bias: the same formulas as norms/fused/rmsnorm_cpu.cpp and torch's layer_norm (biased variance).
// sigmoid and tanh call SLEEF (exported by libtorch_cpu, whose own kernels use it) on float32 vectors:
// exp within 1 ulp, tanh within 3.5 (its 1-ulp version took 2.6x as long here); double (the tests'
// reference dtype) uses the C library's. Included by name: norms/fused/cpu.py copies it beside the source.
#pragma once
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/utils/pybind.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>
#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
extern "C" {
#if defined(__AVX512F__)
__m512 Sleef_expf16_u10(__m512);
__m512 Sleef_tanhf16_u35(__m512);
#else
__m256 Sleef_expf8_u10(__m256);
__m256 Sleef_tanhf8_u35(__m256);
#endif
}
#endif

namespace gru_rows {

using at::Tensor;

enum Mode : int64_t { kIdentity = 0, kRms = 1, kLayer = 2 };

// One state-side norm: its kind, statistic length k (pRMSNorm), eps and its placement, gain and bias.
template <typename T>
struct Norm {
  int64_t mode, d, k;
  T eps;
  bool eps_inside;
  const T* gain;  // never null: ones where the norm has no gain (has_gain false)
  bool has_gain;
  const T* bias;  // nullptr: none
};

// x[i] = sigmoid(x[i]) and x[i] = tanh(x[i]) for i in [0, n).
template <typename T>
void sigmoid_(T* x, int64_t n) {
  int64_t i = 0;
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<T, float>) {
    const __m512 one = _mm512_set1_ps(1.f), zero = _mm512_setzero_ps();
    for (; i + 16 <= n; i += 16) {
      const __m512 e = Sleef_expf16_u10(_mm512_sub_ps(zero, _mm512_loadu_ps(x + i)));
      _mm512_storeu_ps(x + i, _mm512_div_ps(one, _mm512_add_ps(one, e)));
    }
  }
#elif defined(__AVX2__)
  if constexpr (std::is_same_v<T, float>) {
    const __m256 one = _mm256_set1_ps(1.f), zero = _mm256_setzero_ps();
    for (; i + 8 <= n; i += 8) {
      const __m256 e = Sleef_expf8_u10(_mm256_sub_ps(zero, _mm256_loadu_ps(x + i)));
      _mm256_storeu_ps(x + i, _mm256_div_ps(one, _mm256_add_ps(one, e)));
    }
  }
#endif
  for (; i < n; ++i) x[i] = T(1) / (T(1) + std::exp(-x[i]));
}

template <typename T>
void tanh_(T* x, int64_t n) {
  int64_t i = 0;
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<T, float>) {
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(x + i, Sleef_tanhf16_u35(_mm512_loadu_ps(x + i)));
  }
#elif defined(__AVX2__)
  if constexpr (std::is_same_v<T, float>) {
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, Sleef_tanhf8_u35(_mm256_loadu_ps(x + i)));
  }
#endif
  for (; i < n; ++i) x[i] = std::tanh(x[i]);
}

template <typename T>
T row_sum(const T* x, int64_t n) {
  T total = 0;
#pragma omp simd reduction(+ : total)
  for (int64_t i = 0; i < n; ++i) total += x[i];
  return total;
}

// y = N(x) over one row; stat[0], stat[1]: what the backward needs (RMS: the scale s and the coefficient c
// of norms/fused/rmsnorm_cpu.cpp; LayerNorm: 1/sqrt(var + eps) and the mean).
template <typename T>
void norm_forward(const Norm<T>& nm, const T* x, T* y, T* stat) {
  const int64_t d = nm.d;
  T a = 1, c = 0;
  if (nm.mode == kRms) {
    T ss = 0;
#pragma omp simd reduction(+ : ss)
    for (int64_t i = 0; i < nm.k; ++i) ss += x[i] * x[i];
    const T ms = ss / T(nm.k);
    if (nm.eps_inside) {
      a = T(1) / std::sqrt(ms + nm.eps);
      c = a * a * a / T(nm.k);
    } else {
      const T rms = std::sqrt(ms);
      a = T(1) / (rms + nm.eps);
      c = rms > 0 ? a * a / (T(nm.k) * rms) : T(0);
    }
#pragma omp simd
    for (int64_t i = 0; i < d; ++i) y[i] = x[i] * a;
  } else if (nm.mode == kLayer) {
    c = row_sum(x, d) / T(d);
    T var = 0;
#pragma omp simd reduction(+ : var)
    for (int64_t i = 0; i < d; ++i) var += (x[i] - c) * (x[i] - c);
    a = T(1) / std::sqrt(var / T(d) + nm.eps);
#pragma omp simd
    for (int64_t i = 0; i < d; ++i) y[i] = (x[i] - c) * a;
  } else {
    std::copy(x, x + d, y);
  }
  if (nm.has_gain) {
#pragma omp simd
    for (int64_t i = 0; i < d; ++i) y[i] *= nm.gain[i];
  }
  if (nm.bias) {
#pragma omp simd
    for (int64_t i = 0; i < d; ++i) y[i] += nm.bias[i];
  }
  stat[0] = a;
  stat[1] = c;
}

// dx = the gradient through N at x given dy (dx may be dy itself); dgain += dy * xhat, dbias += dy.
template <typename T>
void norm_backward(const Norm<T>& nm, const T* x, const T* stat, const T* dy, T* dx, T* dgain, T* dbias) {
  const int64_t d = nm.d;
  const T a = stat[0], c = stat[1];
  const T* g = nm.gain;
  if (dbias) {
#pragma omp simd
    for (int64_t i = 0; i < d; ++i) dbias[i] += dy[i];
  }
  if (nm.mode == kRms) {
    T sum = 0;  // sum(g * dy * x), over the whole row
#pragma omp simd reduction(+ : sum)
    for (int64_t i = 0; i < d; ++i) sum += g[i] * dy[i] * x[i];
    if (dgain) {
#pragma omp simd
      for (int64_t i = 0; i < d; ++i) dgain[i] += dy[i] * x[i] * a;
    }
    const T cs = c * sum;
#pragma omp simd
    for (int64_t i = 0; i < nm.k; ++i) dx[i] = a * g[i] * dy[i] - cs * x[i];
#pragma omp simd
    for (int64_t i = nm.k; i < d; ++i) dx[i] = a * g[i] * dy[i];
  } else if (nm.mode == kLayer) {
    T m1 = 0, m2 = 0;  // mean(g * dy), mean(g * dy * xhat)
#pragma omp simd reduction(+ : m1, m2)
    for (int64_t i = 0; i < d; ++i) {
      const T gy = g[i] * dy[i];
      m1 += gy;
      m2 += gy * (x[i] - c) * a;
    }
    m1 /= T(d);
    m2 /= T(d);
    if (dgain) {
#pragma omp simd
      for (int64_t i = 0; i < d; ++i) dgain[i] += dy[i] * (x[i] - c) * a;
    }
#pragma omp simd
    for (int64_t i = 0; i < d; ++i) dx[i] = a * (g[i] * dy[i] - m1 - (x[i] - c) * a * m2);
  } else {
    if (dgain) {
#pragma omp simd
      for (int64_t i = 0; i < d; ++i) dgain[i] += dy[i] * x[i];
    }
    if (dx != dy) std::copy(dy, dy + d, dx);
  }
}

// One row forward: g = [r, z] (2H), nc = N4's output, n, the new state o, st = both norms' statistics.
template <typename T>
void forward_row(const Norm<T>& n3, const Norm<T>& n4, const T* ag, const T* ac, const T* h, const T* s, T* g, T* nc,
                 T* n, T* o, T* st) {
  const int64_t H = n4.d;
  norm_forward(n3, s, g, st);
  norm_forward(n4, s + 2 * H, nc, st + 2);
#pragma omp simd
  for (int64_t j = 0; j < 2 * H; ++j) g[j] += ag[j];
  sigmoid_(g, 2 * H);
#pragma omp simd
  for (int64_t j = 0; j < H; ++j) n[j] = ac[j] + g[j] * nc[j];
  tanh_(n, H);
#pragma omp simd
  for (int64_t j = 0; j < H; ++j) o[j] = n[j] + g[H + j] * (h[j] - n[j]);
}

// One row backward from dout: the gradients at a_gates, a_cand, h (through h' only) and s; the norms' gain
// and bias gradients added into dg3, db3, dg4, db4 where not null.
template <typename T>
void backward_row(const Norm<T>& n3, const Norm<T>& n4, const T* dout, const T* h, const T* s, const T* g, const T* nc,
                  const T* n, const T* st, T* dag, T* dac, T* dh, T* ds, T* dg3, T* db3, T* dg4, T* db4) {
  const int64_t H = n4.d;
#pragma omp simd
  for (int64_t j = 0; j < H; ++j) {
    const T r = g[j], z = g[H + j], dy = dout[j];
    const T dpre_n = dy * (T(1) - z) * (T(1) - n[j] * n[j]);
    dh[j] = dy * z;
    dac[j] = dpre_n;
    dag[j] = dpre_n * nc[j] * r * (T(1) - r);
    dag[H + j] = dy * (h[j] - n[j]) * z * (T(1) - z);
    ds[2 * H + j] = dpre_n * r;  // the gradient at N4's output, turned into N4's input's below
  }
  norm_backward(n4, s + 2 * H, st + 2, ds + 2 * H, ds + 2 * H, dg4, db4);
  norm_backward(n3, s, st, dag, ds, dg3, db3);  // a_gates and N3's output get the same gradient
}

// The rows of a 2-D tensor lie at stride(0) with unit stride inside a row (a gate block sliced out of a
// wider projection, one time step of a hoisted input part): used in place; anything else is copied.
inline Tensor rows_of(const Tensor& x) { return x.dim() == 2 && x.stride(1) == 1 && x.stride(0) >= x.size(1) ? x : x.contiguous(); }
// The same for (T, B, D) per-step rows (the hoisted input parts, a gate block sliced out of them).
inline Tensor rows_of_steps(const Tensor& x) { return x.dim() == 3 && x.stride(2) == 1 ? x : x.contiguous(); }

struct Spec {
  int64_t mode, k;
  double eps;
  bool eps_inside;
};

// ones: at least d ones, the gain of a norm without one (no branch in the loops).
template <typename T>
Norm<T> make_norm(const Spec& s, int64_t d, const Tensor& gain, const Tensor& bias, const Tensor& ones) {
  return {s.mode, d, s.k, static_cast<T>(s.eps), s.eps_inside, (gain.defined() ? gain : ones).data_ptr<T>(),
          gain.defined(), bias.defined() ? bias.data_ptr<T>() : nullptr};
}

inline int64_t chunks_for(int64_t rows, int64_t width) {
  return std::max<int64_t>(1, std::min<int64_t>({at::get_num_threads(), rows, rows * width / 32768}));
}

// in[j] = h[j] * drop[j] (drop null: h[j]): the next step's input to the state projection, one row.
template <typename T>
void state_input(const T* h, const T* drop, T* in, int64_t H) {
  if (drop) {
#pragma omp simd
    for (int64_t j = 0; j < H; ++j) in[j] = h[j] * drop[j];
  } else {
    std::copy(h, h + H, in);
  }
}

// dh[j] = direct[j] + through_s[j] * drop[j] (+ d_out[j]): the gradient at the previous step's state, one row.
template <typename T>
void carry_back(const T* direct, const T* through_s, const T* drop, const T* d_out, T* dh, int64_t H) {
#pragma omp simd
  for (int64_t j = 0; j < H; ++j) dh[j] = direct[j] + through_s[j] * (drop ? drop[j] : T(1)) + (d_out ? d_out[j] : T(0));
}

}  // namespace gru_rows
