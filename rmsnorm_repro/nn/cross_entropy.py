"""Label-smoothed cross-entropy summed over tokens, as one C++ kernel on CPU (cross_entropy_cpu.cpp).

`smoothed_cross_entropy(logits, target, ignore_index, label_smoothing)` is
F.cross_entropy(..., reduction="sum") with the same arguments, in three passes over the logits instead of
torch's ten or so (the kernel's header), where it applies: CPU, float32/float64 logits (N, V), outside
torch.compile, a C++ compiler here. Elsewhere it calls F.cross_entropy. Equal to it within float
rounding (tests/nn/test_cross_entropy.py). `fused = False` makes every call take F.cross_entropy
(scripts/bench_levers.py compares the two).
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

from ..norms.fused import cpu

SOURCE = Path(__file__).with_name("cross_entropy_cpu.cpp")
FALLBACK = "fused CPU cross-entropy unavailable: {reason}; using F.cross_entropy (the same results, slower)"
fused = True


@lru_cache(maxsize=None)
def load():
    """The compiled extension, or None (after one warning) where it cannot be built."""
    return cpu.build("rmsnorm_repro_ce_cpu", source=SOURCE, fallback=FALLBACK)


def prepare(device: torch.device | str) -> None:
    """Build the kernel now (30-60 s the first time on a machine), not inside the first training step."""
    if fused and torch.device(device).type == "cpu":
        load()


def smoothed_cross_entropy(logits: Tensor, target: Tensor, ignore_index: int, label_smoothing: float) -> Tensor:
    """The summed label-smoothed cross-entropy of logits (N, V) against target (N) (module docstring)."""
    if (fused and logits.device.type == "cpu" and logits.dtype in (torch.float32, torch.float64)
            and logits.dim() == 2 and not torch.compiler.is_compiling() and (kernel := load()) is not None):
        return kernel.smoothed_cross_entropy(logits, target, ignore_index, label_smoothing)
    return F.cross_entropy(logits, target, ignore_index=ignore_index, label_smoothing=label_smoothing, reduction="sum")
