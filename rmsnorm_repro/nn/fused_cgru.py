"""A conditional GRU decoder with MLP attention (Nematus' cGRU, the RNNSearch decoder) over all target steps
of teacher forcing as one C++ kernel on CPU (cgru_cpu.cpp): built on first use like the fused GRU cell.

`decoder(...)` returns (states, contexts, s1) or None where the kernel does not apply: not CPU, not
float32/float64, mixed dtypes (autocast), inside torch.compile, a norm the kernel does not compute (as
fused_gru), a projection that is not a plain or weight-normalized nn.Linear or is watched by forward hooks,
or no C++ compiler here. The decoder then runs step by step, with the same results within float rounding
(tests/nn/test_fused_cgru.py).
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import torch
from torch import Tensor, nn

from ..norms.fused import cpu
from .fused_gru import MODES, ROWS, row_norm
from .loop_linear import hooked

SOURCE = Path(__file__).with_name("cgru_cpu.cpp")
FALLBACK = ("fused CPU conditional GRU unavailable: {reason}; the decoder runs step by step "
            "(the same results, slower)")


@lru_cache(maxsize=None)
def load():
    """The compiled extension, or None (after one warning) where it cannot be built."""
    return cpu.build("rmsnorm_repro_cgru_cpu", source=SOURCE, fallback=FALLBACK, headers=(ROWS,))


def _linear(layer: nn.Linear, ref: Tensor) -> tuple[Tensor, Tensor]:
    """(weight, bias; an empty tensor for none)."""
    return layer.weight, layer.bias if layer.bias is not None else ref.new_empty(0)


def _norm(module: nn.Module, ref: Tensor) -> tuple[tuple[Tensor, Tensor], list[int], float] | None:
    """((gain, bias; empty tensors for none), [mode, k, eps_inside], eps) of a norm the kernel computes, else None."""
    norm = row_norm(module)
    if norm is None:
        return None
    absent = ref.new_empty(0)
    gain, bias = (t if t is not None else absent for t in (norm.gain, norm.bias))
    return (gain, bias), [MODES[norm.kind], norm.k, int(norm.eps_inside)], norm.eps


def decoder(gru1: nn.Module, gru2: nn.Module, query: nn.Module, query_norm: nn.Module, score: nn.Module,
            a_gates: Tensor, a_cand: Tensor, h0: Tensor, keys: Tensor, ctx: Tensor, src_mask: Tensor,
            drop1: Tensor | None, drop2: Tensor | None) -> tuple[Tensor, Tensor, Tensor] | None:
    """The decoder over T target steps in one kernel call (cgru_cpu.cpp states the per-step formulas).

    gru1, gru2: NormGRUCells (GRU2 takes the context as input); query, query_norm, score: the attention's
    state projection, its norm and the score vector's layer. a_gates (T, B, 2H), a_cand (T, B, H): GRU1's
    input part over all steps; h0 (B, H); keys (B, S, A), ctx (B, S, C), src_mask (B, S) bool; drop1, drop2:
    the GRUs' recurrent dropout masks (B, H) or None.
    -> (states (T, B, H), contexts (T, B, C), s1 (T, B, 3H): GRU1's U h before its norms, without gradient);
    None where the kernel does not apply (module docstring)."""
    if (h0.device.type != "cpu" or h0.dtype not in (torch.float32, torch.float64) or torch.compiler.is_compiling()
            or a_gates.shape[0] == 0):
        return None
    layers = (gru1.state_proj, query, gru2.input_proj, gru2.state_proj, score)
    if any(not isinstance(layer, nn.Linear) or hooked(layer) for layer in layers) or score.bias is not None:
        return None
    norms = [_norm(m, h0) for m in (gru1.norm_state_gates, gru1.norm_state_cand, query_norm, gru2.norm_input_gates,
                                    gru2.norm_input_cand, gru2.norm_state_gates, gru2.norm_state_cand)]
    if None in norms:
        return None
    u1, q, w2, u2 = (_linear(layer, h0) for layer in layers[:4])
    absent = h0.new_empty(0)
    inputs = [a_gates, a_cand, h0, keys, ctx, src_mask, absent if drop1 is None else drop1, absent if drop2 is None else drop2,
              *u1, *q, score.weight, *w2, *u2, *(t for tensors, _, _ in norms for t in tensors)]
    if any(t.dtype is not h0.dtype for i, t in enumerate(inputs) if i != 5):  # 5: the bool source mask
        return None
    kernel = load()
    if kernel is None:
        return None
    states, contexts, s1 = kernel.cgru(inputs, [v for _, spec, _ in norms for v in spec], [eps for *_, eps in norms])
    return states, contexts, s1
