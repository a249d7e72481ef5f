"""WeightNorm: w = g * v / ||v||, a reparameterization of the layers, not an activation norm."""
from __future__ import annotations

from typing import Any

from torch import nn
from torch.nn.utils.parametrizations import weight_norm

from .base import Normalization, register


@register("weightnorm")
class WeightNormalization(Normalization):
    """Every linear / conv layer is weight-normalized (one g per output unit); no activation norm."""

    def linear(self, in_features: int, out_features: int, bias: bool = True) -> nn.Module:
        return weight_norm(nn.Linear(in_features, out_features, bias=bias), dim=0)

    def conv2d(self, in_channels: int, out_channels: int, kernel_size: int, **kwargs: Any) -> nn.Module:
        return weight_norm(nn.Conv2d(in_channels, out_channels, kernel_size, **kwargs), dim=0)
