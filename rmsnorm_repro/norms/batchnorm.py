"""BatchNorm: statistics over the batch (and H x W for conv maps); running statistics at eval."""
from __future__ import annotations

import torch
from torch import Tensor, nn

from .base import Normalization, register


class FeatureBatchNorm(nn.BatchNorm1d):
    """BatchNorm over the last dimension of a (..., d) tensor: every leading index is a case."""

    def forward(self, x: Tensor) -> Tensor:
        return super().forward(x.reshape(-1, x.shape[-1])).reshape(x.shape)


class StepBatchNorm(nn.Module):
    """Recurrent BatchNorm (Cooijmans et al. 2017): statistics per time step, shared gain and bias.

    Steps beyond `max_steps` reuse the last step's statistics, as in the original code.
    """

    def __init__(self, dim: int, max_steps: int, eps: float = 1e-5, momentum: float = 0.1, gain_init: float = 1.0):
        super().__init__()
        self.stats = nn.ModuleList(
            nn.BatchNorm1d(dim, eps=eps, momentum=momentum, affine=False) for _ in range(max_steps)
        )
        self.weight = nn.Parameter(torch.full((dim,), float(gain_init)))
        self.bias = nn.Parameter(torch.zeros(dim))

    def forward(self, x: Tensor, t: int = 0) -> Tensor:
        y = self.stats[min(t, len(self.stats) - 1)](x) * self.weight + self.bias
        return y if y.dtype is x.dtype else y.to(x.dtype)  # float32 gain beside bf16 x (autocast): x's dtype

    def forward_sequence(self, x: Tensor) -> Tensor:
        """Normalize a (T, B, D) sequence, step t with the statistics of step t."""
        return torch.stack([self(x_t, t) for t, x_t in enumerate(x.unbind(0))])


@register("batchnorm")
class BatchNormalization(Normalization):
    def __init__(self, name, options=None):
        super().__init__(name, options)
        self.eps = float(self.options.get("eps", 1e-5))
        self.momentum = float(self.options.get("momentum", 0.1))

    def act(self, dim: int) -> nn.Module:
        return FeatureBatchNorm(dim, eps=self.eps, momentum=self.momentum)

    def channels(self, num_channels: int) -> nn.Module:
        return nn.BatchNorm2d(num_channels, eps=self.eps, momentum=self.momentum)

    def step_norm(self, dim: int, max_steps: int) -> nn.Module:
        # Cooijmans et al. initialize the recurrent BN gain at 0.1 to keep tanh/sigmoid unsaturated.
        return StepBatchNorm(dim, max_steps, self.eps, self.momentum, float(self.options.get("step_gain_init", 0.1)))
