"""ConvPool-CNN-C (Springenberg et al. 2015) as Salimans & Kingma (2016) trained it on CIFAR-10.

    input noise N(0, 0.15^2) (training only)
    3 x [conv3x3-96 pad 1, norm, LeakyReLU 0.1]     maxpool 2, dropout 0.5
    3 x [conv3x3-192 pad 1, norm, LeakyReLU 0.1]    maxpool 2, dropout 0.5
    conv3x3-192 valid, 2 x conv1x1-192 (each with norm, LeakyReLU 0.1)
    global average pool, dense 10

The norm follows every conv, before its nonlinearity, like the normalizer wrapped around each layer in
Salimans' script. The convs come from norms.conv2d and the dense layer from norms.linear, so WeightNorm
reparameterizes all ten layers. Salimans' script also wraps the dense layer in its normalizer (BatchNorm
then normalizes the 10 logits); here no activation norm sits on the logits: the paper describes the
norm per conv channel (PAPER.md section 2), and a norm across 10 class scores is a different thing.

Every conv keeps its bias: the model cannot know whether a mean-subtracting norm makes it redundant,
and RMSNorm does not subtract the mean, so there the bias before the norm matters.
"""
from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor, nn

from ...norms import Normalization, init_weight_


class ConvPoolCNNC(nn.Module):
    def __init__(
        self,
        norms: Normalization,
        widths: Sequence[int] = (96, 192),
        num_classes: int = 10,
        input_noise: float = 0.15,
        dropout: float = 0.5,
        slope: float = 0.1,
    ):
        super().__init__()
        c1, c2 = widths
        self.input_noise, self.slope = float(input_noise), float(slope)

        def block(c_in: int, c_out: int, kernel: int, padding: int) -> list[nn.Module]:
            return [norms.conv2d(c_in, c_out, kernel, padding=padding), norms.channels(c_out), nn.LeakyReLU(slope)]

        self.features = nn.Sequential(
            *block(3, c1, 3, 1), *block(c1, c1, 3, 1), *block(c1, c1, 3, 1),
            nn.MaxPool2d(2), nn.Dropout(dropout),
            *block(c1, c2, 3, 1), *block(c2, c2, 3, 1), *block(c2, c2, 3, 1),
            nn.MaxPool2d(2), nn.Dropout(dropout),
            *block(c2, c2, 3, 0), *block(c2, c2, 1, 0), *block(c2, c2, 1, 0),
        )  # fmt: skip
        self.classifier = norms.linear(c2, num_classes)
        self._init_weights()

    def _init_weights(self) -> None:
        """He init for the LeakyReLU layers and a unit-gain one for the logits, zero biases.

        Salimans' script instead rescales each layer on 500 training images so its outputs start with
        zero mean and unit variance per channel (no_norm and weight_norm alike). He init aims at the
        same unit variance without a data pass; tried at scale=mini, the data-dependent version started
        from a higher loss (unit-variance logits) and was no faster in the first 80 steps.
        """
        layers = [m for m in self.modules() if isinstance(m, (nn.Conv2d, nn.Linear))]
        for layer in layers:
            w = torch.empty_like(layer.weight)
            if layer is self.classifier:
                nn.init.kaiming_normal_(w, nonlinearity="linear")
            else:
                nn.init.kaiming_normal_(w, a=self.slope, nonlinearity="leaky_relu")
            init_weight_(layer, w)
            if layer.bias is not None:
                nn.init.zeros_(layer.bias)

    def forward(self, x: Tensor) -> Tensor:
        if self.training and self.input_noise > 0:
            x = x + self.input_noise * torch.randn_like(x)
        return self.classifier(self.features(x).mean((2, 3)))
