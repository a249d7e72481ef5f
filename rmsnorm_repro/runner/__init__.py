"""The training runner: setup.py builds a run from its config, loop.py trains it (one step: step.py),
checkpoint.py saves and restores its state, files.py / wandb_logger.py / console.py write its numbers
and show its progress, distributed.py spreads it. What a run's record is: rmsnorm_repro/record.py."""
from ..errors import ConfigError
from .loop import run
from .step import train_step

__all__ = ["ConfigError", "run", "train_step"]
