"""Stop requests: SIGINT/SIGTERM end a run at a checkpoint, and a sweep's workers with it.

A run (stop_requests) checkpoints after the current step, or cuts its evaluation short between
batches, and exits 128 + signal. A sweep whose jobs run in worker processes (launcher=joblib,
local_parallel) passes the signal on to them (forward_to_workers), waits for their checkpoints, and
exits: no worker keeps training as an orphan, and no further job starts.

In a SLURM job started by submitit, SIGUSR2 is SLURM's warning that the job's time limit is near
(`--signal=USR2@signal_delay_s`), and submitit's handler for it requeues the job: a run checkpoints
after the current step, like on SIGTERM, and then passes the signal on to that handler.
"""
from __future__ import annotations

import contextlib
import os
import signal
from typing import Any, Iterator

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
REQUEUE_SIGNAL = signal.SIGUSR2  # submitit's default (its SUBMITIT_PREEMPT_SIGNAL)
WORKER_GRACE_S = 60  # SLURM gives ~30-90 s between SIGTERM and SIGKILL


@contextlib.contextmanager
def stop_requests() -> Iterator[dict[str, Any]]:
    """SIGINT/SIGTERM ask the loop to checkpoint and stop after the current step; a second one kills.
    So does SIGUSR2 where a handler (submitit's) is installed for it, which then gets the signal."""
    flag: dict[str, Any] = {"signal": None}
    previous = {}

    def handler(signum, frame):
        flag["signal"] = signal.Signals(signum).name
        signal.signal(signum, previous[signum])

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
    """In a sweep's main process: on SIGINT/SIGTERM, send the signal to every descendant process (the
    launcher's workers), give them WORKER_GRACE_S to checkpoint, kill what is left, and exit."""
    import psutil

    def handler(signum, frame):
        workers = psutil.Process().children(recursive=True)
        for proc in workers:
            with contextlib.suppress(psutil.Error):
                proc.send_signal(signum)
        _, alive = psutil.wait_procs(workers, timeout=WORKER_GRACE_S)
        for proc in alive:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        print(f"{signal.Signals(signum).name}: the sweep stopped; {len(workers)} worker process(es) stopped "
              "(finished runs kept, started ones checkpointed: rerun the same command to resume)", flush=True)
        os._exit(128 + signum)  # past the launcher's pool, which would start the next jobs

    for sig in STOP_SIGNALS:
        signal.signal(sig, handler)
