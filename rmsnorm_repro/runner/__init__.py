"""The training runner: config checks, loop, timing, checkpoints, logs (see loop.py)."""
from .config import ConfigError
from .loop import run

__all__ = ["ConfigError", "run"]
