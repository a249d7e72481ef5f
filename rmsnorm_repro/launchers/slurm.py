"""`launcher=slurm`: hydra-submitit-launcher's SLURM launcher, on small clusters without accounting too.

submitit learns a job's state from `sacct`. A cluster without an accounting database (a single node, a
lab's test cluster) has none to ask: every poll would log "Bypassing sacct error", and a job that ends
without a result (cancelled, killed) would never count as ended, so the sweep would wait for it forever.
There, once per sweep, the launcher says so and takes job states from `squeue` instead (SqueueWatcher).

A job that ends without a result (`scancel`, out of requeues) ends the sweep with one line naming it and
its log, not submitit's traceback; the runs already done are kept, and rerunning the command resumes.
"""
from __future__ import annotations

import logging
import subprocess
from typing import Any, Sequence

from hydra.errors import HydraException
from hydra_plugins.hydra_submitit_launcher import submitit_launcher
from submitit.core.utils import UncompletedJobError
from submitit.slurm import slurm

log = logging.getLogger(__name__)

# slurmctld forgets an ended job MinJobAge (default 300 s) after its end; squeue no longer lists it
ENDED = "ENDED"


class SqueueWatcher(slurm.SlurmInfoWatcher):
    """submitit's job watcher with squeue in place of sacct: the states of this user's jobs that slurmctld
    still holds; a registered job it no longer lists has ended."""

    def _make_command(self) -> list[str] | None:
        if not self._registered - self._finished:
            return None
        # --me rather than --jobs: squeue fails when none of the given ids is known any more
        return ["squeue", "--me", "--noheader", "--array", "--states=all", "--format=%i|%T"]

    def read_info(self, string: bytes | str) -> dict[str, dict[str, str]]:
        text = string.decode() if isinstance(string, bytes) else string
        info = super().read_info("JobID|State\n" + text)  # sacct's header: its parser reads the rest
        for job_id in self._registered - self._finished - info.keys():
            info[job_id] = {"JobID": job_id, "State": ENDED}
        return info


def has_accounting() -> tuple[bool, str]:
    """(whether sacct answers, why not)."""
    try:
        proc = subprocess.run(["sacct", "--noheader", "--allocations", "--starttime=now"], capture_output=True,
                              text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, f"sacct: {e}"
    return proc.returncode == 0, (proc.stderr.strip().splitlines() or [f"sacct exited {proc.returncode}"])[-1]


class SlurmLauncher(submitit_launcher.SlurmLauncher):
    """hydra-submitit-launcher's SlurmLauncher (one job-array task per run), plus the two points above."""

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Any:
        accounting, why = has_accounting()
        if not accounting and not isinstance(slurm.SlurmJob.watcher, SqueueWatcher):
            log.info(f"no SLURM accounting here ({why}): job states come from squeue")
            # the watcher is a class attribute, shared by every SlurmJob of this process: the one hook there is
            slurm.SlurmJob.watcher = SqueueWatcher(delay_s=slurm.SlurmJob.watcher._delay_s)
        try:
            return super().launch(job_overrides, initial_job_idx)
        except UncompletedJobError as e:
            # submitit's message: "Job <id> ... has not produced any output (state: <state>)" + the job's log
            first = str(e).strip().splitlines()
            raise HydraException(f"a SLURM job of this sweep ended without a result: {' '.join(first[:2])} "
                                 f"(its log: {self.params['submitit_folder']}); the sweep's other jobs run on; "
                                 "rerun the same command to resume the unfinished runs") from None
