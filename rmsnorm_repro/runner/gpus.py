"""One GPU per job for local sweeps (launcher=joblib, local_parallel) on a machine with several GPUs.

Each job of a local sweep runs in its own process beside the others; left alone they would all train on
GPU 0. A job takes the first GPU no running job of the same sweep holds, by an exclusive lock on
<sweep dir>/.gpus/<index>.lock held for as long as the job runs (the kernel drops it if the process
dies), and makes it torch's current device. With every GPU taken, the job is refused in one line: more
jobs at once than GPUs. Nothing is chosen where the job's device is fixed already: a device index in
`device`, a DDP job (one GPU per rank: distributed.rank_device), a launcher that set
CUDA_VISIBLE_DEVICES to one GPU, or one GPU in all.

submitit's local executor (launcher=local_parallel) sets every job's CUDA_VISIBLE_DEVICES itself: to
"" with gpus_per_node=0 (no GPU: the job would train on the CPU of a GPU machine) and to "0" for every
job with gpus_per_node=1. A one-task job gets back the sweep's own setting (`remember_visible`, in the
sweep's main process) before anything starts CUDA, and takes its GPU as a joblib job does.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path
from typing import Iterator

import torch

from .config import ConfigError


SWEEP_GPUS_ENV = "RMSNORM_SWEEP_CUDA_VISIBLE_DEVICES"  # the sweep's own CUDA_VISIBLE_DEVICES, "*" where unset


def remember_visible() -> None:
    """In a sweep's main process: note its CUDA_VISIBLE_DEVICES for the jobs (restore_visible)."""
    os.environ[SWEEP_GPUS_ENV] = os.environ.get("CUDA_VISIBLE_DEVICES", "*")


def restore_visible() -> None:
    """In a job that submitit's local executor started with one task: the sweep's CUDA_VISIBLE_DEVICES
    instead of the executor's (module docstring). Runs before CUDA starts; a DDP job keeps the
    executor's GPUs, one per rank."""
    sweep = os.environ.get(SWEEP_GPUS_ENV)
    if sweep is None or os.environ.get("SUBMITIT_EXECUTOR") != "local" or os.environ.get("SUBMITIT_LOCAL_NTASKS") != "1":
        return
    if sweep == "*":
        os.environ.pop("CUDA_VISIBLE_DEVICES", None)
    else:
        os.environ["CUDA_VISIBLE_DEVICES"] = sweep


def _chooses(device: torch.device, distributed: bool) -> bool:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    return (device.type == "cuda" and device.index is None and not distributed
            and (visible is None or "," in visible) and torch.cuda.device_count() > 1)


@contextlib.contextmanager
def one_per_job(sweep_dir: Path, device: torch.device, distributed: bool) -> Iterator[int | None]:
    """Hold a GPU of this machine for the job while the block runs; yields its index (None: nothing
    chosen, see the module docstring)."""
    if not _chooses(device, distributed):
        yield None
        return
    locks = Path(sweep_dir) / ".gpus"
    locks.mkdir(parents=True, exist_ok=True)
    count = torch.cuda.device_count()
    for index in range(count):
        handle = open(locks / f"{index}.lock", "a")  # noqa: SIM115 (held until the job ends)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            continue
        try:
            torch.cuda.set_device(index)
            yield index
        finally:
            handle.close()  # releases the lock
        return
    raise ConfigError(f"this sweep runs more jobs at once than the machine has GPUs ({count}), and each job takes "
                      f"one: set hydra.launcher.n_jobs={count} (joblib) or hydra.launcher.array_parallelism={count} "
                      f"(local_parallel), or fewer")
