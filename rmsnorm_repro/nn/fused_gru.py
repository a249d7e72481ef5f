"""The GRU transition, and a whole direction of a GRU layer, as C++ kernels on CPU (gru_cell_cpu.cpp): built
on first use like the fused RMSNorm (norms/fused/cpu.py), and the test of whether a call can take them.

`combine(cell, a_gates, a_cand, h, s)` returns the cell's new state, or None where the kernel does not
apply: not CPU, not float32/float64, inputs of mixed dtypes (autocast), inside torch.compile, a state-side
norm the kernel does not compute (BatchNorm, L2Norm; RMSNorm with norm.impl=reference|compile), or no C++
compiler here. The cell then runs its transition op by op, with the same results within float rounding
(tests/nn/test_fused_gru.py). `sequence(cell, ...)` runs one direction of a NormGRU layer, every step, the
same way, or returns None under the same conditions and where the state projection is not an nn.Linear or
is watched by forward hooks; the layer then runs step by step.
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import torch
from torch import Tensor, nn

from ..norms.base import RowNorm
from ..norms.fused import cpu
from .loop_linear import hooked

SOURCE = Path(__file__).with_name("gru_cell_cpu.cpp")
ROWS = Path(__file__).with_name("gru_rows.h")  # the row arithmetic it shares with cgru_cpu.cpp
FALLBACK = ("fused CPU GRU cell unavailable: {reason}; the GRU cells compute their transitions op by op "
            "(the same results, slower)")
MODES = {"identity": 0, "rms": 1, "layer": 2}  # gru_rows.h's enum Mode
IDENTITY = RowNorm("identity", 1, 0.0, False, None, None)


@lru_cache(maxsize=None)
def load():
    """The compiled extension, or None (after one warning) where it cannot be built."""
    return cpu.build("rmsnorm_repro_gru_cpu", source=SOURCE, fallback=FALLBACK, headers=(ROWS,))


def row_norm(module: nn.Module) -> RowNorm | None:
    """A state-side norm as the kernel computes it, or None where it cannot."""
    if isinstance(module, nn.Identity):
        return IDENTITY
    describe = getattr(module, "row_norm", None)
    return describe() if describe is not None else None


def _kernel_and_norms(cell: nn.Module, *tensors: Tensor):
    """(the extension, N3 and N4 as RowNorms) where the kernel computes this cell on these tensors, else None."""
    h = tensors[0]
    if (h.device.type != "cpu" or h.dtype not in (torch.float32, torch.float64) or torch.compiler.is_compiling()
            or any(t.dtype is not h.dtype for t in tensors)):
        return None
    gates, cand = row_norm(cell.norm_state_gates), row_norm(cell.norm_state_cand)
    if gates is None or cand is None or any(p is not None and p.dtype is not h.dtype
                                            for p in (gates.gain, gates.bias, cand.gain, cand.bias)):
        return None
    kernel = load()
    return None if kernel is None else (kernel, gates, cand)


def _norm_args(gates: RowNorm, cand: RowNorm) -> tuple:
    return (gates.gain, gates.bias, cand.gain, cand.bias, MODES[gates.kind], gates.k, gates.eps, gates.eps_inside,
            MODES[cand.kind], cand.k, cand.eps, cand.eps_inside)


def combine(cell: nn.Module, a_gates: Tensor, a_cand: Tensor, h: Tensor, s: Tensor) -> Tensor | None:
    """NormGRUCell.combine in one kernel, or None where it does not apply (module docstring)."""
    found = _kernel_and_norms(cell, h, a_gates, a_cand, s)
    if found is None:
        return None
    kernel, gates, cand = found
    gain3, bias3, gain4, bias4, *spec = _norm_args(gates, cand)
    return kernel.gru_combine(a_gates, a_cand, h, s, gain3, bias3, gain4, bias4, *spec)


def sequence(cell: nn.Module, a_gates: Tensor, a_cand: Tensor, h0: Tensor, drop: Tensor | None,
             mask: Tensor | None, reverse: bool) -> tuple[Tensor, Tensor] | None:
    """One direction of NormGRU's loop in one kernel call: a_gates (T, B, 2H), a_cand (T, B, H) from
    cell.input_part, h0 (B, H), drop (B, H) the recurrent dropout mask or None, mask (T, B) bool (False: a
    padded step, which keeps the state) or None, reverse: run t = T-1 .. 0. -> (the state after each step
    (T, B, H), the state after the last step in order (B, H)); None where the kernel does not apply (as
    combine, and where the state projection is not a plain or weight-normalized nn.Linear, or is watched
    by forward hooks, which see its calls only through layer(x))."""
    layer = cell.state_proj
    if not isinstance(layer, nn.Linear) or hooked(layer):
        return None
    weight, bias = layer.weight, layer.bias
    found = _kernel_and_norms(cell, h0, a_gates, a_cand, weight, *(t for t in (bias, drop) if t is not None))
    if found is None:
        return None
    kernel, gates, cand = found
    gain3, bias3, gain4, bias4, *spec = _norm_args(gates, cand)
    outs, last = kernel.gru_sequence(a_gates, a_cand, h0, weight, bias, gain3, bias3, gain4, bias4, drop, mask,
                                     reverse, *spec)
    return outs, last
