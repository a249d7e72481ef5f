"""Stop requests: SIGINT/SIGTERM end a run at a checkpoint, and a sweep's workers with it.

A run (stop_requests) checkpoints after the current step, or cuts its evaluation short between
batches, and exits 128 + signal. A sweep whose jobs run in worker processes (launcher=joblib,
local_parallel) asks each of them to stop (forward_to_workers), waits for the checkpoints of the jobs
that were running (each marks itself while it runs: sweep_job), and exits: no worker keeps training as
an orphan, and no further job starts. A worker whose job was interrupted while the sweep stops parks
itself (park_if_sweep_stops), so the sweep's wait ends as soon as they have checkpointed; a job stopped
on its own (a signal to that worker alone) ends as a single run does and the sweep goes on.

Ctrl-C reaches every process of the sweep (the terminal signals the whole process group), and the sweep
passes it on: a worker without a job, and submitit's local controller, ignore both (an idle loky worker
killed by it made loky kill its busy siblings before they checkpointed; the controller printed a
traceback), and a running job, in a worker or in the sweep's own process (launcher=basic, joblib with
n_jobs=1), ignores every signal after the first: any number of presses, at any spacing, leave each
running job checkpointed (a single run: a second Ctrl-C kills). The sweep's last line counts the jobs
that checkpointed.

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
    """The file a stopping sweep creates, so that its workers know the stop is the sweep's (it holds the
    signal's name)."""
    return Path(tempfile.gettempdir()) / f"rmsnorm-sweep-{sweep_pid}.stopping"


def _job_mark(sweep_pid: int | str, pid: int) -> Path:
    """The file a sweep's worker keeps while it runs a job (sweep_job)."""
    return Path(tempfile.gettempdir()) / f"rmsnorm-sweep-{sweep_pid}.job-{pid}"


def in_sweep_process() -> bool:
    """Whether this process is a local sweep's main process, which runs jobs itself with launcher=basic
    or joblib's n_jobs=1."""
    return os.environ.get(SWEEP_PID_ENV) == str(os.getpid())


def sweep_stopping() -> str | None:
    """In a local sweep's worker: the signal that is stopping the sweep, else None."""
    sweep = os.environ.get(SWEEP_PID_ENV)
    try:
        return (_stop_notice(sweep).read_text().strip() or "SIGTERM") if sweep is not None else None
    except OSError:
        return None


@contextlib.contextmanager
def sweep_job() -> Iterator[None]:
    """Around a job in a local sweep's worker: marks the worker as running a job (the sweep waits for
    those, and counts them), or, when the sweep is stopping already, parks it before the job starts."""
    if not in_sweep_worker():
        yield
        return
    sweep = os.environ[SWEEP_PID_ENV]
    if _stop_notice(sweep).exists():
        os.kill(os.getpid(), signal.SIGSTOP)  # the sweep ends this process: its job never starts
    mark = _job_mark(sweep, os.getpid())
    mark.touch()
    try:
        yield
    finally:
        mark.unlink(missing_ok=True)


@contextlib.contextmanager
def stop_requests() -> Iterator[dict[str, Any]]:
    """SIGINT/SIGTERM ask the loop to checkpoint and stop after the current step; a second Ctrl-C kills.
    So does SIGUSR2 where a handler (submitit's) is installed for it, which then gets the signal."""
    flag: dict[str, Any] = {"signal": None}
    previous = {}
    # in a local sweep (a worker, or the sweep's own process running its jobs) every further signal is
    # ignored: Ctrl-C reaches it from the terminal and from the sweep, once per press, and `timeout`
    # signals its group again; the sweep kills a worker that has not checkpointed within WORKER_GRACE_S
    worker = in_sweep_worker() or in_sweep_process()

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
    if worker:
        flag["signal"] = sweep_stopping()  # a stop that came before this job could take its signal
    try:
        yield flag
    finally:
        for sig, old in previous.items():
            # a sweep's stopped job writes its summary and ends: no later signal may cut that short
            stopped = worker and flag["signal"] is not None and sig in STOP_SIGNALS
            signal.signal(sig, signal.SIG_IGN if stopped else old)
    if flag["signal"] == REQUEUE_SIGNAL.name:
        signal.raise_signal(REQUEUE_SIGNAL)  # the checkpoint is saved: submitit may requeue (and exit)


