"""The command line's errors a user can fix, each as one line: Hydra's multi-line composition errors, a
launcher that cannot do what the command asks, a full or read-only disk, sbatch refusing a sweep's jobs or
a SLURM job that ended without a result. The entry point (train.py) prints the line and exits non-zero;
HYDRA_FULL_ERROR=1 shows the traceback instead."""
from __future__ import annotations

import errno
import re
import shutil
import subprocess
import sys
from pathlib import Path

from .paths import configs_dir

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


def _settings(args: list[str]) -> dict[str, object]:
    """The command line's plain overrides as Hydra parses them (key or group -> value; `+key`, quotes and
    blanks as Hydra reads them); sweeps, deletions and what does not parse (Hydra reports it) left out."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    parser, found = OverridesParser.create(), {}
    for arg in args:
        if arg.startswith("-"):
            continue
        try:
            [override] = parser.parse_overrides([arg])
        except HydraException:
            continue
        if not override.is_sweep_override() and not override.is_delete():
            found[override.key_or_group] = override.value()
    return found


def _number(value: object) -> float | None:
    """A value as the launcher's int/float field reads it ("00" and 0.0 are 0), else None."""
    try:
        return float(value) if not isinstance(value, bool) else None
    except (TypeError, ValueError):
        return None


def launcher_kind(args: list[str]) -> str:
    """Where the command line's sweep runs its jobs: "slurm", "submitit_local" (launcher=local_parallel),
    "joblib" or "local" (basic: in this process)."""
    settings = _settings(args)
    if settings.get("launcher") == "slurm" or settings.get("hydra/launcher") == "submitit_slurm":
        return "slurm"
    if settings.get("launcher") == "local_parallel" or settings.get("hydra/launcher") == "submitit_local":
        return "submitit_local"
    if settings.get("launcher") == "joblib" or settings.get("hydra/launcher") == "joblib":
        return "joblib"
    return "local"


def launcher_unusable(args: list[str]) -> str | None:
    """Why the command line's launcher cannot do what it says here, else None: `launcher=slurm` (or Hydra's own
    `hydra/launcher=submitit_slurm`) without -m (Hydra runs the job in this process: on a login node, it trains
    there) or without sbatch (submitit fails in 40 lines), `hydra.launcher.n_jobs=0` (joblib's traceback) and
    `hydra.launcher.timeout_min=0` (submitit then reports each job as a SLURM job that ended without a result,
    even a local one). Values are read as Hydra reads them: n_jobs=00 is 0."""
    settings = _settings(args)
    if "hydra.launcher.n_jobs" in settings and _number(settings["hydra.launcher.n_jobs"]) == 0:
        return (f"hydra.launcher.n_jobs={settings['hydra.launcher.n_jobs']} runs nothing: give 1 or more jobs at a "
                "time (-1: one per CPU core)")
    if "hydra.launcher.timeout_min" in settings and _number(settings["hydra.launcher.timeout_min"]) == 0:
        return (f"hydra.launcher.timeout_min={settings['hydra.launcher.timeout_min']} ends every job as it starts: "
                "give the minutes a job may take (the run itself stops cleanly at train.max_minutes)")
    slurm = ("launcher=slurm" if settings.get("launcher") == "slurm" else
             "hydra/launcher=submitit_slurm" if settings.get("hydra/launcher") == "submitit_slurm" else None)
    if slurm is None:
        return None
    if not {"-m", "--multirun"} & set(args):
        return (f"{slurm} submits a sweep's jobs to SLURM and takes effect only with -m: add -m (a single "
                f"run is a sweep of one), or drop {slurm} to train in this process")
    if shutil.which("sbatch") is None:
        return (f"{slurm} needs SLURM's sbatch, and there is no SLURM here (no sbatch on PATH): run the "
                "sweep on the cluster's login node, or train here with launcher=joblib")
    return None


def slurm_error(e: BaseException) -> tuple[str, int] | None:
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
    tasks = sorted(p.parent.name for p in (configs_dir() / "task_scale").glob(f"*/{scale}.yaml"))
    if not tasks:
        return None
    named = " and ".join(tasks) if len(tasks) <= 2 else ", ".join(tasks[:-1]) + " and " + tasks[-1]
    has = sorted(p.stem for p in (configs_dir() / "task_scale" / task).glob("*.yaml"))
    line = f"scale={scale} exists for {named} only, not task={task}" + (f" (task={task} has scale={', '.join(has)})" if has else "")
    swept = [arg for arg in sys.argv[1:] if arg.startswith("task=") and "," in arg]
    if swept and f"task={task}" not in swept[0].replace(",", " task=").split():
        # a multirun is first composed with the default task, which may lack this scale
        line += f"; a sweep over tasks ({swept[0]}) is composed with the default task first: run one sweep per task"
    return line
