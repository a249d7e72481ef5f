// The conditional GRU decoder of RNNSearch (tasks/translation/rnnsearch.py, decoder_states; Nematus' cGRU)
// over all T target steps of teacher forcing, as one autograd node on CPU (nn/fused_cgru.py). Per step t,
// from the state h (B, H), with the hoisted input parts a1 = [a1_gates, a1_cand] of GRU1:
//
//   h1    = GRU1(a1[t], h):  s1 = (h * drop1) U1^T + b1, then the fused transition of gru_rows.h (N3, N4)
//   q     = Nq(h1 Wq^T + bq)                                  the attention's query (A = its hidden size)
//   e_s   = v . tanh(keys_s + q),  alpha = softmax over the source's real positions,  c = sum_s alpha_s ctx_s
//   a2    = [N1(c W2^T + b2w)[:2H], N2(...)[2H:]]              GRU2's input part
//   h'    = GRU2(a2, h1):  s2 = (h1 * drop2) U2^T + b2, then the fused transition (its N3, N4)
//
// Every product is one GEMM a step for the whole batch; everything between them runs row by row (batch rows
// in parallel) in one pass forward and one backward, with the attention's tanh recomputed in the backward
// rather than kept (B x S x A per step). The backward runs the steps in reverse, adds into the gradients of
// keys and ctx in place, and computes each weight's gradient as one product over all T x B rows at the end.
// In place of ~30 tensor operators and their autograd nodes per step (docs/performance.md).
// Norms without a gain or bias, linears without a bias and GRUs without recurrent dropout get empty tensors
// in their places (nn/fused_cgru.py).
#include "gru_rows.h"

#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/utils/pybind.h>

#include <limits>

