"""The training runner: setup.py builds a run from its config, loop.py trains it (one step: step.py),
checkpoint.py saves and restores its state, logs.py writes its numbers, distributed.py spreads it."""
from .config import ConfigError
from .loop import run
from .step import train_step

__all__ = ["ConfigError", "run", "train_step"]