def forward_to_workers(launcher: str = "local") -> None:
    """In a sweep's main process: on SIGINT/SIGTERM, ask every worker process to stop (SIGTERM), give the
    jobs running in them WORKER_GRACE_S to checkpoint, kill what is left, say what was kept, and exit.
    launcher: cli_errors.launcher_kind: "slurm" (jobs run on the cluster), "submitit_local", "joblib" or "local"."""
    import psutil

    os.environ[SWEEP_PID_ENV] = str(os.getpid())
    if launcher == "joblib":
        from joblib.externals.loky.backend import fork_exec

        _spawns_ignoring_stops(fork_exec, "fork_exec")  # loky's workers
    elif launcher == "submitit_local":
        from submitit.local import local

        _spawns_ignoring_stops(local, "start_controller")  # submitit's controller, and its job processes

    def handler(signum, frame):
        for sig in STOP_SIGNALS:  # once: a repeated Ctrl-C must not start the wait over, or cut it short
            signal.signal(sig, signal.SIG_IGN)
        sweep = os.getpid()
        notice = _stop_notice(sweep)
        notice.write_text(signal.Signals(signum).name)
        children = psutil.Process().children(recursive=True)
        # loky's resource tracker ignores SIGTERM by design and holds no run: it is simply ended
        trackers = [p for p in children if _is_resource_tracker(p)]
        workers = [p for p in children if p not in trackers]
        for proc in workers:  # a worker without a job (and submitit's controller) ignores it
            with contextlib.suppress(psutil.Error):
                proc.send_signal(signal.SIGTERM)

        def jobs() -> list:
            return [p for p in workers if _job_mark(sweep, p.pid).exists()]

        deadline = time.monotonic() + WORKER_GRACE_S
        while time.monotonic() < deadline and any(_busy(p) for p in jobs()):
            time.sleep(0.05)
        running = jobs()
        alive = [p for p in running if _busy(p)]
        parked = [p for p in running if _parked(p)]  # park_if_sweep_stops: its run's summary and checkpoint are written
        for proc in workers + trackers:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        for mark in Path(tempfile.gettempdir()).glob(f"rmsnorm-sweep-{sweep}.job-*"):
            mark.unlink(missing_ok=True)
        lost = (f"; {len(alive)} did not stop within {WORKER_GRACE_S} s and were killed: their runs resume from "
                "their last periodic checkpoint" if alive else "")
        if launcher == "slurm" and not running:
            done = "no job of it ran in a local process (jobs submitted to SLURM run on: scancel them to stop them)"
        elif running:
            done = f"{len(parked)} running job(s) checkpointed their runs (summary status interrupted){lost}"
        else:
            done = ("no job was training (a job that was starting resumes from its last checkpoint, if it has "
                    "one)")
        print(f"{signal.Signals(signum).name}: the sweep stopped; {done}. Finished runs are kept: rerun the same "
              "command to resume", flush=True)
        notice.unlink(missing_ok=True)
        os._exit(128 + signum)  # past the launcher's pool, which would start the next jobs

    for sig in STOP_SIGNALS:
        signal.signal(sig, handler)


def stopped_in_process(signal_name: str) -> None:
    """In a sweep whose jobs run in its own process (launcher=basic, joblib's n_jobs=1): its running job
    has checkpointed; say so as a sweep with workers does, before the sweep exits."""
    print(f"{signal_name}: the sweep stopped; 1 running job(s) checkpointed their runs (summary status "
          "interrupted). Finished runs are kept: rerun the same command to resume", flush=True)


def _spawns_ignoring_stops(module: Any, name: str) -> None:
    """module.name, a function that starts a sweep's local processes, starts them with SIGINT and SIGTERM
    ignored (a process inherits that across exec, and Python keeps it): a worker without a job (loky's)
    and submitit's local controller ignore the stop, which the sweep's handler sees to; a job takes both
    while it runs (stop_requests). An idle loky worker killed by Ctrl-C made loky take the pool for broken
    and kill the busy workers before they checkpointed; submitit's controller printed a traceback and
    SIGKILLed its jobs a second later. (A process started outside the main thread, e.g. a worker loky
    starts again after its idle timeout, cannot be started so: Python sets handlers in the main thread.)"""
    spawn = getattr(module, name)
    if getattr(spawn, "ignores_stops", False):
        return

    def spawn_ignoring_stops(*args, **kwargs):
        try:
            previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in STOP_SIGNALS}
        except ValueError:  # not the main thread
            return spawn(*args, **kwargs)
        try:
            return spawn(*args, **kwargs)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    spawn_ignoring_stops.ignores_stops = True
    setattr(module, name, spawn_ignoring_stops)


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

