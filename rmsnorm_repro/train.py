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
import errno
import os
import re
import signal
import subprocess
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
from .paths import configs_dir
from .runner import ConfigError, run
from .runner import gpus
from .runner.config import scrub_yaml_file
from .runner.distributed import requested_world
from .runner.signals import forward_to_workers, in_sweep_worker, park_if_sweep_stops


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
    try:
        with job_gpu(cfg, hydra_cfg):
            summary = run(cfg, run_dir, experiment=hydra_cfg.runtime.choices.get("experiment"),
                          overrides=list(hydra_cfg.overrides.task))
    except (ConfigError, OmegaConfBaseException, OSError) as e:  # bad input, an unresolved interpolation, a disk
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
        raise SystemExit(code)


def job_gpu(cfg: DictConfig, hydra_cfg):
    """A local sweep's job holds a GPU of its own while it runs (runner/gpus.py); other runs choose nothing."""
    if hydra_cfg.mode != RunMode.MULTIRUN or not in_sweep_worker():
        return contextlib.nullcontext()
    return gpus.one_per_job(Path(hydra_cfg.sweep.dir), torch.device(record.resolved_device(cfg.device)),
                            requested_world().distributed)


# a full disk, a read-only or forbidden folder: the user's to fix, one line each
DISK_ERRORS = (errno.ENOSPC, errno.EROFS, errno.EACCES, errno.EPERM)


def disk_error_line(e: OSError) -> str:
    where = e.filename or "the run's files"
    if e.errno == errno.ENOSPC:
        kept = " (the previous checkpoint is intact)" if str(where).endswith(".pt") else ""
        return (f"no space left on the device while writing {where}{kept}: free some space, then rerun the same "
                "command (it resumes from the last checkpoint)")
    why = "the file system is read-only" if e.errno == errno.EROFS else "permission denied"
    return (f"cannot write {where} ({why}): point paths.runs_dir (or hydra.run.dir) and paths.cache_dir at "
            "folders you can write, or fix the folder's permissions")


def _slurm_error(e: BaseException) -> tuple[str, int] | None:
    """(one line, exit code) for submitit's errors that need no traceback, else None: sbatch refusing the
    jobs (resources the cluster lacks: bad input, 2; sbatch's own line is already on stderr), or a job
    that ended without returning (scancel, killed, out of requeues: 1). A job that raised keeps its
    traceback (submitit's FailedJobError from the job). Without submitit imported, no job was submitted."""
    utils = sys.modules.get("submitit.core.utils")
    if utils is None or not isinstance(e, utils.UncompletedJobError):
        return None
    cause = e.__cause__
    if isinstance(cause, subprocess.CalledProcessError) and cause.cmd and cause.cmd[0] == "sbatch":
        return (f"sbatch refused the sweep's jobs ({one_line(str(e))}): ask for what the partition has "
                "(hydra.launcher.partition, gpus_per_node, cpus_per_task, mem_gb, timeout_min)"), 2
    # "Job 12_0 (task: 0) with path <folder>/12_0_0_result.pkl\nhas not produced any output (state: CANCELLED)..."
    found = re.search(r"Job (\S+) .*? with path (\S+)\s+has not produced any output \(state: (\w+)\)", str(e), re.S)
    if type(e) is not utils.UncompletedJobError or not found:
        return None
    job, result, state = found.groups()
    return (f"SLURM job {job} of this sweep ended without a result (state {state}; its log is in "
            f"{Path(result).parent}); rerun the same command to resume the unfinished runs"), 1


def one_line(message: str) -> str:
    """Hydra's messages span lines ("Available options in 'norm':" + one option per line)."""
    parts, options = [], []
    for line in (s.strip() for s in message.splitlines()):
        if line.startswith("Config search path"):
            break
        if not line:
            continue
        if parts and parts[-1].endswith(":"):
            options.append(line)
            continue
        if options:
            parts[-1] += " " + ", ".join(options)
            options = []
        parts.append(line)
    if options:
        parts[-1] += " " + ", ".join(options)
    line = re.sub(r"^In '[\w/]+': ", "", "; ".join(parts))
    return _missing_task_scale(line) or line


def _missing_task_scale(line: str) -> str | None:
    """Hydra's "Could not find 'task_scale/<task>/<scale>'" as the user meant it: that scale has no recipe
    for that task (e.g. scale=small: the translation tasks only)."""
    found = re.search(r"Could not find 'task_scale/([\w-]+)/([\w-]+)'", line)
    if not found:
        return None
    task, scale = found.groups()
    tasks = sorted(p.parent.name for p in (CONFIGS / "task_scale").glob(f"*/{scale}.yaml"))
    if not tasks:
        return None
    named = " and ".join(tasks) if len(tasks) <= 2 else ", ".join(tasks[:-1]) + " and " + tasks[-1]
    has = sorted(p.stem for p in (CONFIGS / "task_scale" / task).glob("*.yaml"))
    line = f"scale={scale} exists for {named} only, not task={task}" + (f" (task={task} has scale={', '.join(has)})" if has else "")
    swept = [arg for arg in sys.argv[1:] if arg.startswith("task=") and "," in arg]
    if swept and f"task={task}" not in swept[0].replace(",", " task=").split():
        # a multirun is first composed with the default task, which may lack this scale
        line += f"; a sweep over tasks ({swept[0]}) is composed with the default task first: run one sweep per task"
    return line


def main() -> None:
    # the variables _main sets for this process and its job processes; restored after, so an
    # in-process caller (the tests, a notebook) keeps its own
    saved = {name: os.environ.get(name) for name in ("HYDRA_FULL_ERROR", "RMSNORM_FULL_ERROR", record.SWEPT_ENV,
                                                     gpus.SWEEP_GPUS_ENV)}
    try:
        _main()
    finally:
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
    if {"-m", "--multirun"} & set(sys.argv):
        forward_to_workers()  # a stopped sweep stops its worker processes too
        gpus.remember_visible()  # local_parallel's jobs get it back (runner/gpus.py)
        # what the sweep varies names its job folders (record.job_dirname), in every job process
        try:
            os.environ[record.SWEPT_ENV] = ",".join(record.command_line_sweeps(sys.argv[1:]))
        except HydraException:  # a malformed override: Hydra reports it in one line below
            pass
    try:
        _job()
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
    except RuntimeError as e:
        found = None if full_error else _slurm_error(e)
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
