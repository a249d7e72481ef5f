"""`launcher=slurm` on small clusters too: job states from squeue where SLURM keeps no accounting.

hydra-submitit-launcher submits the jobs and submitit watches them through `sacct`. A cluster without
an accounting database (one node, a lab's test cluster) has no sacct to answer: every poll would log
"Bypassing sacct error", and a job that ends without a result (cancelled, killed) would never count as
ended, so the sweep would wait for it forever. configs/launcher/slurm.yaml installs the Hydra callback
below; when a sweep starts it asks sacct once and, if sacct does not answer, says so in one line and
has submitit read job states from squeue instead (SqueueWatcher): quiet polls, and ended jobs end.
"""
from __future__ import annotations

import logging
import subprocess
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig
from submitit.slurm import slurm

log = logging.getLogger(__name__)

# the state of a job squeue no longer lists: slurmctld forgets an ended job MinJobAge (300 s) after its end
ENDED = "ENDED"


class SqueueWatcher(slurm.SlurmInfoWatcher):
    """submitit's job watcher with squeue in place of sacct: the states of this user's jobs that slurmctld
    still holds; a job it no longer lists has ended."""

    def _make_command(self) -> list[str] | None:
        if not self._registered - self._finished:
            return None
        # --me rather than --jobs: squeue fails when none of the given ids is known any more
        return ["squeue", "--me", "--noheader", "--array", "--states=all", "--format=%i|%T"]

    def read_info(self, string: bytes | str) -> dict[str, dict[str, str]]:
        text = string.decode() if isinstance(string, bytes) else string
        info = super().read_info("JobID|State\n" + text)  # with sacct's header, sacct's parser reads it
        for job_id in self._registered - self._finished - info.keys():
            info[job_id] = {"JobID": job_id, "State": ENDED}
        return info


def accounting() -> str | None:
    """None where sacct answers, else why it does not (its last line of error)."""
    try:
        proc = subprocess.run(["sacct", "--noheader", "--allocations", "--starttime=now"], capture_output=True,
                              text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return str(e)
    if proc.returncode == 0:
        return None
    return (proc.stderr.strip().splitlines() or [f"sacct exited {proc.returncode}"])[-1]


class JobStatesFromSqueue(Callback):
    """At the start of a SLURM sweep: squeue's job states where sacct does not answer."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        why = accounting()
        if why is None or isinstance(slurm.SlurmJob.watcher, SqueueWatcher):
            return
        log.info(f"no SLURM accounting here ({why}): job states come from squeue")
        # submitit's only hook: the watcher is a class attribute, shared by the SlurmJobs of this process
        slurm.SlurmJob.watcher = SqueueWatcher(delay_s=slurm.SlurmJob.watcher._delay_s)
