// Fused GRU kernels for CPU (nn/gru.py, nn/fused_gru.py), on the row arithmetic of gru_rows.h:
// - gru_combine: one transition (NormGRUCell.combine) given the normalized input parts a_gates (B, 2H),
//   a_cand (B, H), the state h (B, H) and its projection s = U h (B, 3H), in one pass over each row forward
//   and one backward, instead of ~10 tensor operators and their autograd nodes per time step (the gap
//   between the recurrent layers and their matrix products: docs/performance.md);
// - gru_sequence: one direction of a NormGRU layer, every step, as one autograd node.
// Rows run in parallel (at::parallel_for); the gains' gradients come from per-chunk partial sums added at
// the end, so the result does not depend on thread timing.
#include "gru_rows.h"

#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/utils/pybind.h>

namespace {

using namespace gru_rows;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct GRUCombineFunction : public torch::autograd::Function<GRUCombineFunction> {
  static Tensor forward(AutogradContext* ctx, const Tensor& a_gates_in, const Tensor& a_cand_in, const Tensor& h_in,
                        const Tensor& s_in, const std::optional<Tensor>& gain3, const std::optional<Tensor>& bias3,
                        const std::optional<Tensor>& gain4, const std::optional<Tensor>& bias4, int64_t mode3, int64_t k3,
                        double eps3, bool inside3, int64_t mode4, int64_t k4, double eps4, bool inside4) {
    RECORD_FUNCTION("rmsnorm_repro::gru_combine", std::vector<c10::IValue>());
    const Tensor a_gates = rows_of(a_gates_in), a_cand = rows_of(a_cand_in), h = rows_of(h_in), s = rows_of(s_in);
    const int64_t B = h.size(0), H = h.size(1);
    TORCH_CHECK(a_gates.sizes() == at::IntArrayRef({B, 2 * H}) && a_cand.sizes() == h.sizes() &&
                s.sizes() == at::IntArrayRef({B, 3 * H}), "gru_combine: shapes must be a_gates (B, 2H), a_cand (B, H), "
                "h (B, H), s (B, 3H); got ", a_gates.sizes(), a_cand.sizes(), h.sizes(), s.sizes());
    const Tensor g3 = gain3.value_or(Tensor()), b3 = bias3.value_or(Tensor());
    const Tensor g4 = gain4.value_or(Tensor()), b4 = bias4.value_or(Tensor());
    auto opts = h.options();
    Tensor out = at::empty({B, H}, opts), gates = at::empty({B, 2 * H}, opts), cand = at::empty({B, H}, opts);
    Tensor n_out = at::empty({B, H}, opts), stats = at::empty({B, 4}, opts);
    const Spec spec3{mode3, k3, eps3, inside3}, spec4{mode4, k4, eps4, inside4};
    AT_DISPATCH_FLOATING_TYPES(h.scalar_type(), "gru_combine_forward", [&] {
      using T = scalar_t;
      const Tensor ones = at::ones({2 * H}, opts);
      const Norm<T> n3 = make_norm<T>(spec3, 2 * H, g3, b3, ones), n4 = make_norm<T>(spec4, H, g4, b4, ones);
      const T *AG = a_gates.data_ptr<T>(), *AC = a_cand.data_ptr<T>(), *Hp = h.data_ptr<T>(), *S = s.data_ptr<T>();
      const int64_t ags = a_gates.stride(0), acs = a_cand.stride(0), hs = h.stride(0), ss = s.stride(0);
      T *O = out.data_ptr<T>(), *G = gates.data_ptr<T>(), *NC = cand.data_ptr<T>(), *N = n_out.data_ptr<T>();
      T* ST = stats.data_ptr<T>();
      at::parallel_for(0, B, std::max<int64_t>(1, 32768 / (3 * H)), [&](int64_t begin, int64_t end) {
        for (int64_t b = begin; b < end; ++b) {
          forward_row(n3, n4, AG + b * ags, AC + b * acs, Hp + b * hs, S + b * ss, G + b * 2 * H, NC + b * H, N + b * H,
                      O + b * H, ST + b * 4);
        }
      });
    });
    ctx->save_for_backward({h, s, g3, g4, gates, cand, n_out, stats});
    ctx->saved_data["spec"] = std::vector<int64_t>{mode3, k3, inside3, mode4, k4, inside4};
    ctx->saved_data["eps"] = std::vector<double>{eps3, eps4};
    ctx->saved_data["bias"] = std::vector<bool>{b3.defined(), b4.defined()};
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    RECORD_FUNCTION("rmsnorm_repro::gru_combine_backward", std::vector<c10::IValue>());
    TORCH_CHECK(!at::GradMode::is_enabled(), "the fused GRU cell is differentiable once (no create_graph / double "
                "backward); set NormGRUCell.fused = False for higher-order gradients");
    const auto saved = ctx->get_saved_variables();
    const Tensor &h = saved[0], &s = saved[1], &g3 = saved[2], &g4 = saved[3];
    const Tensor &gates = saved[4], &cand = saved[5], &n_out = saved[6], &stats = saved[7];
    const auto spec = ctx->saved_data["spec"].toIntVector();
    const auto eps = ctx->saved_data["eps"].toDoubleVector();
    const auto has_bias = ctx->saved_data["bias"].toBoolList();
    const Spec spec3{spec[0], spec[1], eps[0], spec[2] != 0}, spec4{spec[3], spec[4], eps[1], spec[5] != 0};
    const Tensor dout = grads[0].contiguous();
    const int64_t B = h.size(0), H = h.size(1);
    auto opts = h.options();
    Tensor da_gates = at::empty({B, 2 * H}, opts), da_cand = at::empty({B, H}, opts), dh = at::empty({B, H}, opts);
    Tensor ds = at::empty({B, 3 * H}, opts);
    const int64_t chunks = chunks_for(B, 3 * H);
    // per chunk: dgain3 (2H), dbias3 (2H), dgain4 (H), dbias4 (H)
    Tensor partial = at::zeros({chunks, 6 * H}, opts);
    AT_DISPATCH_FLOATING_TYPES(h.scalar_type(), "gru_combine_backward", [&] {
      using T = scalar_t;
      const Tensor ones = at::ones({2 * H}, opts);
      const Norm<T> n3 = make_norm<T>(spec3, 2 * H, g3, Tensor(), ones), n4 = make_norm<T>(spec4, H, g4, Tensor(), ones);
      const T *DO = dout.data_ptr<T>(), *Hp = h.data_ptr<T>(), *S = s.data_ptr<T>(), *G = gates.data_ptr<T>();
      const T *NC = cand.data_ptr<T>(), *N = n_out.data_ptr<T>(), *ST = stats.data_ptr<T>();
      const int64_t hs = h.stride(0), ss = s.stride(0);
      T *DAG = da_gates.data_ptr<T>(), *DAC = da_cand.data_ptr<T>(), *DH = dh.data_ptr<T>(), *DS = ds.data_ptr<T>();
      T* P = partial.data_ptr<T>();
      const bool dg3 = g3.defined(), dg4 = g4.defined(), db3 = has_bias.get(0), db4 = has_bias.get(1);
      at::parallel_for(0, chunks, 1, [&](int64_t chunk_begin, int64_t chunk_end) {
        for (int64_t chunk = chunk_begin; chunk < chunk_end; ++chunk) {
          T* p = P + chunk * 6 * H;  // this chunk's partial sums
          for (int64_t b = B * chunk / chunks; b < B * (chunk + 1) / chunks; ++b) {
            backward_row(n3, n4, DO + b * H, Hp + b * hs, S + b * ss, G + b * 2 * H, NC + b * H, N + b * H, ST + b * 4,
                         DAG + b * 2 * H, DAC + b * H, DH + b * H, DS + b * 3 * H, dg3 ? p : nullptr,
                         db3 ? p + 2 * H : nullptr, dg4 ? p + 4 * H : nullptr, db4 ? p + 5 * H : nullptr);
          }
        }
      });
    });
    const Tensor sums = chunks == 1 ? partial[0] : partial.sum(0);
    auto part = [&](int64_t at, int64_t len, bool present) { return present ? sums.narrow(0, at, len).clone() : Tensor(); };
    return {da_gates, da_cand, dh, ds,
            part(0, 2 * H, g3.defined()), part(2 * H, 2 * H, has_bias.get(0)),
            part(4 * H, H, g4.defined()), part(5 * H, H, has_bias.get(1)),
            Tensor(), Tensor(), Tensor(), Tensor(), Tensor(), Tensor(), Tensor(), Tensor()};
  }
};

Tensor gru_combine(const Tensor& a_gates, const Tensor& a_cand, const Tensor& h, const Tensor& s,
                   const std::optional<Tensor>& gain3, const std::optional<Tensor>& bias3,
                   const std::optional<Tensor>& gain4, const std::optional<Tensor>& bias4, int64_t mode3, int64_t k3,
                   double eps3, bool inside3, int64_t mode4, int64_t k4, double eps4, bool inside4) {
  return GRUCombineFunction::apply(a_gates, a_cand, h, s, gain3, bias3, gain4, bias4, mode3, k3, eps3, inside3, mode4, k4,
                                   eps4, inside4);
}

// One direction of a NormGRU layer (nn/gru.py, NormGRU._run) as one autograd node: T transitions, each the one
// product s_t = (h_{t-1} * drop) U^T (+ b) and the fused transition above, rows at padded steps keeping their
// state; the backward runs the steps in reverse with one product per step for the state's gradient and computes
// U's (and b's) gradient as one product over all T x B rows at the end (as LoopLinear does). In place of ~8 tensor
// operators and their autograd nodes per step, the per-step copies, and the stack of the outputs.
struct GRUSequenceFunction : public torch::autograd::Function<GRUSequenceFunction> {
  // a_gates (T, B, 2H), a_cand (T, B, H), h0 (B, H), weight U (3H, H), bias (3H), drop (B, H), mask (T, B) bool
  // -> [outputs (T, B, H): the state after each step, last (B, H): the state after the last step in order]
  static variable_list forward(AutogradContext* ctx, const Tensor& a_gates_in, const Tensor& a_cand_in, const Tensor& h0_in,
                               const Tensor& weight, const std::optional<Tensor>& bias, const std::optional<Tensor>& gain3,
                               const std::optional<Tensor>& bias3, const std::optional<Tensor>& gain4,
                               const std::optional<Tensor>& bias4, const std::optional<Tensor>& drop_in,
                               const std::optional<Tensor>& mask_in, bool reverse, int64_t mode3, int64_t k3, double eps3,
                               bool inside3, int64_t mode4, int64_t k4, double eps4, bool inside4) {
    RECORD_FUNCTION("rmsnorm_repro::gru_sequence", std::vector<c10::IValue>());
    const Tensor a_gates = rows_of_steps(a_gates_in), a_cand = rows_of_steps(a_cand_in), h0 = h0_in.contiguous();
    const int64_t T = a_gates.size(0), B = h0.size(0), H = h0.size(1);
    const Tensor u_bias = bias.value_or(Tensor()), drop = drop_in.has_value() ? drop_in->contiguous() : Tensor();
    const Tensor mask = mask_in.has_value() ? mask_in->to(at::kBool).contiguous() : Tensor();
    TORCH_CHECK(a_gates.sizes() == at::IntArrayRef({T, B, 2 * H}) && a_cand.sizes() == at::IntArrayRef({T, B, H}) &&
                weight.sizes() == at::IntArrayRef({3 * H, H}) && (!u_bias.defined() || u_bias.numel() == 3 * H) &&
                (!drop.defined() || drop.sizes() == h0.sizes()) && (!mask.defined() || mask.sizes() == at::IntArrayRef({T, B})),
                "gru_sequence: shapes must be a_gates (T, B, 2H), a_cand (T, B, H), h0 (B, H), weight (3H, H), bias (3H), "
                "drop (B, H), mask (T, B); got ", a_gates.sizes(), a_cand.sizes(), h0.sizes(), weight.sizes());
    const Tensor g3 = gain3.value_or(Tensor()), b3 = bias3.value_or(Tensor());
    const Tensor g4 = gain4.value_or(Tensor()), b4 = bias4.value_or(Tensor());
    auto opts = h0.options();
    Tensor outs = at::empty({T, B, H}, opts), inputs = at::empty({T, B, H}, opts), s = at::empty({T, B, 3 * H}, opts);
    Tensor gates = at::empty({T, B, 2 * H}, opts), cand = at::empty({T, B, H}, opts), n_out = at::empty({T, B, H}, opts);
    Tensor stats = at::empty({T, B, 4}, opts);
    const Tensor weight_t = weight.t();
    const Spec spec3{mode3, k3, eps3, inside3}, spec4{mode4, k4, eps4, inside4};
    AT_DISPATCH_FLOATING_TYPES(h0.scalar_type(), "gru_sequence_forward", [&] {
      using T_ = scalar_t;
      const Tensor ones = at::ones({2 * H}, opts);
      const Norm<T_> n3 = make_norm<T_>(spec3, 2 * H, g3, b3, ones), n4 = make_norm<T_>(spec4, H, g4, b4, ones);
      const bool* M = mask.defined() ? mask.data_ptr<bool>() : nullptr;
      const T_* D = drop.defined() ? drop.data_ptr<T_>() : nullptr;
      if (T > 0) {
        T_* first = inputs.data_ptr<T_>() + (reverse ? T - 1 : 0) * B * H;
        for (int64_t b = 0; b < B; ++b) state_input(h0.data_ptr<T_>() + b * H, D ? D + b * H : nullptr, first + b * H, H);
      }
      Tensor prev = h0;
      for (int64_t i = 0; i < T; ++i) {
        const int64_t t = reverse ? T - 1 - i : i;
        Tensor input = inputs.select(0, t), s_t = s.select(0, t);
        if (u_bias.defined()) {
          at::addmm_out(s_t, u_bias, input, weight_t);
        } else {
          at::mm_out(s_t, input, weight_t);
        }
        const T_ *AG = a_gates.data_ptr<T_>() + t * a_gates.stride(0), *AC = a_cand.data_ptr<T_>() + t * a_cand.stride(0);
        const int64_t ags = a_gates.stride(1), acs = a_cand.stride(1);
        const T_ *Hp = prev.data_ptr<T_>(), *S = s_t.data_ptr<T_>();
        T_ *O = outs.data_ptr<T_>() + t * B * H, *G = gates.data_ptr<T_>() + t * B * 2 * H;
        T_ *NC = cand.data_ptr<T_>() + t * B * H, *N = n_out.data_ptr<T_>() + t * B * H, *ST = stats.data_ptr<T_>() + t * B * 4;
        const bool* keep = M ? M + t * B : nullptr;
        T_* next_in = i + 1 < T ? inputs.data_ptr<T_>() + (reverse ? t - 1 : t + 1) * B * H : nullptr;
        at::parallel_for(0, B, std::max<int64_t>(1, 32768 / (3 * H)), [&](int64_t begin, int64_t end) {
          for (int64_t b = begin; b < end; ++b) {
            forward_row(n3, n4, AG + b * ags, AC + b * acs, Hp + b * H, S + b * 3 * H, G + b * 2 * H, NC + b * H,
                        N + b * H, O + b * H, ST + b * 4);
            if (keep && !keep[b]) std::copy(Hp + b * H, Hp + (b + 1) * H, O + b * H);  // a padded step keeps the state
            if (next_in) state_input(O + b * H, D ? D + b * H : nullptr, next_in + b * H, H);
          }
        });
        prev = outs.select(0, t);
      }
    });
    const Tensor last = T == 0 ? h0.clone() : outs.select(0, reverse ? 0 : T - 1).clone();
    ctx->save_for_backward({h0, weight, g3, g4, drop, mask, outs, inputs, s, gates, cand, n_out, stats});
    ctx->saved_data["spec"] = std::vector<int64_t>{mode3, k3, inside3, mode4, k4, inside4, reverse};
    ctx->saved_data["eps"] = std::vector<double>{eps3, eps4};
    ctx->saved_data["bias"] = std::vector<bool>{b3.defined(), b4.defined(), u_bias.defined()};
    return {outs, last};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    RECORD_FUNCTION("rmsnorm_repro::gru_sequence_backward", std::vector<c10::IValue>());
    TORCH_CHECK(!at::GradMode::is_enabled(), "the fused GRU layer is differentiable once (no create_graph / double "
                "backward); set NormGRUCell.fused = False for higher-order gradients");
    const auto saved = ctx->get_saved_variables();
    const Tensor &h0 = saved[0], &weight = saved[1], &g3 = saved[2], &g4 = saved[3], &drop = saved[4], &mask = saved[5];
    const Tensor &outs = saved[6], &inputs = saved[7], &s = saved[8], &gates = saved[9], &cand = saved[10];
    const Tensor &n_out = saved[11], &stats = saved[12];
    const auto spec = ctx->saved_data["spec"].toIntVector();
    const auto eps = ctx->saved_data["eps"].toDoubleVector();
    const auto has_bias = ctx->saved_data["bias"].toBoolList();
    const Spec spec3{spec[0], spec[1], eps[0], spec[2] != 0}, spec4{spec[3], spec[4], eps[1], spec[5] != 0};
    const bool reverse = spec[6] != 0, need_dh0 = ctx->needs_input_grad(2);
    const int64_t T = outs.size(0), B = outs.size(1), H = outs.size(2);
    auto opts = h0.options();
    const Tensor d_outs = grads[0].defined() ? grads[0].contiguous() : Tensor();
    Tensor dh = grads[1].defined() ? grads[1].contiguous().clone() : at::zeros({B, H}, opts);  // dL/d(state after step)
    Tensor da_gates = at::empty({T, B, 2 * H}, opts), da_cand = at::empty({T, B, H}, opts), ds = at::empty({T, B, 3 * H}, opts);
    Tensor dh_direct = at::empty({B, H}, opts), dh_through_s = at::empty({B, H}, opts);
    const int64_t chunks = chunks_for(B, 3 * H);
    Tensor partial = at::zeros({chunks, 6 * H}, opts);  // per chunk: dgain3 (2H), dbias3 (2H), dgain4 (H), dbias4 (H)
    AT_DISPATCH_FLOATING_TYPES(h0.scalar_type(), "gru_sequence_backward", [&] {
      using T_ = scalar_t;
      const Tensor ones = at::ones({2 * H}, opts);
      const Norm<T_> n3 = make_norm<T_>(spec3, 2 * H, g3, Tensor(), ones), n4 = make_norm<T_>(spec4, H, g4, Tensor(), ones);
      const bool dg3 = g3.defined(), dg4 = g4.defined(), db3 = has_bias.get(0), db4 = has_bias.get(1);
      const bool* M = mask.defined() ? mask.data_ptr<bool>() : nullptr;
      const T_* D = drop.defined() ? drop.data_ptr<T_>() : nullptr;
      if (d_outs.defined() && T > 0) dh.add_(d_outs.select(0, reverse ? 0 : T - 1));
      for (int64_t i = T - 1; i >= 0; --i) {
        const int64_t t = reverse ? T - 1 - i : i, t_prev = reverse ? t + 1 : t - 1;
        const Tensor prev = i == 0 ? h0 : outs.select(0, t_prev);
        const T_ *DO = dh.data_ptr<T_>(), *Hp = prev.data_ptr<T_>(), *S = s.data_ptr<T_>() + t * B * 3 * H;
        const T_ *G = gates.data_ptr<T_>() + t * B * 2 * H, *NC = cand.data_ptr<T_>() + t * B * H;
        const T_ *N = n_out.data_ptr<T_>() + t * B * H, *ST = stats.data_ptr<T_>() + t * B * 4;
        T_ *DAG = da_gates.data_ptr<T_>() + t * B * 2 * H, *DAC = da_cand.data_ptr<T_>() + t * B * H;
        T_ *DS = ds.data_ptr<T_>() + t * B * 3 * H, *DH = dh_direct.data_ptr<T_>();
        T_* P = partial.data_ptr<T_>();
        const bool* keep = M ? M + t * B : nullptr;
        at::parallel_for(0, chunks, 1, [&](int64_t chunk_begin, int64_t chunk_end) {
          for (int64_t chunk = chunk_begin; chunk < chunk_end; ++chunk) {
            T_* p = P + chunk * 6 * H;
            for (int64_t b = B * chunk / chunks; b < B * (chunk + 1) / chunks; ++b) {
              if (keep && !keep[b]) {  // the state passed through this step unchanged
                std::fill(DAG + b * 2 * H, DAG + (b + 1) * 2 * H, T_(0));
                std::fill(DAC + b * H, DAC + (b + 1) * H, T_(0));
                std::fill(DS + b * 3 * H, DS + (b + 1) * 3 * H, T_(0));
                std::copy(DO + b * H, DO + (b + 1) * H, DH + b * H);
                continue;
              }
              backward_row(n3, n4, DO + b * H, Hp + b * H, S + b * 3 * H, G + b * 2 * H, NC + b * H, N + b * H,
                           ST + b * 4, DAG + b * 2 * H, DAC + b * H, DH + b * H, DS + b * 3 * H, dg3 ? p : nullptr,
                           db3 ? p + 2 * H : nullptr, dg4 ? p + 4 * H : nullptr, db4 ? p + 5 * H : nullptr);
            }
          }
        });
        if (i == 0 && !need_dh0) break;  // h0 = zeros, say: no product for a gradient nobody reads
        at::mm_out(dh_through_s, ds.select(0, t), weight);
        // the gradient at the previous step's state, with that step's own output gradient
        const T_* DOP = d_outs.defined() && i > 0 ? d_outs.data_ptr<T_>() + t_prev * B * H : nullptr;
        const T_* DTS = dh_through_s.data_ptr<T_>();
        T_* DHN = dh.data_ptr<T_>();
        at::parallel_for(0, B, std::max<int64_t>(1, 32768 / H), [&](int64_t begin, int64_t end) {
          for (int64_t b = begin; b < end; ++b) {
            carry_back(DH + b * H, DTS + b * H, D ? D + b * H : nullptr, DOP ? DOP + b * H : nullptr, DHN + b * H, H);
          }
        });
      }
    });
    const Tensor ds_rows = ds.view({T * B, 3 * H});
    const Tensor d_weight = ds_rows.t().mm(inputs.view({T * B, H}));
    const Tensor d_bias = has_bias.get(2) ? ds_rows.sum(0) : Tensor();
    const Tensor sums = chunks == 1 ? partial[0] : partial.sum(0);
    auto part = [&](int64_t at, int64_t len, bool present) { return present ? sums.narrow(0, at, len).clone() : Tensor(); };
    return {da_gates, da_cand, need_dh0 ? dh : Tensor(), d_weight, d_bias,
            part(0, 2 * H, g3.defined()), part(2 * H, 2 * H, has_bias.get(0)),
            part(4 * H, H, g4.defined()), part(5 * H, H, has_bias.get(1)),
            Tensor(), Tensor(), Tensor(), Tensor(), Tensor(), Tensor(), Tensor(), Tensor(), Tensor(), Tensor(), Tensor()};
  }
};

std::vector<Tensor> gru_sequence(const Tensor& a_gates, const Tensor& a_cand, const Tensor& h0, const Tensor& weight,
                                 const std::optional<Tensor>& bias, const std::optional<Tensor>& gain3,
                                 const std::optional<Tensor>& bias3, const std::optional<Tensor>& gain4,
                                 const std::optional<Tensor>& bias4, const std::optional<Tensor>& drop,
                                 const std::optional<Tensor>& mask, bool reverse, int64_t mode3, int64_t k3, double eps3,
                                 bool inside3, int64_t mode4, int64_t k4, double eps4, bool inside4) {
  return GRUSequenceFunction::apply(a_gates, a_cand, h0, weight, bias, gain3, bias3, gain4, bias4, drop, mask, reverse,
                                    mode3, k3, eps3, inside3, mode4, k4, eps4, inside4);
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("gru_combine", &gru_combine, "a GRU transition with its state-side norms, forward and backward fused",
        py::arg("a_gates"), py::arg("a_cand"), py::arg("h"), py::arg("s"), py::arg("gain3"), py::arg("bias3"),
        py::arg("gain4"), py::arg("bias4"), py::arg("mode3"), py::arg("k3"), py::arg("eps3"), py::arg("inside3"),
        py::arg("mode4"), py::arg("k4"), py::arg("eps4"), py::arg("inside4"));
  m.def("gru_sequence", &gru_sequence, "one direction of a GRU layer over T steps, forward and backward fused",
        py::arg("a_gates"), py::arg("a_cand"), py::arg("h0"), py::arg("weight"), py::arg("bias"), py::arg("gain3"),
        py::arg("bias3"), py::arg("gain4"), py::arg("bias4"), py::arg("drop"), py::arg("mask"), py::arg("reverse"),
        py::arg("mode3"), py::arg("k3"), py::arg("eps3"), py::arg("inside3"), py::arg("mode4"), py::arg("k4"),
        py::arg("eps4"), py::arg("inside4"));
}
