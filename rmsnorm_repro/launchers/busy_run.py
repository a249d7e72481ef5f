"""A run or sweep refused before Hydra touches a folder another process trains in.

Hydra writes .hydra/ (the command's overrides) and opens train.log in a run folder before the run
starts, so a refused second process would still rewrite the first run's record of its command. This
callback (configs/train.yaml, hydra.callbacks) comes first: a single run takes its folder's lock
(runner/setup.RunDirLock) before Hydra writes anything, so of two runs started at once in one folder the
second is refused before it writes; a sweep asks about every job folder already in its sweep folder (a
second sweep into one folder runs the same jobs: a job of this machine training there refuses the whole
sweep), and each job takes its own lock as it starts.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from ..errors import ConfigError
from ..record import busy, lock_holder


class RefuseBusyRunDir(Callback):
    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        from ..runner.setup import RunDirLock  # here: the callback is built for every command, --help too

        if int(os.environ.get("RANK", "0")) > 0:  # torchrun's other ranks share rank 0's folder and lock
            return
        try:
            RunDirLock(Path(config.hydra.run.dir))  # held by this process until its run ends (train._job)
        except ConfigError as e:
            print(f"error: {e}", file=sys.stderr, flush=True)
            sys.exit(2)

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        jobs = sorted(p for p in sweep_dir.iterdir() if p.is_dir()) if sweep_dir.is_dir() else []
        for job_dir in jobs:
            holder = lock_holder(job_dir)
            if holder is not None:
                print(f"error: {busy(job_dir, holder, 'hydra.sweep.dir')}", file=sys.stderr, flush=True)
                sys.exit(2)
