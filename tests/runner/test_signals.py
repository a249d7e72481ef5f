"""Stops from outside: a sweep's SIGTERM reaches its workers, a second Ctrl-C and a full disk are one
line each. (A signal inside a run or its evaluation: test_resume.py, test_record.py and test_train_cli.py.)"""
from __future__ import annotations

import contextlib
import errno
import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest
from hydra.core.global_hydra import GlobalHydra

from rmsnorm_repro import train
from rmsnorm_repro.runner import checkpoint
from runner_fixtures.helpers import REPO, SEARCHPATH, cli_args, cli_env


def _as_from_a_terminal() -> None:
    # Ctrl-C's default action, as a command typed at a terminal has it: a job started in the background
    # (`make test &`, CI under `nohup`) inherits SIGINT ignored, and Python then never raises
    # KeyboardInterrupt, so the second Ctrl-C under test would be ignored
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _wait(predicate, timeout: float, proc) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"ended early: {proc.stderr.read()}")
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("timed out")


def _joblib_sweep(tmp_path):
    """A 2-worker joblib sweep of four slow runs, in its own process group (as a terminal starts it),
    once both workers are training."""
    args = cli_args("-m", "launcher=joblib", "hydra.launcher.n_jobs=2", "task=tiny", "seed=1,2,3,4",
                    "task.sleep_ms=100", "train.steps=2000", f"paths.runs_dir={tmp_path}")
    proc = subprocess.Popen(args, env=cli_env(), cwd=REPO, stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=_as_from_a_terminal)
    _wait(lambda: len(list(tmp_path.rglob("metrics.jsonl"))) >= 2 and
          all(p.stat().st_size > 0 for p in tmp_path.rglob("metrics.jsonl")), 120, proc)
    return proc, psutil.Process(proc.pid).children(recursive=True)


# SIGTERM to the sweep alone (kill <pid>), to its whole process group (timeout, a job scheduler), and
# Ctrl-C, which a terminal sends to the whole group: every running job checkpoints and leaves an
# interrupted summary, within seconds, and no further job starts
@pytest.mark.slow
@pytest.mark.parametrize(("signum", "group"), [(signal.SIGTERM, False), (signal.SIGTERM, True), (signal.SIGINT, True)])
def test_a_stopped_joblib_sweep_checkpoints_every_running_job_within_seconds(tmp_path, signum, group):
    proc, workers = _joblib_sweep(tmp_path)
    assert workers
    t0 = time.monotonic()
    os.killpg(proc.pid, signum) if group else proc.send_signal(signum)
    assert proc.wait(timeout=90) == 128 + signum
    assert time.monotonic() - t0 < 20  # not the 60 s grace: the workers end with their jobs
    _, alive = psutil.wait_procs(workers, timeout=5)
    assert not alive, [p.cmdline() for p in alive]
    assert "2 running job(s) checkpointed their runs" in proc.stdout.read()
    summaries = [json.loads(p.read_text()) for p in tmp_path.rglob("summary.json")]
    assert len(summaries) == 2 and all(s["status"] == "interrupted" for s in summaries)
    assert len(list(tmp_path.rglob("metrics.jsonl"))) == 2  # seeds 3 and 4 never started
    for run_dir in (p.parent for p in tmp_path.rglob("summary.json")):
        saved = checkpoint.load(run_dir / "checkpoints" / "last.pt")["step"]
        assert saved == json.loads((run_dir / "summary.json").read_text())["steps"]


# Ctrl-C pressed again and again (or `timeout`, which signals its group again): a signal per press to the
# sweep and each worker, at any spacing; each running job must still end with its summary and checkpoint
@pytest.mark.slow
@pytest.mark.parametrize("gap_s", [0.0, 0.02, 0.3])
def test_repeated_sigints_on_a_joblib_sweep_lose_no_running_job(tmp_path, gap_s):
    proc, workers = _joblib_sweep(tmp_path)
    for _ in range(3):
        for p in [psutil.Process(proc.pid), *workers]:
            with contextlib.suppress(psutil.Error):
                p.send_signal(signal.SIGINT)
        time.sleep(gap_s)
    assert proc.wait(timeout=90) == 128 + signal.SIGINT
    out = proc.stdout.read()
    run_dirs = [p.parent for p in tmp_path.rglob("metrics.jsonl")]
    assert len(run_dirs) == 2
    for run_dir in run_dirs:
        summary = json.loads((run_dir / "summary.json").read_text())
        assert summary["status"] == "interrupted"
        assert checkpoint.load(run_dir / "checkpoints" / "last.pt")["step"] == summary["steps"]
    assert "2 running job(s) checkpointed their runs" in out, out


