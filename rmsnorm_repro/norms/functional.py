"""Normalization functions over the last dimension, the public ones: arguments checked on every call.

The math lives in formulas.py (checked arguments, k given); the modules of this package call it, or
the fast paths in fused/, with p and eps checked and k computed once when they are built. These
functions are for callers without a module (tests, benchmarks): they check and compute k per call.
"""
from __future__ import annotations

from torch import Tensor

from . import formulas, fused
from .formulas import check_norm_args, layer_norm, partial_k  # public here too, unchanged


def rms_norm(
    x: Tensor,
    weight: Tensor | None,
    bias: Tensor | None = None,
    p: float = 1.0,
    eps: float = 1e-8,
    eps_inside: bool = False,
    impl: str = "reference",
) -> Tensor:
    """RMSNorm (p = 1) or pRMSNorm (0 < p < 1) over the last dimension.

    The statistic is RMS(x[..., :k]) with k = ceil(dim * p); every feature is divided by it.
    eps_inside=False divides by (RMS + eps) like the authors' PyTorch file; eps_inside=True
    multiplies by rsqrt(mean(x^2) + eps) like their TensorFlow file and torch.nn.RMSNorm.
    impl="reference" runs the formulas (formulas.py); auto | fused | compile take a fast path with
    the same math (see norms/fused).
    """
    check_norm_args(x.shape[-1], p, eps)
    return fused.rms_norm(x, weight, bias, partial_k(x.shape[-1], p), float(eps), bool(eps_inside), impl)


def l2_norm(x: Tensor, weight: Tensor | None, bias: Tensor | None = None, eps: float = 1e-8) -> Tensor:
    """The paper's L2-Norm baseline: x / (||x||_2 + eps) * g (+ b). RMSNorm without the sqrt(n)."""
    check_norm_args(x.shape[-1], 1.0, eps)
    return formulas.l2_norm(x, weight, bias, eps)


__all__ = ["check_norm_args", "l2_norm", "layer_norm", "partial_k", "rms_norm"]
