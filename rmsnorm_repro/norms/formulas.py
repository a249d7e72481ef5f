"""The formulas of the paper over the last dimension, and nothing else.

A leaf module (torch and math only): the fused paths fall back to these functions and the public
`functional` wraps them, so neither needs the other. The functions take already checked arguments:
modules check p and eps and compute k once when they are built (`check_norm_args`, `partial_k`).
Low-precision activations (bfloat16/float16, e.g. under autocast) are normalized in float32, statistics
and affine part, and the result comes back in the activation's dtype; float32 and float64 run as they are
(with torch's type promotion against the parameters).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor


def check_norm_args(dim: int, p: float = 1.0, eps: float = 0.0) -> None:
    """Raise ValueError with the allowed range when a norm's arguments are out of it."""
    if not isinstance(dim, int) or dim < 1:
        raise ValueError(f"normalized dimension must be an integer >= 1, got {dim!r}")
    if not (isinstance(p, (int, float)) and 0.0 < p <= 1.0):
        raise ValueError(f"partial ratio p must be in (0, 1] (1.0 = full RMSNorm), got {p!r}")
    if not (isinstance(eps, (int, float)) and eps >= 0.0):
        raise ValueError(f"eps must be >= 0, got {eps!r}")


def partial_k(dim: int, p: float) -> int:
    """Number of leading features pRMSNorm takes its statistic from: ceil(dim * p), at least 1.

    The paper says ceil; the authors' code uses floor and crashes when it reaches 0, so we clamp.
    """
    check_norm_args(dim, p)
    # round() first so that e.g. 0.07 * 100 = 7.000000000000001 still gives 7, not 8.
    return max(1, math.ceil(round(dim * p, 9)))


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype a norm computes in for activations of `dtype`: float64 stays, anything else is float32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


LOW_PRECISION = (torch.bfloat16, torch.float16)


FLOAT16_MAX = torch.finfo(torch.float16).max


def saturate_zero_rows(dx: Tensor, zero_rows: Tensor) -> Tensor:
    """dx with the rows whose statistic was all zero clamped to float16's finite range.

    A zero row's input gradient is g * dy / eps (1e8 dy at the recipes' eps 1e-8 outside the root; 1e4 dy
    inside): inf in float16 once GradScaler has scaled dy, and inf * 0 = NaN in the gradient of the
    matrix whose zero input made the row (U h0 with h0 = 0 in a GRU), so every step would be skipped.
    That gradient is multiplied by the zero input, so any finite value gives the exact one; the
    largest finite float16 keeps its sign. Rows with any nonzero feature are left alone (an overflow
    there is GradScaler's to see)."""
    return torch.where(zero_rows, dx.clamp(-FLOAT16_MAX, FLOAT16_MAX), dx)


class _Float16ToFloat32(torch.autograd.Function):
    """x.float() for float16 x whose gradient comes back through `saturate_zero_rows`."""

    @staticmethod
    def forward(ctx, x: Tensor, k: int) -> Tensor:
        ctx.save_for_backward((x[..., :k] == 0).all(-1, keepdim=True))
        return x.float()

    @staticmethod
    def backward(ctx, dx: Tensor):
        (zero_rows,) = ctx.saved_tensors
        return saturate_zero_rows(dx, zero_rows).half(), None


def rms_norm(x: Tensor, weight: Tensor | None, bias: Tensor | None, k: int, eps: float, eps_inside: bool) -> Tensor:
    """RMSNorm (k = dim) or pRMSNorm (k < dim): x / RMS(x[..., :k]) * g (+ b), op by op.

    eps_inside=False divides by (RMS + eps) like the authors' PyTorch file; eps_inside=True
    multiplies by rsqrt(mean(x^2) + eps) like their TensorFlow file and torch.nn.RMSNorm.
    float16 x: an all-zero row's input gradient is saturated, not inf (`saturate_zero_rows`).
    """
    low, out_dtype = x.dtype in LOW_PRECISION, x.dtype
    if x.dtype == torch.float16 and x.requires_grad:
        x = _Float16ToFloat32.apply(x, k)
    elif low:
        x = x.float()
    head = x if k == x.shape[-1] else x[..., :k]
    mean_square = head.pow(2).mean(-1, keepdim=True)
    if eps_inside:
        inv_rms = torch.rsqrt(mean_square + eps)
    else:
        # sqrt'(0) is infinite, so an all-zero row (U h0 with h0 = 0 in a GRU) would get NaN
        # gradients (0 * inf); clamping at the smallest normal float keeps them finite (and exact).
        inv_rms = 1.0 / (mean_square.clamp_min(torch.finfo(x.dtype).tiny).sqrt() + eps)
    y = x * inv_rms
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y.to(out_dtype) if low else y


def layer_norm(x: Tensor, weight: Tensor | None, bias: Tensor | None = None, eps: float = 1e-5) -> Tensor:
    """LayerNorm over the last dimension: torch's fused kernel (the fastest LayerNorm there is). It
    computes in float32 for bfloat16/float16 x; CUDA autocast returns float32, hence the cast back (only
    then: a no-op .to() still costs ~1 us a call, on the path the speed tables compare)."""
    y = F.layer_norm(x, (x.shape[-1],), weight, bias, eps)
    return y if y.dtype is x.dtype else y.to(x.dtype)


def l2_norm(x: Tensor, weight: Tensor | None, bias: Tensor | None = None, eps: float = 1e-8) -> Tensor:
    """The paper's L2-Norm baseline: x / (||x||_2 + eps) * g (+ b). RMSNorm without the sqrt(n)."""
    low, out_dtype = x.dtype in LOW_PRECISION, x.dtype
    x = x.float() if low else x
    y = x / (torch.linalg.vector_norm(x, dim=-1, keepdim=True) + eps)
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y.to(out_dtype) if low else y