@pytest.mark.slow
def test_a_second_ctrl_c_is_one_line(tmp_path):
    args = cli_args("task=tiny", "task.sleep_ms=500", "train.steps=1000", "train.log_every=1", f"paths.runs_dir={tmp_path}")
    proc = subprocess.Popen(args, env=cli_env(), cwd=REPO, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_as_from_a_terminal)
    _wait(lambda: any(p.stat().st_size > 0 for p in tmp_path.rglob("metrics.jsonl")), 120, proc)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=60) == 128 + signal.SIGINT
    err = proc.stderr.read()
    assert "Traceback" not in err and err.strip().splitlines()[-1].startswith("error: interrupted again")


def test_a_full_disk_is_one_line(tmp_path, monkeypatch, capsys):
    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "metrics.jsonl"))

    monkeypatch.setattr(train, "run", full)
    monkeypatch.setattr(sys, "argv", ["rmsnorm-train", SEARCHPATH, "task=tiny", f"paths.runs_dir={tmp_path}"])
    GlobalHydra.instance().clear()
    with pytest.raises(SystemExit) as e:
        train.main()
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: no space left") and "metrics.jsonl" in err[0]


@pytest.mark.slow
def test_a_job_stopped_on_its_own_ends_and_the_sweep_goes_on(tmp_path):
    # SIGTERM to one worker alone (not the sweep): its run checkpoints as interrupted, the sweep runs the
    # other jobs to their end and reports the stopped one
    args = cli_args("-m", "launcher=joblib", "hydra.launcher.n_jobs=2", "task=tiny", "seed=1,2,3",
                    "task.sleep_ms=20", "train.steps=150", f"paths.runs_dir={tmp_path}")
    proc = subprocess.Popen(args, env=cli_env(), cwd=REPO, stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=_as_from_a_terminal)
    _wait(lambda: any(p.stat().st_size > 0 for p in tmp_path.rglob("metrics.jsonl")), 120, proc)
    # the worker of a run that is training (its stop handler installed), not of one still building its model
    lock = next(p.parent for p in tmp_path.rglob("metrics.jsonl") if p.stat().st_size > 0) / ".lock"
    holder = next(w for w in psutil.Process(proc.pid).children(recursive=True)
                  if any(f.path == str(lock) for f in w.open_files()))
    holder.send_signal(signal.SIGTERM)
    code = proc.wait(timeout=120)
    assert code == 128 + signal.SIGTERM, proc.stderr.read()[-3000:]  # the stopped job decides the exit code
    statuses = sorted(json.loads(p.read_text())["status"] for p in tmp_path.rglob("summary.json"))
    assert statuses == ["completed", "completed", "interrupted"]


def test_hydra_s_own_log_file_in_a_read_only_run_folder_is_one_line(tmp_path, monkeypatch, capsys):
    import logging

    def read_only(self):
        raise OSError(errno.EROFS, "Read-only file system", self.baseFilename)

    monkeypatch.setattr(logging.FileHandler, "_open", read_only)  # Hydra opens train.log before the run starts
    monkeypatch.setattr(sys, "argv", ["rmsnorm-train", SEARCHPATH, "task=tiny", f"hydra.run.dir={tmp_path / 'run'}"])
    GlobalHydra.instance().clear()
    with pytest.raises(SystemExit) as e:
        train.main()
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: cannot write") and "train.log" in err[0], err


