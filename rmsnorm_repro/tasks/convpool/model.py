"""ConvPool-CNN-C (Springenberg et al. 2015) as Salimans & Kingma (2016) trained it on CIFAR-10, with the
norm placement of the authors' code (ConvPoolCNNC's docstring)."""
from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor, nn

from ...norms import Normalization, init_weight_


INITS = ("he", "glorot_uniform", "normal")


def has_offset(norm: nn.Module) -> bool:
    """Whether a norm adds its own bias after normalizing (then the layer before it needs none)."""
    return getattr(norm, "bias", None) is not None


class ConvPoolCNNC(nn.Module):
    """The network, with the norm where the authors' code puts it:

        input noise N(0, 0.15^2) (training only)
        3 x [conv3x3-96 pad 1, norm, LeakyReLU 0.1]     maxpool 2, dropout 0.5
        3 x [conv3x3-192 pad 1, norm, LeakyReLU 0.1]    maxpool 2, dropout 0.5
        conv3x3-192 valid, 2 x conv1x1-192 (each with norm, LeakyReLU 0.1)
        global average pool, dense 10, norm (norm_logits)

    Salimans' train.py wraps all ten layers in its `normalizer` (the nine convs and the dense layer),
    and the authors' README adds `normalizer = nn.rms_norm(l)`, whose `rms_norm` (like Salimans'
    `batch_norm`, `weight_norm` and `no_norm`) deletes the wrapped layer's bias and puts the norm, then
    a per-unit gain and bias, then the nonlinearity after it. So here:

    - every conv is followed by `norms.channels(c)` before its LeakyReLU, and the conv has a bias only
      when that norm has no offset of its own (norm=none, weightnorm: the wrapper's bias b, in the same
      place as a conv bias); under RMSNorm, LayerNorm and BatchNorm the offset after the norm is the
      only bias, as in the authors' RMSNormLayer;
    - with norm_logits (the default) the 10 logits are normalized too, with `norms.act(10)`: RMSNorm
      over the 10 class scores (the authors' RMSNormLayer sums over axis 1 of a dense layer's output),
      LayerNorm over them, BatchNorm per logit over the batch (Salimans' BatchNormLayer, axes 0);
      pRMSNorm at p = 12.5% takes its RMS from the first k = ceil(10 * 0.125) = 2 logits (the authors'
      floor would give 1). The dense layer has a bias only when that norm has no offset.
      norm_logits=false gives plain logits (W g + b) under every norm.

    The convs come from norms.conv2d and the dense layer from norms.linear, so WeightNorm
    reparameterizes all ten layers.
    """

    def __init__(
        self,
        norms: Normalization,
        widths: Sequence[int] = (96, 192),
        num_classes: int = 10,
        input_noise: float = 0.15,
        dropout: float = 0.5,
        slope: float = 0.1,
        norm_logits: bool = True,
        init: str = "he",
        init_std: float = 0.05,
    ):
        super().__init__()
        c1, c2 = widths
        self.input_noise, self.slope = float(input_noise), float(slope)

        def block(c_in: int, c_out: int, kernel: int, padding: int) -> list[nn.Module]:
            norm = norms.channels(c_out)
            conv = norms.conv2d(c_in, c_out, kernel, padding=padding, bias=not has_offset(norm))
            return [conv, norm, nn.LeakyReLU(slope)]

        self.features = nn.Sequential(
            *block(3, c1, 3, 1), *block(c1, c1, 3, 1), *block(c1, c1, 3, 1),
            nn.MaxPool2d(2), nn.Dropout(dropout),
            *block(c1, c2, 3, 1), *block(c2, c2, 3, 1), *block(c2, c2, 3, 1),
            nn.MaxPool2d(2), nn.Dropout(dropout),
            *block(c2, c2, 3, 0), *block(c2, c2, 1, 0), *block(c2, c2, 1, 0),
        )  # fmt: skip
        self.logit_norm = norms.act(num_classes) if norm_logits else nn.Identity()
        self.classifier = norms.linear(c2, num_classes, bias=not has_offset(self.logit_norm))
        self._init_weights(init, float(init_std))

    def _init_weights(self, init: str, init_std: float) -> None:
        """Weights of the nine convs and the dense layer by `init` (task.model.init), zero biases:

        glorot_uniform: Lasagne's default layer init, U(+-sqrt(6 / (fan_in + fan_out))) with fans
                  times the receptive field (Lasagne init.py:160-177): the authors' RMSNormLayer
                  takes a W argument but never applies it, so the wrapped layers keep this one.
        normal:   N(0, init_std) on every layer, as Salimans' BatchNormLayer resets the layer it wraps
                  (weight_norm nn.py:111, Normal(0.05)).
        he:       He normal for the LeakyReLU layers, unit gain for the logits. Salimans' no_norm and
                  weight_norm rescale each layer on 500 training images instead (data-dependent, not
                  done here): He aims at the same unit variance without a data pass.
        """
        if init not in INITS:
            raise ValueError(f"task.model.init must be one of {', '.join(INITS)}, got {init!r}")
        layers = [m for m in self.modules() if isinstance(m, (nn.Conv2d, nn.Linear))]
        for layer in layers:
            w = torch.empty_like(layer.weight)
            if init == "glorot_uniform":
                nn.init.xavier_uniform_(w)
            elif init == "normal":
                nn.init.normal_(w, 0.0, init_std)
            elif layer is self.classifier:
                nn.init.kaiming_normal_(w, nonlinearity="linear")
            else:
                nn.init.kaiming_normal_(w, a=self.slope, nonlinearity="leaky_relu")
            init_weight_(layer, w)
            if layer.bias is not None:
                nn.init.zeros_(layer.bias)

    def forward(self, x: Tensor) -> Tensor:
        if self.training and self.input_noise > 0:
            x = x + self.input_noise * torch.randn_like(x)
        return self.logit_norm(self.classifier(self.features(x).mean((2, 3))))
