"""RMSNorm and pRMSNorm (the subject of the paper)."""
from __future__ import annotations

import torch
from torch import Tensor, nn

from . import formulas, fused
from .base import ChannelNorm, Normalization, register


class RMSNorm(nn.Module):
    """y = x / RMS(x[..., :k]) * g (+ b) over the last dimension; k = ceil(dim * p).

    p = 1.0 is RMSNorm, p < 1 is pRMSNorm. See `formulas.rms_norm` for the eps placement.
    impl: auto (fastest exact path here) | reference | fused | compile; see norms/fused.
    p and eps are checked and k computed once, here: the forward computes nothing else.
    """

    def __init__(self, dim: int, p: float = 1.0, eps: float = 1e-8, eps_inside: bool = False, bias: bool = False,
                 impl: str = "auto"):
        super().__init__()
        formulas.check_norm_args(dim, p, eps)
        fused.check_impl(impl)
        self.dim, self.p, self.eps, self.eps_inside, self.impl = dim, float(p), float(eps), bool(eps_inside), impl
        self.k = formulas.partial_k(dim, p)
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim)) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        return fused.rms_norm(x, self.weight, self.bias, self.k, self.eps, self.eps_inside, self.impl)

    def extra_repr(self) -> str:
        return f"{self.dim}, p={self.p}, k={self.k}, eps={self.eps}, eps_inside={self.eps_inside}, bias={self.bias is not None}, impl={self.impl}"


class RowRMSNorm:
    """RMSNorm without gain over the rows of a conv map (ChannelNorm), with p and eps already checked.

    The row length (H x W, or C x H x W) is known only at the first map, so k is computed then, once
    per length.
    """

    def __init__(self, p: float, eps: float, eps_inside: bool, impl: str):
        self.p, self.eps, self.eps_inside, self.impl = p, eps, eps_inside, impl
        self.k: dict[int, int] = {}  # row length -> k

    def __call__(self, rows: Tensor) -> Tensor:
        dim = rows.shape[-1]
        if dim not in self.k:
            self.k[dim] = formulas.partial_k(dim, self.p)
        return fused.rms_norm(rows, None, None, self.k[dim], self.eps, self.eps_inside, self.impl)


@register("rmsnorm", "prmsnorm")
class RMSNormalization(Normalization):
    """norm=rmsnorm (p = 1) and norm=prmsnorm (p < 1, 6.25% by default)."""

    def __init__(self, name, options=None):
        super().__init__(name, options)
        o = self.options
        self.p, self.eps = float(o.get("p", 1.0)), float(o.get("eps", 1e-8))
        self.eps_inside, self.bias = bool(o.get("eps_inside", False)), bool(o.get("bias", False))
        self.conv_axes, self.impl = o.get("conv_axes", "hw"), str(o.get("impl", "auto"))
        formulas.check_norm_args(1, self.p, self.eps)
        fused.check_impl(self.impl)

    def act(self, dim: int) -> nn.Module:
        return RMSNorm(dim, self.p, self.eps, self.eps_inside, self.bias, self.impl)

    def channels(self, num_channels: int) -> nn.Module:
        rows = RowRMSNorm(self.p, self.eps, self.eps_inside, self.impl)
        return ChannelNorm(num_channels, rows, self.conv_axes, bias=True)

    def describe(self) -> dict:
        # impl_used: what actually ran in this process (e.g. auto -> fused-cpu), or, before the
        # first forward, what `impl` resolves to on the default device.
        used = fused.implementations_used(self.impl)
        default_device = "cuda" if torch.cuda.is_available() else "cpu"
        return {**super().describe(), "impl": self.impl,
                "impl_used": ",".join(used) or fused.resolve(self.impl, default_device)}