# Issue 54: every local launcher, idle workers, signals 20 ms apart ---------------------------------------
def _stopped_sweep(tmp_path, launcher: tuple[str, ...], steps: str, presses: int, gap_s: float = 0.02):
    """A sweep of the tiny task started as a terminal starts it, Ctrl-C'd `presses` times (SIGINT to its
    whole process group, as a terminal sends it) once every job that trains long has trained; the
    sweep's (exit code, stdout, stderr) and its run folders (the long job's first)."""
    args = cli_args("-m", *launcher, "task=tiny", f"train.steps={steps}", "task.sleep_ms=20", "train.eval_every=1000",
                    f"hydra.sweep.dir={tmp_path / 'sweep'}", f"paths.runs_dir={tmp_path}")
    proc = subprocess.Popen(args, env=cli_env(), cwd=REPO, stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=_as_from_a_terminal)
    long_jobs = [s for s in steps.split(",") if int(s) > 100]
    short_jobs = len(steps.split(",")) - len(long_jobs)

    def ready() -> bool:  # the short jobs have ended, the long ones train
        done = [p for p in tmp_path.rglob("summary.json")]
        training = [p for p in tmp_path.rglob("metrics.jsonl") if p.stat().st_size > 0
                    and not (p.parent / "summary.json").exists()]
        return len(done) == short_jobs and len(training) == len(long_jobs)

    _wait(ready, 120, proc)
    for press in range(presses):
        if press:
            time.sleep(gap_s)
        os.killpg(proc.pid, signal.SIGINT)
    try:
        out, err = proc.communicate(timeout=90)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    runs = sorted((p.parent for p in tmp_path.rglob("summary.json")),
                  key=lambda d: json.loads((d / "summary.json").read_text())["status"] != "interrupted")
    return proc.returncode, out, err, runs


def _checkpointed(run_dir) -> bool:
    summary = json.loads((run_dir / "summary.json").read_text())
    return (summary["status"] == "interrupted"
            and checkpoint.load(run_dir / "checkpoints" / "last.pt")["step"] == summary["steps"] > 0)


@pytest.mark.parametrize("presses", [1, 2])
def test_ctrl_c_on_a_joblib_sweep_with_an_idle_worker_checkpoints_the_running_job(tmp_path, presses):
    # audit f15a5c5: the idle worker died of the signal, loky took the pool for broken and killed the busy
    # worker before it checkpointed: exit 130, no last.pt, "0 running job(s) checkpointed"
    code, out, err, runs = _stopped_sweep(tmp_path, ("launcher=joblib", "hydra.launcher.n_jobs=2"), "4,3000", presses)
    assert code == 128 + signal.SIGINT, err[-3000:]
    assert len(runs) == 2 and _checkpointed(runs[0]), err[-3000:]
    assert "1 running job(s) checkpointed their runs" in out, out
    assert "Traceback" not in err and "SLURM" not in out + err


@pytest.mark.parametrize("launcher", [("launcher=basic",), ("launcher=joblib", "hydra.launcher.n_jobs=1")],
                         ids=["basic", "joblib_n_jobs_1"])
def test_two_ctrl_cs_20_ms_apart_on_an_in_process_sweep_checkpoint_its_job(tmp_path, launcher):
    # audit f15a5c5: the first Ctrl-C's handler gave the second back to the sweep's, which exited at once
    # (os._exit) and said the jobs were SLURM's
    code, out, err, runs = _stopped_sweep(tmp_path, launcher, "3000", presses=2)
    assert code == 128 + signal.SIGINT, err[-3000:]
    assert len(runs) == 1 and _checkpointed(runs[0]), err[-3000:]
    assert "1 running job(s) checkpointed their runs" in out + err, out + err[-2000:]
    assert "Traceback" not in err and "SLURM" not in out + err


def test_ctrl_c_on_a_local_parallel_sweep_checkpoints_its_jobs_in_one_line(tmp_path):
    # audit f15a5c5: saved, but submitit's 10-line traceback and "0 running job(s) checkpointed"
    code, out, err, runs = _stopped_sweep(tmp_path, ("launcher=local_parallel",), "4,3000", presses=2)
    assert code == 128 + signal.SIGINT, err[-3000:]
    assert len(runs) == 2 and _checkpointed(runs[0]), err[-3000:]
    assert "1 running job(s) checkpointed their runs" in out, out
    assert "Traceback" not in err and "SLURM" not in out + err
