"""The GRU transition as one C++ kernel on CPU (gru_cell_cpu.cpp): built on first use like the fused
RMSNorm (norms/fused/cpu.py), and the test of whether a call can take it.

`combine(cell, a_gates, a_cand, h, s)` returns the cell's new state, or None where the kernel does not
apply: not CPU, not float32/float64, inputs of mixed dtypes (autocast), inside torch.compile, a state-side
norm the kernel does not compute (BatchNorm, L2Norm; RMSNorm with norm.impl=reference|compile), or no C++
compiler here. The cell then runs its transition op by op, with the same results within float rounding
(tests/nn/test_fused_gru.py).
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import torch
from torch import Tensor, nn

from ..norms.base import RowNorm
from ..norms.fused import cpu

SOURCE = Path(__file__).with_name("gru_cell_cpu.cpp")
FALLBACK = ("fused CPU GRU cell unavailable: {reason}; the GRU cells compute their transitions op by op "
            "(the same results, slower)")
MODES = {"identity": 0, "rms": 1, "layer": 2}  # gru_cell_cpu.cpp's enum Mode
IDENTITY = RowNorm("identity", 1, 0.0, False, None, None)


@lru_cache(maxsize=None)
def load():
    """The compiled extension, or None (after one warning) where it cannot be built."""
    return cpu.build("rmsnorm_repro_gru_cpu", source=SOURCE, fallback=FALLBACK)


def row_norm(module: nn.Module) -> RowNorm | None:
    """A state-side norm as the kernel computes it, or None where it cannot."""
    if isinstance(module, nn.Identity):
        return IDENTITY
    describe = getattr(module, "row_norm", None)
    return describe() if describe is not None else None


def combine(cell: nn.Module, a_gates: Tensor, a_cand: Tensor, h: Tensor, s: Tensor) -> Tensor | None:
    """NormGRUCell.combine in one kernel, or None where it does not apply (module docstring)."""
    if (h.device.type != "cpu" or h.dtype not in (torch.float32, torch.float64) or torch.compiler.is_compiling()
            or not (a_gates.dtype is a_cand.dtype is s.dtype is h.dtype)):
        return None
    gates, cand = row_norm(cell.norm_state_gates), row_norm(cell.norm_state_cand)
    if gates is None or cand is None or any(p is not None and p.dtype is not h.dtype
                                            for p in (gates.gain, gates.bias, cand.gain, cand.bias)):
        return None
    kernel = load()
    if kernel is None:
        return None
    return kernel.gru_combine(a_gates, a_cand, h, s, gates.gain, gates.bias, cand.gain, cand.bias,
                              MODES[gates.kind], gates.k, gates.eps, gates.eps_inside,
                              MODES[cand.kind], cand.k, cand.eps, cand.eps_inside)
