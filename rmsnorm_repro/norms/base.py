"""The one door between models and normalization.

A model asks its `Normalization` for "a norm of size d" (`act`), "a norm for the channels of a
conv map" (`channels`), "a norm for step t of a recurrent cell" (`step_norm`), and for its
`linear` / `conv2d` layers. It never learns which norm it got: WeightNorm answers with
reparameterized layers and identity norms, every other kind with plain layers and its norm.
A model that initializes such a layer's weight does it through `init_weight_`, which works for both.

Adding a norm is one file: subclass `Normalization`, decorate it with `@register("name")`, and
import the file in `norms/__init__.py`.
"""
from __future__ import annotations

from typing import Any, Callable, ClassVar, Mapping, NamedTuple

import torch
from torch import Tensor, nn
from torch.nn.utils import parametrize

REGISTRY: dict[str, type["Normalization"]] = {}


class RowNorm(NamedTuple):
    """A norm over the last dimension as a fused kernel computes it in its own loop (nn/gru_rows.h).

    kind "rms": x / RMS(x[:k]) (eps outside the root, or inside with eps_inside); "layer": torch's layer_norm
    (biased variance, eps inside); then * gain + bias where they are not None. A norm module offers it as
    `row_norm()`; a module without one (or returning None) is not fused.
    """
    kind: str
    k: int
    eps: float
    eps_inside: bool
    gain: Tensor | None
    bias: Tensor | None


def register(*names: str) -> Callable[[type["Normalization"]], type["Normalization"]]:
    def add(cls: type[Normalization]) -> type[Normalization]:
        for name in names:
            REGISTRY[name] = cls
        return cls

    return add


class Normalization:
    """Base kind: no activation norm, plain layers. Subclasses override what they change."""

    name: ClassVar[str] = ""

    def __init__(self, name: str, options: Mapping[str, Any] | None = None):
        self.name = name
        self.options = dict(options or {})

    # Activation norms -------------------------------------------------------------------
    def act(self, dim: int) -> nn.Module:
        """A norm over the last dimension of size `dim` (summed inputs of a layer)."""
        return nn.Identity()

    def channels(self, num_channels: int) -> nn.Module:
        """A norm for (N, C, H, W) conv maps, one gain (and bias) per channel."""
        return nn.Identity()

    def step_norm(self, dim: int, max_steps: int) -> nn.Module:
        """A norm used inside a recurrent cell, called as norm(x, t) at time step t.

        Only BatchNorm cares about t (recurrent BatchNorm keeps statistics per time step).
        """
        return SharedStepNorm(self.act(dim))

    # Parameterized layers ---------------------------------------------------------------
    def linear(self, in_features: int, out_features: int, bias: bool = True) -> nn.Module:
        return nn.Linear(in_features, out_features, bias=bias)

    def conv2d(self, in_channels: int, out_channels: int, kernel_size: int, **kwargs: Any) -> nn.Module:
        return nn.Conv2d(in_channels, out_channels, kernel_size, **kwargs)

    def describe(self) -> dict[str, Any]:
        """What to record about this norm in a run's summary."""
        return {"name": self.name, **self.options}

    def prepare(self, device: torch.device | str = "cpu") -> str | None:
        """Build or load what this norm's kernels need on `device` before the clock starts (the fused
        RMSNorm's C++ build, 30-60 s the first time on a machine); returns the implementation that will
        run, or None for a norm without a kernel of its own (this default: nothing to do)."""
        return None


def init_weight_(layer: nn.Module, weight: Tensor) -> None:
    """Make `weight` the layer's (effective) weight: how every model initializes a factory layer.

    Under weightnorm `layer.weight` is recomputed from g and v at each access, so writing into it
    in place (nn.init.*_, .data, copy_) is silently lost; assigning it goes through the
    parametrization instead (g = ||w|| per output unit, v = w). Plain layers are copied into.
    """
    with torch.no_grad():
        if parametrize.is_parametrized(layer, "weight"):
            layer.weight = weight
        else:
            layer.weight.copy_(weight)


class SharedStepNorm(nn.Module):
    """Adapts a plain norm to the step_norm(x, t) calling convention."""

    def __init__(self, norm: nn.Module):
        super().__init__()
        self.norm = norm

    def forward(self, x: Tensor, t: int = 0) -> Tensor:
        return self.norm(x)

    def forward_sequence(self, x: Tensor) -> Tensor:
        """Normalize a whole (T, B, D) sequence at once (hoisted out of the time loop)."""
        return self.norm(x)


class ChannelNorm(nn.Module):
    """Applies a row-wise norm to a conv map, with a gain (and bias) per channel.

    axes="hw": statistics per sample and channel over H x W (the authors' CIFAR RMSNorm).
    axes="chw": statistics per sample over C x H x W (the LayerNorm paper's conv usage).
    `row_norm(rows)` normalizes the last dimension of `rows` without any affine part.
    """

    def __init__(self, num_channels: int, row_norm: Callable[[Tensor], Tensor], axes: str = "hw", bias: bool = True):
        super().__init__()
        if axes not in ("hw", "chw"):
            raise ValueError(f"norm.conv_axes must be 'hw' or 'chw', got {axes!r}")
        self.row_norm, self.axes = row_norm, axes
        self.weight = nn.Parameter(torch.ones(num_channels))
        self.bias = nn.Parameter(torch.zeros(num_channels)) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        n, c, h, w = x.shape
        rows = x.reshape(n, c, h * w) if self.axes == "hw" else x.reshape(n, c * h * w)
        y = self.row_norm(rows).reshape(n, c, h, w) * self.weight.view(1, c, 1, 1)
        if self.bias is not None:
            y = y + self.bias.view(1, c, 1, 1)
        return y if y.dtype is x.dtype else y.to(x.dtype)  # float32 gain beside bf16 x (autocast): x's dtype

    def extra_repr(self) -> str:
        return f"{self.weight.numel()}, axes={self.axes!r}, bias={self.bias is not None}"
