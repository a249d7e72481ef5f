"""Hydra entry point: `python -m rmsnorm_repro.train task=convpool norm=rmsnorm` (or `rmsnorm-train`).

    python -m rmsnorm_repro.train task=convpool norm=rmsnorm scale=mini seed=2
    python -m rmsnorm_repro.train -m task=convpool norm=none,layernorm,rmsnorm seed=1,2
    python -m rmsnorm_repro.train -m launcher=joblib hydra.launcher.n_jobs=4 norm=layernorm,rmsnorm
    torchrun --nproc_per_node=8 -m rmsnorm_repro.train task=transformer data=wmt14   # DDP, see runner/distributed.py

Bad input (an unknown option, p outside (0, 1], a missing data root, ...) ends in one line on
stderr and exit code 2; HYDRA_FULL_ERROR=1 shows the traceback instead. A diverged run is a
result, not an error: exit code 0, so a sweep goes on. SIGINT/SIGTERM checkpoint and exit 128+signal.
"""
from __future__ import annotations

import contextlib
import os
import signal
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from hydra.errors import HydraException
from omegaconf import DictConfig
from omegaconf.errors import OmegaConfBaseException
import torch

from . import record
from .cli_errors import DISK_ERRORS, disk_error_line, launcher_kind, launcher_unusable, one_line, slurm_error
from .errors import ConfigError
from .launchers.sweep import end_unended
from .paths import configs_dir
from .redact import scrub_yaml_file
from .runner import gpus, run
from .runner.distributed import requested_world
from .runner.setup import RunDirLock
from .runner.signals import (SWEEP_PID_ENV, forward_to_workers, in_sweep_process, in_sweep_worker,
                             park_if_sweep_stops, stopped_in_process, sweep_job)


class RunFailed(Exception):
    """A job's bad input, already reported on stderr (in a multirun Hydra re-raises it at the end)."""


class RunInterrupted(Exception):
    """A sweep job stopped by a signal of its own; the sweep ends with 128 + signal after its other jobs."""

    def __init__(self, code: int, message: str):
        super().__init__(code, message)  # both in args: the exception crosses a process (joblib pickles it)

    @property
    def code(self) -> int:
        return self.args[0]

    def __str__(self) -> str:
        return self.args[1]


# An absolute path: Hydra resolves a relative one against the caller's module, which differs between
# `python -m rmsnorm_repro.train` and the `rmsnorm-train` console script. The checkout's configs/, or
# the copy an installed wheel ships (paths.py, which also registers the resolvers hydra.run.dir uses).
CONFIGS = configs_dir()


@hydra.main(version_base="1.3", config_path=str(CONFIGS), config_name="train")
def _job(cfg: DictConfig) -> None:
    hydra_cfg = HydraConfig.get()
    run_dir = Path(hydra_cfg.runtime.output_dir)
    # Hydra's copies of the config hold the raw overrides: no secrets there
    if hydra_cfg.output_subdir:
        for name in ("config.yaml", "overrides.yaml", "hydra.yaml"):
            scrub_yaml_file(run_dir / hydra_cfg.output_subdir / name)
    if hydra_cfg.mode == RunMode.MULTIRUN:
        scrub_yaml_file(Path(hydra_cfg.sweep.dir) / "multirun.yaml")
        gpus.restore_visible()
    with sweep_job():  # in a sweep's worker: marked as running a job while it runs
        _run_job(cfg, hydra_cfg, run_dir)


def _run_job(cfg: DictConfig, hydra_cfg, run_dir: Path) -> None:
    try:
        with job_gpu(cfg, hydra_cfg):
            summary = run(cfg, run_dir, experiment=hydra_cfg.runtime.choices.get("experiment"),
                          overrides=list(hydra_cfg.overrides.task))
    # bad input, an unresolved interpolation, a run file a resume cannot read, a disk
    except (ConfigError, OmegaConfBaseException, record.RecordError, OSError) as e:
        if os.environ.get("RMSNORM_FULL_ERROR") == "1" or isinstance(e, OSError) and e.errno not in DISK_ERRORS:
            raise
        print(f"error: {one_line(disk_error_line(e) if isinstance(e, OSError) else str(e))}", file=sys.stderr, flush=True)
        if hydra_cfg.mode == RunMode.RUN:
            raise SystemExit(2) from None  # past Hydra's own "Error executing job" report
        raise RunFailed(str(e)) from None  # a multirun goes on; Hydra re-raises this at its end
    if summary["status"] == "interrupted":
        code = 128 + signal.Signals[summary["interrupted_by"]].value
        if in_sweep_worker():
            park_if_sweep_stops()
            # stopped on its own: the sweep's other jobs go on (an Exception, not an exit)
            raise RunInterrupted(code, f"{run_dir} was interrupted by {summary['interrupted_by']}")
        if in_sweep_process():  # launcher=basic, joblib's n_jobs=1: the sweep stops with its job
            stopped_in_process(summary["interrupted_by"])
        raise SystemExit(code)