namespace {

using namespace gru_rows;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The tensors handed over, in this order (nn/fused_cgru.py builds the list).
enum Slot : int64_t {
  kA1Gates, kA1Cand, kH0, kKeys, kCtx, kSrcMask, kDrop1, kDrop2,
  kU1, kU1Bias, kWq, kWqBias, kScore, kW2, kW2Bias, kU2, kU2Bias,
  kNorms,  // then gain and bias of each norm below, in this order
  kSlots = kNorms + 14
};
// The norms: GRU1's state-side N3 (2H) and N4 (H), the query's (A), GRU2's input-side N1 (2H), N2 (H) and
// state-side N3 (2H), N4 (H).
enum NormIndex : int64_t { kG1N3, kG1N4, kQuery, kG2N1, kG2N2, kG2N3, kG2N4, kNormCount };

struct Sizes {
  int64_t T, B, S, H, A, C;
  int64_t dim(int64_t norm) const {
    const int64_t dims[kNormCount] = {2 * H, H, A, 2 * H, H, 2 * H, H};
    return dims[norm];
  }
  // offsets of each norm's (gain, bias) gradient in a chunk's partial sums, then the score's (A)
  int64_t offset(int64_t norm) const {
    int64_t at = 0;
    for (int64_t n = 0; n < norm; ++n) at += 2 * dim(n);
    return at;
  }
  int64_t partial_width() const { return offset(kNormCount) + A; }
};

template <typename T>
struct Norms {
  Norm<T> n[kNormCount];
};

// A gain or bias handed over as an empty tensor is absent (nn/fused_cgru.py); ones: at least d ones, the
// gain a norm without one reads in its backward.
template <typename T>
Norms<T> make_norms(const std::vector<Tensor>& x, const Sizes& z, const std::vector<int64_t>& spec,
                    const std::vector<double>& eps, const Tensor& ones) {
  Norms<T> out;
  for (int64_t i = 0; i < kNormCount; ++i) {
    const Tensor &gain = x[kNorms + 2 * i], &bias = x[kNorms + 2 * i + 1];
    const bool has_gain = gain.numel() > 0;
    out.n[i] = {spec[3 * i], z.dim(i), spec[3 * i + 1], static_cast<T>(eps[i]), spec[3 * i + 2] != 0,
                (has_gain ? gain : ones).data_ptr<T>(), has_gain, bias.numel() > 0 ? bias.data_ptr<T>() : nullptr};
  }
  return out;
}

template <typename T>
T dot(const T* x, const T* y, int64_t n) {
  T total = 0;
#pragma omp simd reduction(+ : total)
  for (int64_t i = 0; i < n; ++i) total += x[i] * y[i];
  return total;
}

template <typename T>
void axpy(T a, const T* x, T* y, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

// One batch row's attention forward: alpha (S) and c (C) from the normalized query q (A); th: A scratch.
template <typename T>
void attend(const T* keys, const T* ctx, const bool* mask, const T* v, const T* q, T* alpha, T* c, T* th,
            int64_t S, int64_t A, int64_t C) {
  T top = -std::numeric_limits<T>::infinity();
  for (int64_t s = 0; s < S; ++s) {
    const T* k = keys + s * A;
#pragma omp simd
    for (int64_t a = 0; a < A; ++a) th[a] = k[a] + q[a];
    tanh_(th, A);
    alpha[s] = mask[s] ? dot(th, v, A) : -std::numeric_limits<T>::infinity();  // softmax(masked_fill(-inf))
    top = std::max(top, alpha[s]);
  }
  T total = 0;
  for (int64_t s = 0; s < S; ++s) total += (alpha[s] = std::exp(alpha[s] - top));  // all masked: NaN, as torch
  std::fill(c, c + C, T(0));
  for (int64_t s = 0; s < S; ++s) {
    alpha[s] /= total;
    axpy(alpha[s], ctx + s * C, c, C);
  }
}

// One batch row's attention backward from dc (C): adds into dkeys (S, A), dctx (S, C) and dv (A); writes the
// gradient at the normalized query dq (A). th, dalpha: A and S scratch.
template <typename T>
void attend_backward(const T* keys, const T* ctx, const bool* mask, const T* v, const T* q, const T* alpha, const T* dc,
                     T* dkeys, T* dctx, T* dv, T* dq, T* th, T* dalpha, int64_t S, int64_t A, int64_t C) {
  T weighted = 0;  // sum_s alpha_s dalpha_s
  for (int64_t s = 0; s < S; ++s) {
    dalpha[s] = dot(dc, ctx + s * C, C);
    axpy(alpha[s], dc, dctx + s * C, C);
    weighted += alpha[s] * dalpha[s];
  }
  std::fill(dq, dq + A, T(0));
  for (int64_t s = 0; s < S; ++s) {
    if (!mask[s]) continue;  // a masked score's gradient is 0
    const T de = alpha[s] * (dalpha[s] - weighted);
    const T* k = keys + s * A;
    T* dk = dkeys + s * A;
#pragma omp simd
    for (int64_t a = 0; a < A; ++a) th[a] = k[a] + q[a];
    tanh_(th, A);  // recomputed, not kept
#pragma omp simd
    for (int64_t a = 0; a < A; ++a) {
      const T dpre = de * v[a] * (T(1) - th[a] * th[a]);
      dk[a] += dpre;
      dq[a] += dpre;
      dv[a] += de * th[a];
    }
  }
}

// A recurrent dropout mask handed over as an empty tensor is absent: null, and so are its rows.
template <typename T>
const T* row_ptr(const Tensor& x) { return x.numel() > 0 ? x.data_ptr<T>() : nullptr; }
template <typename T>
const T* at_row(const T* x, int64_t b, int64_t width) { return x ? x + b * width : nullptr; }

// out = x w^T (+ bias, unless empty), into one step's rows of a (T, B, n) buffer (out: a view of them)
void linear_out(Tensor out, const Tensor& bias, const Tensor& x, const Tensor& w) {
  if (bias.numel() > 0) {
    at::addmm_out(out, bias, x, w.t());
  } else {
    at::mm_out(out, x, w.t());
  }
}

struct CGRUFunction : public torch::autograd::Function<CGRUFunction> {
  // -> [states (T, B, H): GRU2's output each step, contexts (T, B, C), s1 (T, B, 3H): GRU1's U1 h before its
  // norms (Table 5; no gradient)]
  static variable_list forward(AutogradContext* ctx, at::TensorList inputs, std::vector<int64_t> spec,
                               std::vector<double> eps) {
    RECORD_FUNCTION("rmsnorm_repro::cgru", std::vector<c10::IValue>());
    TORCH_CHECK(static_cast<int64_t>(inputs.size()) == kSlots && spec.size() == 3 * kNormCount &&
                eps.size() == kNormCount, "cgru: expected ", kSlots, " tensors");
    std::vector<Tensor> x(inputs.begin(), inputs.end());
    x[kA1Gates] = rows_of_steps(x[kA1Gates]);
    x[kA1Cand] = rows_of_steps(x[kA1Cand]);
    for (int64_t i : {kH0, kKeys, kCtx, kDrop1, kDrop2, kScore}) x[i] = x[i].contiguous();
    x[kSrcMask] = x[kSrcMask].to(at::kBool).contiguous();
    const Sizes z{x[kA1Gates].size(0), x[kH0].size(0), x[kKeys].size(1), x[kH0].size(1), x[kKeys].size(2),
                  x[kCtx].size(2)};
    const int64_t T = z.T, B = z.B, S = z.S, H = z.H, A = z.A, C = z.C;
    TORCH_CHECK(T > 0 && x[kA1Gates].sizes() == at::IntArrayRef({T, B, 2 * H}) &&
                x[kA1Cand].sizes() == at::IntArrayRef({T, B, H}) && x[kKeys].sizes() == at::IntArrayRef({B, S, A}) &&
                x[kCtx].sizes() == at::IntArrayRef({B, S, C}) && x[kSrcMask].sizes() == at::IntArrayRef({B, S}) &&
                x[kU1].sizes() == at::IntArrayRef({3 * H, H}) && x[kWq].sizes() == at::IntArrayRef({A, H}) &&
                x[kScore].numel() == A && x[kW2].sizes() == at::IntArrayRef({3 * H, C}) &&
                x[kU2].sizes() == at::IntArrayRef({3 * H, H}),
                "cgru: shapes do not fit a conditional GRU of T=", T, " B=", B, " S=", S, " H=", H, " A=", A, " C=", C);
    for (int64_t i : {kDrop1, kDrop2}) {
      TORCH_CHECK(x[i].numel() == 0 || x[i].sizes() == x[kH0].sizes(), "cgru: a dropout mask must be (B, H) or empty");
    }
    for (int64_t i = 0; i < 2 * kNormCount; ++i) {
      const int64_t n = x[kNorms + i].numel();
      TORCH_CHECK(n == 0 || n == z.dim(i / 2), "cgru: norm ", i / 2, "'s gain or bias must have ", z.dim(i / 2), " values");
    }
    auto opts = x[kH0].options();
    auto steps = [&](int64_t width) { return at::empty({T, B, width}, opts); };
    Tensor states = steps(H), contexts = steps(C), s1 = steps(3 * H), h1 = steps(H), in1 = steps(H), in2 = steps(H);
    Tensor g1 = steps(2 * H), nc1 = steps(H), n1 = steps(H), st1 = steps(4), q = steps(A), qn = steps(A), stq = steps(2);
    Tensor alpha = steps(S), a2 = steps(3 * H), a2n = at::empty({B, 3 * H}, opts), sta = steps(4), s2 = steps(3 * H);
    Tensor g2 = steps(2 * H), nc2 = steps(H), n2 = steps(H), st2 = steps(4);
    const int64_t grain = std::max<int64_t>(1, 32768 / (3 * H));
    const Tensor ones = at::ones({std::max(2 * H, A)}, opts);
    AT_DISPATCH_FLOATING_TYPES(x[kH0].scalar_type(), "cgru_forward", [&] {
      using T_ = scalar_t;
      const Norms<T_> nm = make_norms<T_>(x, z, spec, eps, ones);
      const T_ *D1 = row_ptr<T_>(x[kDrop1]), *D2 = row_ptr<T_>(x[kDrop2]), *V = x[kScore].data_ptr<T_>();
      const T_ *K = x[kKeys].data_ptr<T_>(), *CX = x[kCtx].data_ptr<T_>();
      const bool* M = x[kSrcMask].data_ptr<bool>();
      const int64_t ags0 = x[kA1Gates].stride(0), ags1 = x[kA1Gates].stride(1);
      const int64_t acs0 = x[kA1Cand].stride(0), acs1 = x[kA1Cand].stride(1);
      auto at_step = [](const Tensor& buffer, int64_t t) { return buffer.data_ptr<T_>() + t * buffer.stride(0); };
      for (int64_t b = 0; b < B; ++b) state_input(x[kH0].data_ptr<T_>() + b * H, at_row(D1, b, H), at_step(in1, 0) + b * H, H);
      for (int64_t t = 0; t < T; ++t) {
        const T_* prev = t == 0 ? x[kH0].data_ptr<T_>() : at_step(states, t - 1);
        linear_out(s1.select(0, t), x[kU1Bias], in1.select(0, t), x[kU1]);
        const T_ *AG = x[kA1Gates].data_ptr<T_>() + t * ags0, *AC = x[kA1Cand].data_ptr<T_>() + t * acs0;
        T_ *S1 = at_step(s1, t), *G1 = at_step(g1, t), *NC1 = at_step(nc1, t), *N1 = at_step(n1, t), *ST1 = at_step(st1, t);
        T_ *H1 = at_step(h1, t), *IN2 = at_step(in2, t);
        at::parallel_for(0, B, grain, [&](int64_t begin, int64_t end) {
          for (int64_t b = begin; b < end; ++b) {
            forward_row(nm.n[kG1N3], nm.n[kG1N4], AG + b * ags1, AC + b * acs1, prev + b * H, S1 + b * 3 * H,
                        G1 + b * 2 * H, NC1 + b * H, N1 + b * H, H1 + b * H, ST1 + b * 4);
            state_input(H1 + b * H, at_row(D2, b, H), IN2 + b * H, H);
          }
        });
        linear_out(q.select(0, t), x[kWqBias], h1.select(0, t), x[kWq]);
        T_ *Q = at_step(q, t), *QN = at_step(qn, t), *STQ = at_step(stq, t), *AL = at_step(alpha, t);
        T_* CT = at_step(contexts, t);
        at::parallel_for(0, B, 1, [&](int64_t begin, int64_t end) {
          std::vector<T_> th(A);
          for (int64_t b = begin; b < end; ++b) {
            norm_forward(nm.n[kQuery], Q + b * A, QN + b * A, STQ + b * 2);
            attend(K + b * S * A, CX + b * S * C, M + b * S, V, QN + b * A, AL + b * S, CT + b * C, th.data(), S, A, C);
          }
        });
        linear_out(a2.select(0, t), x[kW2Bias], contexts.select(0, t), x[kW2]);
        linear_out(s2.select(0, t), x[kU2Bias], in2.select(0, t), x[kU2]);
        T_ *A2 = at_step(a2, t), *A2N = a2n.data_ptr<T_>(), *STA = at_step(sta, t), *S2 = at_step(s2, t);
        T_ *G2 = at_step(g2, t), *NC2 = at_step(nc2, t), *N2 = at_step(n2, t), *ST2 = at_step(st2, t);
        T_ *O = at_step(states, t), *IN1 = t + 1 < T ? at_step(in1, t + 1) : nullptr;
        at::parallel_for(0, B, grain, [&](int64_t begin, int64_t end) {
          for (int64_t b = begin; b < end; ++b) {
            T_ *a = A2 + b * 3 * H, *an = A2N + b * 3 * H, *st = STA + b * 4;
            norm_forward(nm.n[kG2N1], a, an, st);
            norm_forward(nm.n[kG2N2], a + 2 * H, an + 2 * H, st + 2);
            forward_row(nm.n[kG2N3], nm.n[kG2N4], an, an + 2 * H, H1 + b * H, S2 + b * 3 * H, G2 + b * 2 * H,
                        NC2 + b * H, N2 + b * H, O + b * H, ST2 + b * 4);
            if (IN1) state_input(O + b * H, at_row(D1, b, H), IN1 + b * H, H);
          }
        });
      }
    });
    std::vector<Tensor> saved(x.begin(), x.end());
    for (const Tensor& t : {states, contexts, s1, h1, in1, in2, g1, nc1, n1, st1, q, qn, stq, alpha, a2, sta, s2, g2, nc2,
                            n2, st2}) {
      saved.push_back(t);
    }
    ctx->save_for_backward(saved);
    ctx->saved_data["spec"] = spec;
    ctx->saved_data["eps"] = eps;
    ctx->mark_non_differentiable({s1});
    return {states, contexts, s1};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    RECORD_FUNCTION("rmsnorm_repro::cgru_backward", std::vector<c10::IValue>());
    TORCH_CHECK(!at::GradMode::is_enabled(), "the fused conditional GRU is differentiable once (no create_graph / "
                "double backward); set NormGRUCell.fused = False for higher-order gradients");
    const auto all = ctx->get_saved_variables();
    const std::vector<Tensor> x(all.begin(), all.begin() + kSlots);
    const Tensor *r = all.data() + kSlots;
    const Tensor &states = r[0], &contexts = r[1], &s1 = r[2], &h1 = r[3], &in1 = r[4], &in2 = r[5], &g1 = r[6];
    const Tensor &nc1 = r[7], &n1 = r[8], &st1 = r[9], &q = r[10], &qn = r[11], &stq = r[12], &alpha = r[13];
    const Tensor &a2 = r[14], &sta = r[15], &s2 = r[16], &g2 = r[17], &nc2 = r[18], &n2 = r[19], &st2 = r[20];
    const auto spec = ctx->saved_data["spec"].toIntVector();
    const auto eps = ctx->saved_data["eps"].toDoubleVector();
    const bool need_dh0 = ctx->needs_input_grad(kH0);
    const Sizes z{states.size(0), states.size(1), x[kKeys].size(1), states.size(2), x[kKeys].size(2), x[kCtx].size(2)};
    const int64_t T = z.T, B = z.B, S = z.S, H = z.H, A = z.A, C = z.C;
    auto opts = states.options();
    const Tensor d_states = grads[0].defined() ? grads[0].contiguous() : Tensor();
    const Tensor d_contexts = grads[1].defined() ? grads[1].contiguous() : Tensor();
    auto steps = [&](int64_t width) { return at::empty({T, B, width}, opts); };
    Tensor da1g = steps(2 * H), da1c = steps(H), ds1 = steps(3 * H), dq = steps(A), da2 = steps(3 * H), ds2 = steps(3 * H);
    Tensor dkeys = at::zeros({B, S, A}, opts), dctx = at::zeros({B, S, C}, opts);
    Tensor dh = d_states.defined() ? d_states.select(0, T - 1).clone() : at::zeros({B, H}, opts);
    Tensor direct = at::empty({B, H}, opts), dh1 = at::empty({B, H}, opts), through = at::empty({B, H}, opts);
    Tensor dc = at::empty({B, C}, opts);
    const int64_t chunks = chunks_for(B, 3 * H), width = z.partial_width();
    Tensor partial = at::zeros({chunks, width}, opts);
    const Tensor ones = at::ones({std::max(2 * H, A)}, opts);
    AT_DISPATCH_FLOATING_TYPES(states.scalar_type(), "cgru_backward", [&] {
      using T_ = scalar_t;
      const Norms<T_> nm = make_norms<T_>(x, z, spec, eps, ones);
      const T_ *D1 = row_ptr<T_>(x[kDrop1]), *D2 = row_ptr<T_>(x[kDrop2]), *V = x[kScore].data_ptr<T_>();
      const T_ *K = x[kKeys].data_ptr<T_>(), *CX = x[kCtx].data_ptr<T_>();
      const bool* M = x[kSrcMask].data_ptr<bool>();
      T_ *DK = dkeys.data_ptr<T_>(), *DCX = dctx.data_ptr<T_>(), *P = partial.data_ptr<T_>();
      T_ *DH = dh.data_ptr<T_>(), *DIR = direct.data_ptr<T_>(), *DH1 = dh1.data_ptr<T_>(), *TH = through.data_ptr<T_>();
      T_* DC = dc.data_ptr<T_>();
      auto at_step = [](const Tensor& buffer, int64_t t) { return buffer.data_ptr<T_>() + t * buffer.stride(0); };
      // per-chunk partial sums of one norm's gain and bias gradients (null: the norm has none)
      auto gain_of = [&](T_* p, int64_t norm) { return nm.n[norm].has_gain ? p + z.offset(norm) : nullptr; };
      auto bias_of = [&](T_* p, int64_t norm) { return nm.n[norm].bias ? p + z.offset(norm) + z.dim(norm) : nullptr; };
      // rows of a chunk: [B * chunk / chunks, B * (chunk + 1) / chunks)
      auto over_chunks = [&](auto&& row) {
        at::parallel_for(0, chunks, 1, [&](int64_t chunk_begin, int64_t chunk_end) {
          for (int64_t chunk = chunk_begin; chunk < chunk_end; ++chunk) {
            for (int64_t b = B * chunk / chunks; b < B * (chunk + 1) / chunks; ++b) row(b, P + chunk * width);
          }
        });
      };
      for (int64_t t = T - 1; t >= 0; --t) {
        const T_* prev = t == 0 ? x[kH0].data_ptr<T_>() : at_step(states, t - 1);
        // GRU2 and its input norms, from dh (the gradient at this step's output)
        const T_ *A2 = at_step(a2, t), *STA = at_step(sta, t), *S2 = at_step(s2, t), *G2 = at_step(g2, t);
        const T_ *NC2 = at_step(nc2, t), *N2 = at_step(n2, t), *ST2 = at_step(st2, t), *H1 = at_step(h1, t);
        T_ *DA2 = at_step(da2, t), *DS2 = at_step(ds2, t);
        over_chunks([&](int64_t b, T_* p) {
          T_* d = DA2 + b * 3 * H;  // first the gradient at GRU2's normalized input, then at a2
          backward_row(nm.n[kG2N3], nm.n[kG2N4], DH + b * H, H1 + b * H, S2 + b * 3 * H, G2 + b * 2 * H, NC2 + b * H,
                       N2 + b * H, ST2 + b * 4, d, d + 2 * H, DIR + b * H, DS2 + b * 3 * H, gain_of(p, kG2N3),
                       bias_of(p, kG2N3), gain_of(p, kG2N4), bias_of(p, kG2N4));
          const T_ *a = A2 + b * 3 * H, *st = STA + b * 4;
          norm_backward(nm.n[kG2N1], a, st, d, d, gain_of(p, kG2N1), bias_of(p, kG2N1));
          norm_backward(nm.n[kG2N2], a + 2 * H, st + 2, d + 2 * H, d + 2 * H, gain_of(p, kG2N2), bias_of(p, kG2N2));
        });
        at::mm_out(through, ds2.select(0, t), x[kU2]);
        at::mm_out(dc, da2.select(0, t), x[kW2]);
        // the attention and the query's norm, from dc (+ the contexts' own gradient)
        const T_ *Q = at_step(q, t), *QN = at_step(qn, t), *STQ = at_step(stq, t), *AL = at_step(alpha, t);
        const T_* DCT = d_contexts.defined() ? at_step(d_contexts, t) : nullptr;
        T_* DQ = at_step(dq, t);
        over_chunks([&](int64_t b, T_* p) {
          T_* d = DC + b * C;
          if (DCT) axpy(T_(1), DCT + b * C, d, C);
          carry_back(DIR + b * H, TH + b * H, at_row(D2, b, H), static_cast<const T_*>(nullptr), DH1 + b * H, H);
          std::vector<T_> scratch(2 * A + S);  // the query's gradient, tanh, dalpha
          T_ *dqn = scratch.data(), *th = dqn + A, *dalpha = th + A;
          attend_backward(K + b * S * A, CX + b * S * C, M + b * S, V, QN + b * A, AL + b * S, d, DK + b * S * A,
                          DCX + b * S * C, p + z.offset(kNormCount), dqn, th, dalpha, S, A, C);
          norm_backward(nm.n[kQuery], Q + b * A, STQ + b * 2, dqn, DQ + b * A, gain_of(p, kQuery), bias_of(p, kQuery));
        });
        at::mm_out(through, dq.select(0, t), x[kWq]);
        // GRU1, from dh1 (through GRU2's state and the query)
        const T_ *S1 = at_step(s1, t), *G1 = at_step(g1, t), *NC1 = at_step(nc1, t), *N1 = at_step(n1, t);
        const T_* ST1 = at_step(st1, t);
        T_ *DA1G = at_step(da1g, t), *DA1C = at_step(da1c, t), *DS1 = at_step(ds1, t);
        over_chunks([&](int64_t b, T_* p) {
          axpy(T_(1), TH + b * H, DH1 + b * H, H);
          backward_row(nm.n[kG1N3], nm.n[kG1N4], DH1 + b * H, prev + b * H, S1 + b * 3 * H, G1 + b * 2 * H,
                       NC1 + b * H, N1 + b * H, ST1 + b * 4, DA1G + b * 2 * H, DA1C + b * H, DIR + b * H,
                       DS1 + b * 3 * H, gain_of(p, kG1N3), bias_of(p, kG1N3), gain_of(p, kG1N4), bias_of(p, kG1N4));
        });
        if (t == 0 && !need_dh0) break;  // h0 without a gradient: no product for it
        at::mm_out(through, ds1.select(0, t), x[kU1]);
        // the gradient at the previous step's output, with that step's own output gradient
        const T_* DOP = d_states.defined() && t > 0 ? at_step(d_states, t - 1) : nullptr;
        at::parallel_for(0, B, std::max<int64_t>(1, 32768 / H), [&](int64_t begin, int64_t end) {
          for (int64_t b = begin; b < end; ++b) {
            carry_back(DIR + b * H, TH + b * H, at_row(D1, b, H), DOP ? DOP + b * H : nullptr, DH + b * H, H);
          }
        });
      }
    });
    auto weight_grad = [&](const Tensor& d_out, const Tensor& input) {
      return d_out.reshape({T * B, d_out.size(2)}).t().mm(input.reshape({T * B, input.size(2)}));
    };
    auto bias_grad = [&](const Tensor& d_out, int64_t slot) {
      return x[slot].numel() > 0 ? d_out.reshape({T * B, d_out.size(2)}).sum(0) : Tensor();
    };
    const Tensor sums = chunks == 1 ? partial[0] : partial.sum(0);
    variable_list out(kSlots + 2);
    out[kA1Gates] = da1g;
    out[kA1Cand] = da1c;
    out[kH0] = need_dh0 ? dh : Tensor();
    out[kKeys] = dkeys;
    out[kCtx] = dctx;
    out[kU1] = weight_grad(ds1, in1);
    out[kU1Bias] = bias_grad(ds1, kU1Bias);
    out[kWq] = weight_grad(dq, h1);
    out[kWqBias] = bias_grad(dq, kWqBias);
    out[kScore] = sums.narrow(0, z.offset(kNormCount), A).clone().view(x[kScore].sizes());
    out[kW2] = weight_grad(da2, contexts);
    out[kW2Bias] = bias_grad(da2, kW2Bias);
    out[kU2] = weight_grad(ds2, in2);
    out[kU2Bias] = bias_grad(ds2, kU2Bias);
    for (int64_t i = 0; i < kNormCount; ++i) {
      if (x[kNorms + 2 * i].numel() > 0) out[kNorms + 2 * i] = sums.narrow(0, z.offset(i), z.dim(i)).clone();
      if (x[kNorms + 2 * i + 1].numel() > 0) out[kNorms + 2 * i + 1] = sums.narrow(0, z.offset(i) + z.dim(i), z.dim(i)).clone();
    }
    return out;
  }
};

std::vector<Tensor> cgru(const std::vector<Tensor>& inputs, std::vector<int64_t> spec, std::vector<double> eps) {
  return CGRUFunction::apply(at::TensorList(inputs), std::move(spec), std::move(eps));
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("cgru", &cgru, "a conditional GRU decoder with attention over all target steps, forward and backward fused",
        py::arg("inputs"), py::arg("spec"), py::arg("eps"));
}
