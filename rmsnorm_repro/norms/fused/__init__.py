"""The one dispatch behind norm.impl (RMSNorm, its conv-map rows, functional.rms_norm); the math
is the reference's, exactly.

    impl=reference  the formulas in formulas.py, op by op (torch autograd)
    impl=fused      the suite's own kernels: C++ on CPU (cpu.py + rmsnorm_cpu.cpp), Triton on CUDA
                    (triton_rmsnorm.py); both fuse the forward and have an exact fused backward
    impl=compile    torch.compile of the reference function
    impl=auto       the fastest exact path available: on CUDA torch's own fused F.rms_norm where it
                    computes the same formula (`torch_computes`), else the suite's kernel, else reference

Under autocast (bfloat16 activations, float32 gain; on CUDA float16 too) the fused kernels read the
gain in float32 and return x's dtype, as F.layer_norm and F.rms_norm do; so does the reference, which
computes in float32 (formulas.py).
"""
from __future__ import annotations

import logging
from functools import lru_cache
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from .. import formulas
from . import cpu, ops

IMPLS = ("auto", "reference", "fused", "compile")
log = logging.getLogger(__name__)
_used: dict[str, set[str]] = {}  # requested impl -> implementations chosen for it
_CPU_DTYPES = (torch.float32, torch.float64, torch.bfloat16)  # float16: the reference (rmsnorm_cpu.cpp says why)
_LOW = (torch.bfloat16, torch.float16)  # may come with float32 parameters (autocast)

Kernel = Callable[[Tensor, "Tensor | None", "Tensor | None", int, float, bool], Tensor]


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


def _params_fit(dtype: torch.dtype, param_dtype: torch.dtype | None) -> bool:
    """Whether a fused kernel takes these parameters: x's dtype, or float32 beside bf16/fp16 x (the CPU
    kernel takes no float16 x at all: _CPU_DTYPES)."""
    return param_dtype == dtype or (param_dtype == torch.float32 and dtype in _LOW)


def torch_computes(dim: int, k: int, eps_inside: bool, has_bias: bool) -> bool:
    """Whether torch's F.rms_norm computes this norm's formula (see kernel())."""
    return k == dim and eps_inside and not has_bias


def _torch_rms_norm(x: Tensor, weight: Tensor | None, bias: Tensor | None, k: int, eps: float,
                    eps_inside: bool) -> Tensor:
    """torch's fused RMSNorm for a `torch_computes` configuration, parameters of x's dtype. Under CUDA
    autocast aten rms_norm runs in float32: the result comes back in x's dtype, as the reference's does."""
    y = F.rms_norm(x, (x.shape[-1],), weight, eps)
    return y if y.dtype is x.dtype else y.to(x.dtype)


def _torch_rms_norm_under_autocast(x: Tensor, weight: Tensor | None, bias: Tensor | None, k: int, eps: float,
                                   eps_inside: bool) -> Tensor:
    """bfloat16/float16 x beside a float32 gain: torch's kernel under autocast (which computes in float32);
    outside autocast aten takes its slow composite path for this mix, so the suite's kernel runs."""
    if torch.is_autocast_enabled(x.device.type):
        return _torch_rms_norm(x, weight, bias, k, eps, eps_inside)
    return _triton().rms_norm_unchecked(x, weight, bias, k, eps, eps_inside)


