"""Normalization library: the formulas (formulas.py, a leaf), the public functions (functional.py),
modules, and the factory models use.

    norms = build_normalization("rmsnorm", {"p": 0.0625})
    norms.act(512)        # an activation norm over a feature size
    layer = norms.linear(512, 1024)  # a layer (weight-normalized under weightnorm)
    init_weight_(layer, w)           # its initial weight, under weightnorm too
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping

from . import batchnorm, l2norm, layernorm, none, rmsnorm, weightnorm  # noqa: F401  (register the kinds)
from . import functional
from .base import REGISTRY, ChannelNorm, Normalization, init_weight_, register
from .batchnorm import FeatureBatchNorm, StepBatchNorm
from .l2norm import L2Norm
from .layernorm import LayerNorm
from .rmsnorm import RMSNorm

NORM_NAMES = tuple(REGISTRY)


def build_normalization(
    name: str, options: Mapping[str, Any] | None = None, supported: Iterable[str] | None = None, task: str = "this task"
) -> Normalization:
    """The factory a model receives. Raises ValueError for an unknown or unsupported norm."""
    if name not in REGISTRY:
        raise ValueError(f"unknown norm {name!r}; choose one of: {', '.join(REGISTRY)}")
    if supported is not None and name not in supported:
        raise ValueError(f"norm={name} is not supported by {task}; supported: {', '.join(supported)}")
    options = {k: v for k, v in (options or {}).items() if k != "name"}
    return REGISTRY[name](name, options)


__all__ = [
    "NORM_NAMES", "REGISTRY", "ChannelNorm", "FeatureBatchNorm", "L2Norm", "LayerNorm", "Normalization",
    "RMSNorm", "StepBatchNorm", "build_normalization", "functional", "init_weight_", "register",
]
