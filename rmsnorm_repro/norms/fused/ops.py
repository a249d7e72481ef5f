"""The fused CPU kernel as custom ops (torch.library), for torch.compile.

Defined with torch.library.Library (define + impl): a call through the dispatcher then cost 8 us more
than the kernel's own entry here, against 30 us for the same function under torch.library.custom_op
(2 loaded cores; measured per forward call at 1x8).

Eager calls go straight to the kernel's C++ autograd Function (cpu.py: the least cost per call). A
compiled graph cannot call into that Function, so under torch.compile the RMSNorm modules and
functional.rms_norm call `rms_norm` below instead: two opaque ops, `rmsnorm_repro::rms_norm_fwd` and
`rmsnorm_repro::rms_norm_bwd`, with fake (shape) functions and an autograd formula, which
AOTAutograd places in the forward and backward graphs as they are. On this CPU Inductor's own code for
the traced formulas ran 2.7-4.5x slower forward+backward than the kernel (results/speed/kernels-cpu-tuned.md,
"torch.compile" against "suite fused"), more than fusing a norm with its neighbours could win back. Where the kernel cannot be built, or does
not take the dtypes, the ops compute the same math with torch operations.
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from ..formulas import compute_dtype
from . import cpu


def _kernel_takes(x: Tensor, weight: Optional[Tensor], bias: Optional[Tensor]) -> bool:
    params = [t.dtype for t in (weight, bias) if t is not None]
    return x.dtype in (torch.float32, torch.float64, torch.bfloat16) and len(set(params)) <= 1 and \
        all(p == x.dtype or (p == torch.float32 and x.dtype == torch.bfloat16) for p in params)


def _stats(rows: Tensor, k: int, eps: float, eps_inside: bool) -> Tensor:
    """(2, n): the scale s and the backward's coefficient c per row (the kernel's, in torch operations)."""
    head = rows[:, :k].to(compute_dtype(rows.dtype))
    mean_square = head.square().mean(-1)
    if eps_inside:
        s = torch.rsqrt(mean_square + eps)
        c = s * s * s / k
    else:
        r = mean_square.sqrt()
        s = 1.0 / (r + eps)
        c = torch.where(r > 0, s * s / (k * r.clamp_min(torch.finfo(r.dtype).tiny)), torch.zeros_like(r))
    return torch.stack([s, c])


_LIB = torch.library.Library("rmsnorm_repro", "DEF")  # kept alive: the ops live as long as it does
_LIB.define("rms_norm_fwd(Tensor x, Tensor? weight, Tensor? bias, int k, float eps, bool eps_inside) -> (Tensor, Tensor)")
_LIB.define("rms_norm_bwd(Tensor dy, Tensor x, Tensor? weight, Tensor? bias, Tensor stats, int k, bool need_dx, "
            "bool need_dw, bool need_db) -> Tensor[]")


def _fwd(x: Tensor, weight: Optional[Tensor], bias: Optional[Tensor], k: int, eps: float,
         eps_inside: bool) -> tuple[Tensor, Tensor]:
    """(y, stats) with stats (2, n) as the backward needs them."""
    ext = cpu.load()
    if ext is not None and _kernel_takes(x, weight, bias):
        return ext.forward(x, weight, bias, k, eps, eps_inside)
    rows = x.reshape(-1, x.shape[-1])
    stats = _stats(rows, k, eps, eps_inside)
    y = rows.to(stats.dtype) * stats[0, :, None]
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y.to(x.dtype).reshape(x.shape), stats


def _fwd_fake(x, weight, bias, k, eps, eps_inside):
    n = x.numel() // x.shape[-1]
    return x.new_empty(x.shape), x.new_empty((2, n), dtype=compute_dtype(x.dtype))


def _bwd(dy: Tensor, x: Tensor, weight: Optional[Tensor], bias: Optional[Tensor], stats: Tensor, k: int,
         need_dx: bool, need_dw: bool, need_db: bool) -> list[Tensor]:
    """[dx] + [dgain] + [dbias], each only where asked for."""
    ext = cpu.load()
    if ext is not None and _kernel_takes(x, weight, bias):
        dx, dw, db = ext.backward(dy, x, weight, bias, stats, k, need_dx, need_dw, need_db)
    else:  # dx = s g dy - [i < k] c S x with S = sum(g dy x) over the row (rmsnorm_cpu.cpp)
        d = x.shape[-1]
        acc = stats.dtype
        rows, grad = x.reshape(-1, d).to(acc), dy.reshape(-1, d).to(acc)
        s, c = stats[0, :, None], stats[1, :, None]
        g = grad if weight is None else grad * weight.to(acc)
        total = (g * rows).sum(-1, keepdim=True)
        dx = dw = db = None
        if need_dx:
            dx = g * s
            dx[:, :k] -= c * total * rows[:, :k]
            dx = dx.to(x.dtype).reshape(x.shape)
        if need_dw:
            dw = (grad * rows * s).sum(0).to(weight.dtype)
        if need_db:
            db = grad.sum(0).to(bias.dtype)
    return [t for t, need in ((dx, need_dx), (dw, need_dw), (db, need_db)) if need]


def _bwd_fake(dy, x, weight, bias, stats, k, need_dx, need_dw, need_db):
    out = [x.new_empty(x.shape)] if need_dx else []
    if need_dw:
        out.append(weight.new_empty(weight.shape))
    if need_db:
        out.append(bias.new_empty(bias.shape))
    return out


def _setup_context(ctx, inputs, output):
    x, weight, bias, k, eps, eps_inside = inputs
    ctx.save_for_backward(x, weight, bias, output[1])
    ctx.k = k


def _backward(ctx, dy, _dstats):
    x, weight, bias, stats = ctx.saved_tensors
    need_dx = ctx.needs_input_grad[0]
    need_dw = weight is not None and ctx.needs_input_grad[1]
    need_db = bias is not None and ctx.needs_input_grad[2]
    grads = iter(rms_norm_bwd(dy, x, weight, bias, stats, ctx.k, need_dx, need_dw, need_db))
    return (next(grads) if need_dx else None, next(grads) if need_dw else None, next(grads) if need_db else None,
            None, None, None)


_LIB.impl("rms_norm_fwd", _fwd, "CPU")
_LIB.impl("rms_norm_bwd", _bwd, "CPU")
torch.library.register_fake("rmsnorm_repro::rms_norm_fwd", _fwd_fake, lib=_LIB)
torch.library.register_fake("rmsnorm_repro::rms_norm_bwd", _bwd_fake, lib=_LIB)
torch.library.register_autograd("rmsnorm_repro::rms_norm_fwd", _backward, setup_context=_setup_context, lib=_LIB)
rms_norm_fwd = torch.ops.rmsnorm_repro.rms_norm_fwd.default
rms_norm_bwd = torch.ops.rmsnorm_repro.rms_norm_bwd.default


def rms_norm(x: Tensor, weight: Tensor | None, bias: Tensor | None, k: int, eps: float, eps_inside: bool) -> Tensor:
    """RMSNorm / pRMSNorm through the custom ops (what a compiled graph calls on CPU)."""
    return rms_norm_fwd(x, weight, bias, k, float(eps), bool(eps_inside))[0]
