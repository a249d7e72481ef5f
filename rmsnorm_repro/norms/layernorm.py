"""LayerNorm, through torch's fused kernel."""
from __future__ import annotations

from functools import partial

import torch
from torch import Tensor, nn

from . import formulas
from .base import ChannelNorm, Normalization, RowNorm, register


class LayerNorm(nn.Module):
    """(x - mean) / sqrt(var + eps) * g + b over the last dimension (torch.nn.LayerNorm's math)."""

    def __init__(self, dim: int, eps: float = 1e-5, bias: bool = True):
        super().__init__()
        formulas.check_norm_args(dim, 1.0, eps)
        self.dim, self.eps = dim, float(eps)
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim)) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        return formulas.layer_norm(x, self.weight, self.bias, self.eps)

    def row_norm(self) -> RowNorm:
        """This norm for a kernel that computes it inside its own loop (the fused GRU cell)."""
        return RowNorm("layer", self.dim, self.eps, False, self.weight, self.bias)

    def extra_repr(self) -> str:
        return f"{self.dim}, eps={self.eps}, bias={self.bias is not None}"


@register("layernorm")
class LayerNormalization(Normalization):
    def __init__(self, name, options=None):
        super().__init__(name, options)
        self.eps, self.bias = float(self.options.get("eps", 1e-5)), bool(self.options.get("bias", True))
        self.conv_axes = self.options.get("conv_axes", "hw")

    def act(self, dim: int) -> nn.Module:
        return LayerNorm(dim, self.eps, self.bias)

    def channels(self, num_channels: int) -> nn.Module:
        rows = partial(formulas.layer_norm, weight=None, eps=self.eps)
        return ChannelNorm(num_channels, rows, self.conv_axes, bias=True)
