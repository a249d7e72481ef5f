"""Fast paths behind `functional.rms_norm(..., impl=...)`; the math is the reference's, exactly.

    impl=reference  the formulas in functional.py, op by op (torch autograd)
    impl=fused      C++ kernel on CPU (cpu.py + rmsnorm_cpu.cpp), Triton kernel on CUDA
                    (triton_rmsnorm.py); both fuse the forward and have an exact fused backward
    impl=compile    torch.compile of the reference function
    impl=auto       the fastest exact path available: fused where it exists, else reference

Inside torch.compile every impl traces the reference formulas, so the compiler can fuse them
with their neighbours instead of breaking the graph at an opaque kernel.
A fast path that cannot run (no compiler, no Triton, an unsupported dtype) falls back to the
reference: a missing compiler warns once. The implementation actually in use is logged once per
process and recorded for `implementations_used` (what RMSNormalization.describe() reports).
"""
from __future__ import annotations

import logging
from functools import lru_cache

import torch
from torch import Tensor

from .. import functional
from . import cpu

IMPLS = ("auto", "reference", "fused", "compile")
log = logging.getLogger(__name__)
_used: dict[str, set[str]] = {}  # requested impl -> implementations that actually ran
_CPU_DTYPES = (torch.float32, torch.float64, torch.bfloat16)


def check_impl(impl: str) -> None:
    if impl not in IMPLS:
        raise ValueError(f"norm.impl must be one of {', '.join(IMPLS)}, got {impl!r}")


@lru_cache(maxsize=None)
def resolve(impl: str, device_type: str) -> str:
    """What `impl` runs on a device type: 'fused-cpu', 'triton', 'compile' or 'reference'."""
    check_impl(impl)
    if impl in ("reference", "compile"):
        return impl
    if device_type == "cpu" and cpu.load() is not None:
        return "fused-cpu"
    if device_type == "cuda":
        if _triton().available():
            return "triton"
        if impl == "fused":
            log.warning("norm.impl=fused: Triton is not installed; using the reference implementation")
    return "reference"


def implementations_used(impl: str) -> list[str]:
    """Implementations that ran in this process for norm.impl=`impl` (sorted; empty before any call)."""
    return sorted(_used.get(impl, ()))


def _record(impl: str, name: str) -> None:
    used = _used.setdefault(impl, set())
    if name not in used:
        used.add(name)
        log.info("RMSNorm implementation in use: %s (norm.impl=%s)", name, impl)


def _triton():
    from . import triton_rmsnorm  # imported on first CUDA use: importing triton takes a while

    return triton_rmsnorm


@lru_cache(maxsize=None)
def _compiled():
    # default dynamic=None: after a second shape (translation batches vary) one dynamic graph, not one per shape
    return torch.compile(functional.rms_norm)


@lru_cache(maxsize=None)
def _checked_k(dim: int, p: float, eps: float) -> int:
    """partial_k after the argument checks, cached: this runs on every call of a hot path."""
    functional.check_norm_args(dim, p, eps)
    return functional.partial_k(dim, p)


def rms_norm(x: Tensor, weight: Tensor | None, bias: Tensor | None, p: float, eps: float,
             eps_inside: bool, impl: str) -> Tensor:
    """functional.rms_norm through implementation `impl` (see the module docstring)."""
    if torch.compiler.is_compiling():  # inside a torch.compile'd model: let it fuse the reference formulas
        return functional.rms_norm(x, weight, bias, p, eps, eps_inside)
    name = resolve(impl, "cpu" if x.is_cpu else x.device.type)  # is_cpu: no device object per call
    # Mixed dtypes (e.g. bf16 activations with fp32 gains under autocast) take the reference,
    # which promotes like torch does.
    same_dtype = (weight is None or weight.dtype == x.dtype) and (bias is None or bias.dtype == x.dtype)
    if name == "fused-cpu" and same_dtype and x.dtype in _CPU_DTYPES:
        y = cpu.load().rms_norm(x, weight, bias, _checked_k(x.shape[-1], p, eps), eps, eps_inside)
    elif name == "triton" and same_dtype and _triton().supports(x):
        y = _triton().rms_norm(x, weight, bias, _checked_k(x.shape[-1], p, eps), float(eps), bool(eps_inside))
    elif name == "compile":
        y = _compiled()(x, weight, bias, p, eps, eps_inside)
    else:
        name = "reference"
        y = functional.rms_norm(x, weight, bias, p, eps, eps_inside)
    if name not in _used.get(impl, ()):
        _record(impl, name)
    return y


__all__ = ["IMPLS", "check_impl", "implementations_used", "resolve", "rms_norm"]