def job_gpu(cfg: DictConfig, hydra_cfg):
    """A local sweep's job holds a GPU of its own while it runs (runner/gpus.py); other runs choose nothing."""
    if hydra_cfg.mode != RunMode.MULTIRUN or not in_sweep_worker():
        return contextlib.nullcontext()
    return gpus.one_per_job(Path(hydra_cfg.sweep.dir), torch.device(record.resolved_device(cfg.device)),
                            requested_world().distributed)


def main() -> None:
    # the variables _main sets for this process and its job processes; restored after, so an
    # in-process caller (the tests, a notebook) keeps its own
    saved = {name: os.environ.get(name) for name in ("HYDRA_FULL_ERROR", "RMSNORM_FULL_ERROR", record.SWEPT_ENV,
                                                     gpus.SWEEP_GPUS_ENV, SWEEP_PID_ENV)}
    try:
        _main()
    finally:
        for lock in list(RunDirLock.held.values()):  # taken before Hydra wrote (busy_run) by a run that never began
            lock.release()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _main() -> None:
    # Let Hydra's exceptions reach us (instead of its multi-line report) unless the user asks for them.
    full_error = os.environ.get("HYDRA_FULL_ERROR") == "1"
    os.environ["HYDRA_FULL_ERROR"] = "1"
    os.environ["RMSNORM_FULL_ERROR"] = "1" if full_error else "0"
    if int(os.environ.get("RANK", "0")) > 0:
        # torchrun starts one Hydra per rank, all with the same run dir (its name has no timestamp):
        # rank 0 alone writes Hydra's .hydra/ files and the job log; the other ranks log to the console
        sys.argv += ["hydra.output_subdir=null", "hydra/job_logging=stdout"]
    launcher_line = launcher_unusable(sys.argv[1:])
    if launcher_line is not None:
        print(f"error: {launcher_line}", file=sys.stderr, flush=True)
        sys.exit(2)
    if {"-m", "--multirun"} & set(sys.argv):
        forward_to_workers(launcher_kind(sys.argv[1:]))  # a stopped sweep stops its worker processes too
        gpus.remember_visible()  # local_parallel's jobs get it back (runner/gpus.py)
        # what the sweep varies names its job folders (record.job_dirname), in every job process
        try:
            os.environ[record.SWEPT_ENV] = ",".join(record.command_line_sweeps(sys.argv[1:]))
        except HydraException:  # a malformed override: Hydra reports it in one line below
            pass
    try:
        try:
            _job()
        except Exception:
            end_unended()  # a failed job makes Hydra raise before the sweep's end table
            raise
    except RunFailed:
        sys.exit(2)
    except RunInterrupted as e:
        print(f"error: {e}; the sweep's other jobs ran: rerun the same command to resume it", file=sys.stderr, flush=True)
        sys.exit(e.code)
    except (HydraException, OmegaConfBaseException) as e:
        if full_error:
            raise
        print(f"error: {one_line(str(e))}", file=sys.stderr, flush=True)
        sys.exit(2)
    except OSError as e:  # Hydra's own files (the run dir, .hydra/) on a full, read-only or forbidden disk
        if full_error or e.errno not in DISK_ERRORS:
            raise
        print(f"error: {disk_error_line(e)}", file=sys.stderr, flush=True)
        sys.exit(2)
    except ValueError as e:  # logging's "Unable to configure handler 'file'": Hydra's train.log cannot be opened
        cause = e.__cause__ or e.__context__
        if full_error or not (isinstance(cause, OSError) and cause.errno in DISK_ERRORS):
            raise
        print(f"error: {disk_error_line(cause)}", file=sys.stderr, flush=True)
        sys.exit(2)
    except RuntimeError as e:
        found = None if full_error else slurm_error(e)
        if found is None:
            raise
        print(f"error: {found[0]}", file=sys.stderr, flush=True)
        sys.exit(found[1])
    except KeyboardInterrupt:  # a second Ctrl-C: the first one's checkpoint was not awaited
        print("error: interrupted again: stopped at once; the last checkpoint is kept (rerun the same "
              "command to resume from it)", file=sys.stderr, flush=True)
        sys.exit(128 + signal.SIGINT)


if __name__ == "__main__":
    main()
