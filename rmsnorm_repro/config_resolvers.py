"""OmegaConf resolvers used by the configs. The runner imports this module before it resolves a config.

    optim.lr: ${if_eq:${norm.name},none,3.0e-4,3.0e-3}   # the CIFAR task's per-norm learning rate

Configs may choose values by norm name this way; models never do (they only see the norm factory).
"""
from __future__ import annotations

from typing import Any

from omegaconf import OmegaConf


def if_eq(value: Any, expected: Any, then: Any, otherwise: Any) -> Any:
    """`then` when value == expected, else `otherwise`."""
    return then if value == expected else otherwise


def register() -> None:
    """Register the resolvers once (importing this module does it; calling again is harmless)."""
    if not OmegaConf.has_resolver("if_eq"):
        OmegaConf.register_new_resolver("if_eq", if_eq)


register()
