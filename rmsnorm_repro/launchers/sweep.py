"""What a multirun is about to do, how far it is, and its compare table at the end.

`SweepCallback` is a Hydra callback (configs/train.yaml, hydra.callbacks): before the first job it
prints one line (how many runs, over which keys, where, how many at a time); after each job that
ends in this process (the basic launcher's, which runs jobs one after the other) a line with the
runs done, the time so far and an estimate of the time left; at the end the compare table of the
sweep folder (report/compare.py), printed. Each run draws its own
progress bar with its ETA (runner/console.py).

    job_count({"norm": "layernorm,rmsnorm", "seed": "1,2,3"})   # 6
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.experimental.callback import Callback
from omegaconf import DictConfig


def job_count(params: dict[str, Any]) -> tuple[int, list[str]]:
    """(jobs, swept keys) of a multirun whose sweep values are `params` (key -> "a,b", "range(3)")."""
    count, swept = 1, []
    for override in OverridesParser.create().parse_overrides([f"{k}={v}" for k, v in params.items()]):
        if override.is_sweep_override():
            count *= len(list(override.sweep_string_iterator()))
            swept.append(override.key_or_group)
    return count, swept


def sweep_params(config: DictConfig) -> dict[str, Any]:
    """The preset's hydra.sweeper.params, with the command line's overrides over them."""
    params = {str(k): v for k, v in (config.hydra.sweeper.get("params") or {}).items() if v is not None}
    for line in config.hydra.overrides.task:
        key, _, value = str(line).partition("=")
        params[key.lstrip("+~")] = value
    return params


def _shown(path: str | Path) -> str:
    """A path as a user typed it: relative to the current folder when under it."""
    relative = os.path.relpath(path)
    return relative if not relative.startswith("..") else str(path)


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min"


# the sweep this process runs, until its end table is printed: a failed job makes Hydra raise before
# on_multirun_end, and the entry point then prints it (end_unended)
_unended: tuple["SweepCallback", DictConfig] | None = None


def end_unended() -> None:
    """The end table of a sweep that a failed job stopped before Hydra's on_multirun_end."""
    if _unended is not None:
        callback, config = _unended
        callback.on_multirun_end(config)


class SweepCallback(Callback):
    def __init__(self) -> None:
        self.total, self.done, self.start, self.pid = 0, 0, 0.0, 0

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        global _unended
        _unended = (self, config)
        self.total, swept = job_count(sweep_params(config))
        self.start, self.pid = time.monotonic(), os.getpid()
        at_once = config.hydra.launcher.get("n_jobs") or config.hydra.launcher.get("array_parallelism") or 1
        over = f" over {' x '.join(swept)}" if swept else ""
        print(f"sweep: {self.total} run{'s' if self.total != 1 else ''}{over} into {_shown(config.hydra.sweep.dir)}, "
              f"{at_once} at a time ({config.hydra.launcher._target_.rsplit('.', 1)[-1]}); a finished run is "
              "not trained again, and the compare table follows the last run", file=sys.stderr, flush=True)

    def on_job_end(self, config: DictConfig, job_return: Any, **kwargs: Any) -> None:
        if os.getpid() != self.pid:  # a worker of a parallel launcher (with a copy of this object): not its to count
            return
        self.done += 1
        spent = time.monotonic() - self.start
        left = spent / self.done * (self.total - self.done)
        print(f"sweep: {self.done}/{self.total} runs done in {_minutes(spent)}; about {_minutes(left)} left",
              file=sys.stderr, flush=True)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        # printed only: a folder of its own in the sweep folder would sit among the job folders
        from ..report import compare  # here, not at the top: training imports this module, and compare loads plotting

        global _unended
        _unended = None
        sweep = Path(config.hydra.sweep.dir)
        try:
            text = compare.render(compare.compare([str(sweep)]), Path.cwd())
        except (ValueError, FileNotFoundError) as err:  # e.g. no run completed, or a sweep over tasks
            print(f"rmsnorm-report compare: {err}", file=sys.stderr, flush=True)
            text = None
        if text is not None:
            print(text, flush=True)
            print(f"(`rmsnorm-report compare {_shown(sweep)}` writes this page and its curves)", file=sys.stderr,
                  flush=True)
        # jobs stopped before their run wrote anything (bad input, a crash at start): the table cannot list them
        silent = sorted(job.name for job in sweep.iterdir() if job.is_dir() and (job / ".hydra").is_dir()
                        and not (job / "summary.json").exists() and not (job / "config.yaml").exists()) \
            if sweep.is_dir() else []
        if silent:
            print(f"sweep: {len(silent)} job(s) ended without a summary: {', '.join(silent)} (each one's error is "
                  "above)", file=sys.stderr, flush=True)
