"""A paper-scale sweep on generated data it did not ask for, refused once before any job starts.

Each job refuses such a run too (runner/setup.plan_run, tasks/paper_data.refusal), but only as it runs:
a sweep of N jobs said the same line N times (under SLURM, after submitting N jobs to say it). This
callback (configs/train.yaml, hydra.callbacks, ahead of the others) asks first, from the sweep's own
config, where the sweep varies none of what the refusal reads (task, scale, data); a sweep over those is
left to its jobs, each of which decides for itself.
"""
from __future__ import annotations

import sys
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from ..tasks.paper_data import refusal
from .sweep import job_count, sweep_params

READ_BY_THE_REFUSAL = {"task", "scale", "data"}


class RefuseUnaskedPaperScaleSweep(Callback):
    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        _, swept = job_count(sweep_params(config))
        if READ_BY_THE_REFUSAL & set(swept):
            return
        line = refusal(config, [str(o) for o in config.hydra.overrides.task])
        if line is not None:
            print(f"error: {line}", file=sys.stderr, flush=True)
            sys.exit(2)
