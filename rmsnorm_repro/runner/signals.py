"""Stop requests: SIGINT/SIGTERM end a run at a checkpoint, and a sweep's workers with it.

A run (stop_requests) checkpoints after the current step, or cuts its evaluation short between
batches, and exits 128 + signal. A sweep whose jobs run in worker processes (launcher=joblib,
local_parallel) asks each of them to stop (forward_to_workers), waits for their checkpoints, and
exits: no worker keeps training as an orphan, and no further job starts. A worker whose job was
interrupted while the sweep stops parks itself (park_if_sweep_stops), so the sweep's wait ends as
soon as they have checkpointed; a job stopped on its own (a signal to that worker alone) ends as a
single run does and the sweep goes on. Ctrl-C reaches a sweep's workers twice per press (the terminal
signals the whole process group, and the sweep passes it on): a worker ignores every signal after the
first, so any number of presses, at any spacing, leave each running job checkpointed (a single run:
a second Ctrl-C kills). The sweep's last line counts the jobs that said they checkpointed.

In a SLURM job started by submitit, SIGUSR2 is SLURM's warning that the job's time limit is near
(`--signal=USR2@signal_delay_s`), and submitit's handler for it requeues the job: a run checkpoints
after the current step, like on SIGTERM, and then passes the signal on to that handler.
"""
from __future__ import annotations

import contextlib
import logging
import os
import signal
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
REQUEUE_SIGNAL = signal.SIGUSR2  # submitit's default (its SUBMITIT_PREEMPT_SIGNAL)
WORKER_GRACE_S = 60  # SLURM gives ~30-90 s between SIGTERM and SIGKILL
SWEEP_PID_ENV = "RMSNORM_SWEEP_PID"  # the sweep's main process, for its workers
STOP_NOTICE_WAIT_S = 1.0  # a worker Ctrl-C reached first waits this long for the sweep's stop notice


def _stop_notice(sweep_pid: int | str) -> Path:
    """The file a stopping sweep creates, so that its workers know the stop is the sweep's."""
    return Path(tempfile.gettempdir()) / f"rmsnorm-sweep-{sweep_pid}.stopping"


@contextlib.contextmanager
def stop_requests() -> Iterator[dict[str, Any]]:
    """SIGINT/SIGTERM ask the loop to checkpoint and stop after the current step; a second Ctrl-C kills.
    So does SIGUSR2 where a handler (submitit's) is installed for it, which then gets the signal."""
    flag: dict[str, Any] = {"signal": None}
    previous = {}
    # in a local sweep's worker every further signal is ignored: Ctrl-C reaches it from the terminal and
    # from the sweep, once per press, and `timeout` signals its group again; the sweep kills a worker
    # that has not checkpointed within WORKER_GRACE_S
    worker = in_sweep_worker()

    def handler(signum, frame):
        flag["signal"] = flag["signal"] or signal.Signals(signum).name  # the first says why
        if signum == signal.SIGINT and not worker:  # a single run: a second Ctrl-C kills; a repeated SIGTERM
            signal.signal(signum, previous[signum])  # (a process group's) must not cut the checkpoint short

    requeue = (REQUEUE_SIGNAL,) if callable(signal.getsignal(REQUEUE_SIGNAL)) else ()
    for sig in STOP_SIGNALS + requeue:
        try:
            previous[sig] = signal.signal(sig, handler)
        except ValueError:  # not the main thread (e.g. some launchers): no graceful stop there
            pass
    try:
        yield flag
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
    if flag["signal"] == REQUEUE_SIGNAL.name:
        signal.raise_signal(REQUEUE_SIGNAL)  # the checkpoint is saved: submitit may requeue (and exit)


def forward_to_workers() -> None:
    """In a sweep's main process: on SIGINT/SIGTERM, ask every worker process to stop (SIGTERM),
    give them WORKER_GRACE_S to checkpoint, kill what is left, say what was kept, and exit."""
    import psutil

    os.environ[SWEEP_PID_ENV] = str(os.getpid())

    def handler(signum, frame):
        for sig in STOP_SIGNALS:  # once: a repeated Ctrl-C must not start the wait over, or cut it short
            signal.signal(sig, signal.SIG_IGN)
        notice = _stop_notice(os.getpid())
        notice.touch()
        children = psutil.Process().children(recursive=True)
        # loky's resource tracker ignores SIGTERM by design and holds no run: it is simply ended
        trackers = [p for p in children if _is_resource_tracker(p)]
        workers = [p for p in children if p not in trackers]
        for proc in workers:
            with contextlib.suppress(psutil.Error):
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + WORKER_GRACE_S
        while time.monotonic() < deadline and any(_busy(p) for p in workers):
            time.sleep(0.05)
        alive = [p for p in workers if _busy(p)]
        parked = [p for p in workers if _parked(p)]  # park_if_sweep_stops: its run's summary and checkpoint are written
        for proc in workers + trackers:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        lost = (f"; {len(alive)} did not stop within {WORKER_GRACE_S} s and were killed: their runs resume from "
                "their last periodic checkpoint" if alive else "")
        other = len(workers) - len(parked) - len(alive)
        ended = (f"; {other} other worker process(es) ended without saying so (idle, or a job that did not save: "
                 "a run folder without summary.json resumes from its last periodic checkpoint)" if other else "")
        done = (f"{len(parked)} running job(s) checkpointed their runs (summary status interrupted){lost}{ended}"
                if workers else
                "no job of it ran in a local process (jobs submitted to SLURM run on: scancel them to stop them)")
        print(f"{signal.Signals(signum).name}: the sweep stopped; {done}. Finished runs are kept: rerun the same "
              "command to resume", flush=True)
        notice.unlink(missing_ok=True)
        os._exit(128 + signum)  # past the launcher's pool, which would start the next jobs

    for sig in STOP_SIGNALS:
        signal.signal(sig, handler)


def _is_resource_tracker(proc) -> bool:
    import psutil

    try:
        return any("resource_tracker" in part for part in proc.cmdline())
    except psutil.Error:
        return False


def _busy(proc) -> bool:
    """A worker still running a job: neither ended nor parked by park_if_sweep_stops."""
    import psutil

    try:
        return proc.status() not in (psutil.STATUS_STOPPED, psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)
    except psutil.Error:
        return False


def _parked(proc) -> bool:
    import psutil

    try:
        return proc.status() == psutil.STATUS_STOPPED
    except psutil.Error:
        return False


def in_sweep_worker() -> bool:
    """Whether this process is a worker of a local sweep: a descendant of the sweep's main process (a
    SLURM job, which inherits the variable too, is not: the scheduler ends it)."""
    import psutil

    sweep = os.environ.get(SWEEP_PID_ENV)
    if sweep is None or sweep == str(os.getpid()):
        return False
    with contextlib.suppress(psutil.Error, ValueError):
        return any(parent.pid == int(sweep) for parent in psutil.Process().parents())
    return False


def park_if_sweep_stops() -> None:
    """In a local sweep's worker (in_sweep_worker) whose job was interrupted: if the sweep itself is
    stopping, park the process (SIGSTOP) until the sweep ends it. It must not take the next job, and it
    must not exit either, or the pool would kill its sibling workers mid-checkpoint. A job stopped on
    its own returns."""
    deadline = time.monotonic() + STOP_NOTICE_WAIT_S
    while not _stop_notice(os.environ[SWEEP_PID_ENV]).exists():
        if time.monotonic() > deadline:
            return
        time.sleep(0.02)
    for handler in logging.getLogger().handlers:  # the job's log file is complete
        handler.flush()
    os.kill(os.getpid(), signal.SIGSTOP)