@lru_cache(maxsize=None)
def kernel(impl: str, device_type: str, dtype: torch.dtype, param_dtype: torch.dtype | None, dim: int, k: int,
           eps_inside: bool, has_bias: bool) -> tuple[str, Kernel]:
    """(name, f) with f(x, weight, bias, k, eps, eps_inside) -> y: what `impl` runs for x of `dtype` on
    `device_type` with gain/bias of `param_dtype` (x's dtype when there are none; None when gain and
    bias differ), rows of `dim` features, the statistic over the first `k`, eps inside the root or not,
    a bias or not. Everything a kernel needs checked is checked here, once per key, so that a call runs
    no checks; the first choice of each implementation is logged.

    On CUDA, impl=auto runs torch's F.rms_norm (aten _fused_rms_norm), x * rsqrt(mean(x^2) + eps) * g,
    where that is this norm's formula (`torch_computes`: p = 1, eps inside the root, no bias; not float16,
    where the suite's kernel keeps a zero row's gradient finite: formulas.saturate_zero_rows). eps outside
    the root (the authors' PyTorch placement) is another function of x (about eps / RMS apart per row,
    unbounded near a zero row), so it keeps the suite's exact kernel, as do pRMSNorm and a bias.

    The implementation is chosen once per key, and a module keeps
    the function it got (RMSNorm chooses again only when it sees another dtype or is moved): a call
    runs no selection logic. Inside torch.compile (`traced`), impl=auto|fused on CPU is the same C++
    kernel as two opaque custom ops with an autograd formula (ops.py; Inductor's code for the formulas
    was 2.7-4.5x slower on this CPU); on CUDA, and for impl=reference|compile, the compiler traces the
    reference formulas and fuses them with their neighbours. torch.export always traces the formulas,
    so an exported program holds only standard ops and runs without the extension.
    A fast path that cannot run (no compiler, no Triton, an unsupported dtype) falls back to the
    reference: a missing compiler warns once. The implementation chosen is logged once per process and
    recorded for `implementations_used` (what RMSNormalization.describe() reports)."""
    name = resolve(impl, device_type)
    fn: Kernel
    if (device_type == "cuda" and impl == "auto" and torch_computes(dim, k, eps_inside, has_bias)
            and dtype != torch.float16
            and (param_dtype == dtype or (_params_fit(dtype, param_dtype) and name == "triton"))):
        name, fn = "torch", (_torch_rms_norm if param_dtype == dtype else _torch_rms_norm_under_autocast)
    elif name == "fused-cpu" and dtype in _CPU_DTYPES and _params_fit(dtype, param_dtype):
        fn = cpu.load().rms_norm
    elif (name == "triton" and dtype in _triton().DTYPES and _params_fit(dtype, param_dtype)
          and dim <= _triton().MAX_DIM):
        fn = _triton().rms_norm_unchecked
    elif name == "compile":
        fn = _compiled()
    else:
        name, fn = "reference", formulas.rms_norm
    used = _used.setdefault(impl, set())
    if name not in used:
        used.add(name)
        log.info("RMSNorm implementation in use: %s (norm.impl=%s)", name, impl)
    return name, fn


def param_dtype(x: Tensor, weight: Tensor | None, bias: Tensor | None) -> torch.dtype | None:
    """The parameters' dtype as `kernel` takes it."""
    if weight is None:
        return x.dtype if bias is None else bias.dtype
    return weight.dtype if bias is None or bias.dtype == weight.dtype else None


def implementations_used(impl: str) -> list[str]:
    """Implementations chosen in this process for norm.impl=`impl` (sorted; empty before any call)."""
    return sorted(_used.get(impl, ()))


def prepare(device: torch.device | str = "cpu", impl: str = "auto") -> str:
    """Build or load the kernel `impl` runs on `device`, so that the first training step does not pay
    for it (the CPU kernel's first build on a machine takes 30-60 s; later processes load it in well
    under a second). Returns the implementation: 'fused-cpu', 'triton', 'compile' or 'reference'."""
    name = resolve(impl, torch.device(device).type)
    if name == "triton":
        _triton()  # imported; Triton compiles each kernel variant at its first call
    return name


def _triton():
    from . import triton_rmsnorm  # imported on first CUDA use: importing triton takes a while

    return triton_rmsnorm


@lru_cache(maxsize=None)
def _compiled():
    # default dynamic=None: after a second shape (translation batches vary) one dynamic graph, not one per shape
    return torch.compile(formulas.rms_norm)


def clear_caches() -> None:
    """Forget every choice (tests that change what is available)."""
    resolve.cache_clear()
    kernel.cache_clear()


def traced(x: Tensor, weight: Tensor | None, bias: Tensor | None, k: int, eps: float, eps_inside: bool,
           impl: str) -> Tensor:
    """What torch.compile and torch.export trace (see the module docstring)."""
    if (impl in ("auto", "fused") and x.device.type == "cpu" and ops._kernel_takes(x, weight, bias)
            and not torch.compiler.is_exporting()):
        return ops.rms_norm(x, weight, bias, k, eps, eps_inside)
    return formulas.rms_norm(x, weight, bias, k, eps, eps_inside)


def rms_norm(x: Tensor, weight: Tensor | None, bias: Tensor | None, k: int, eps: float,
             eps_inside: bool, impl: str) -> Tensor:
    """formulas.rms_norm through implementation `impl` (see the module docstring).

    k and eps are the caller's checked values (formulas.partial_k): nothing is checked per call here.
    For callers without a module (functional.rms_norm, conv-map rows): the choice is a cached lookup.
    """
    if impl == "reference":
        return formulas.rms_norm(x, weight, bias, k, eps, eps_inside)
    if torch.compiler.is_compiling():
        return traced(x, weight, bias, k, eps, eps_inside, impl)
    dim = x.shape[-1]
    return kernel(impl, x.device.type, x.dtype, param_dtype(x, weight, bias), dim, k, eps_inside,
                  bias is not None)[1](x, weight, bias, k, eps, eps_inside)


__all__ = ["IMPLS", "check_impl", "clear_caches", "implementations_used", "kernel", "param_dtype", "prepare", "resolve",
           "rms_norm", "torch_computes", "traced"]
