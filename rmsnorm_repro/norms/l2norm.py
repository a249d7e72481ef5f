"""The paper's L2-Norm baseline: RMSNorm without the sqrt(n) scale."""
from __future__ import annotations

import torch
from torch import Tensor, nn

from . import formulas
from .base import Normalization, register


class L2Norm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-8, bias: bool = False):
        super().__init__()
        formulas.check_norm_args(dim, 1.0, eps)
        self.dim, self.eps = dim, float(eps)
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim)) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        return formulas.l2_norm(x, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.dim}, eps={self.eps}, bias={self.bias is not None}"


@register("l2norm")
class L2Normalization(Normalization):
    def act(self, dim: int) -> nn.Module:
        return L2Norm(dim, float(self.options.get("eps", 1e-8)), bool(self.options.get("bias", False)))
