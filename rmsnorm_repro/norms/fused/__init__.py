"""The one dispatch behind norm.impl (RMSNorm, its conv-map rows, functional.rms_norm); the math
is the reference's, exactly.

    impl=reference  the formulas in formulas.py, op by op (torch autograd)
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

from .. import formulas
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
    return torch.compile(formulas.rms_norm)


def rms_norm(x: Tensor, weight: Tensor | None, bias: Tensor | None, k: int, eps: float,
             eps_inside: bool, impl: str) -> Tensor:
    """formulas.rms_norm through implementation `impl` (see the module docstring).

    k and eps are the caller's checked values (formulas.partial_k): nothing is checked per call here.
    """
    # reference: nothing to select or record. Inside a torch.compile'd model every impl traces the
    # formulas, so the compiler can fuse them with their neighbours.
    if impl == "reference" or torch.compiler.is_compiling():
        return formulas.rms_norm(x, weight, bias, k, eps, eps_inside)
    name = resolve(impl, "cpu" if x.is_cpu else x.device.type)  # is_cpu: no device object per call
    # Mixed dtypes (e.g. bf16 activations with fp32 gains under autocast) take the reference,
    # which promotes like torch does.
    same_dtype = (weight is None or weight.dtype == x.dtype) and (bias is None or bias.dtype == x.dtype)
    if name == "fused-cpu" and same_dtype and x.dtype in _CPU_DTYPES:
        y = cpu.load().rms_norm(x, weight, bias, k, eps, eps_inside)
    elif name == "triton" and same_dtype and _triton().supports(x):
        y = _triton().rms_norm(x, weight, bias, k, float(eps), bool(eps_inside))
    elif name == "compile":
        y = _compiled()(x, weight, bias, k, eps, eps_inside)
    else:
        name = "reference"
        y = formulas.rms_norm(x, weight, bias, k, eps, eps_inside)
    if name not in _used.get(impl, ()):
        _record(impl, name)
    return y


__all__ = ["IMPLS", "check_impl", "implementations_used", "resolve", "rms_norm"]
