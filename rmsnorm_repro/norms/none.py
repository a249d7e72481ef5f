"""norm=none: the paper's Baseline. Plain layers, identity norms (all inherited)."""
from .base import Normalization, register


@register("none")
class NoNorm(Normalization):
    pass
