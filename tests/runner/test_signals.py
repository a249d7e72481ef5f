"""Stops from outside: a sweep's SIGTERM reaches its workers, a second Ctrl-C and a full disk are one
line each. (A signal inside a run or its evaluation: test_runner_trust.py and test_cli.py.)"""
from __future__ import annotations

import errno
import signal
import subprocess
import sys
import time

import psutil
import pytest
from hydra.core.global_hydra import GlobalHydra

from rmsnorm_repro import train
from runner_fixtures.helpers import REPO, SEARCHPATH, cli_args, cli_env


def _wait(predicate, timeout: float, proc) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"ended early: {proc.stderr.read()}")
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("timed out")


def test_sigterm_to_a_joblib_sweep_stops_its_workers(tmp_path):
    args = cli_args("-m", "launcher=joblib", "hydra.launcher.n_jobs=2", "task=tiny", "seed=1,2,3,4",
                    "task.sleep_ms=100", "train.steps=2000", f"paths.runs_dir={tmp_path}")
    proc = subprocess.Popen(args, env=cli_env(), cwd=REPO, stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    # two workers training (each has written metrics)
    _wait(lambda: len(list(tmp_path.rglob("metrics.jsonl"))) >= 2 and
          all(p.stat().st_size > 0 for p in tmp_path.rglob("metrics.jsonl")), 120, proc)
    workers = psutil.Process(proc.pid).children(recursive=True)
    assert workers
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=90) == 128 + signal.SIGTERM
    gone, alive = psutil.wait_procs(workers, timeout=5)
    assert not alive, [p.cmdline() for p in alive]
    # the started runs checkpointed as interrupted; no third run started
    summaries = list(tmp_path.rglob("summary.json"))
    assert len(summaries) == 2 and all('"interrupted"' in p.read_text() for p in summaries)


def test_a_second_ctrl_c_is_one_line(tmp_path):
    args = cli_args("task=tiny", "task.sleep_ms=500", "train.steps=1000", "train.log_every=1", f"paths.runs_dir={tmp_path}")
    proc = subprocess.Popen(args, env=cli_env(), cwd=REPO, stderr=subprocess.PIPE, text=True)
    _wait(lambda: any(p.stat().st_size > 0 for p in tmp_path.rglob("metrics.jsonl")), 120, proc)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=60) == 128 + signal.SIGINT
    err = proc.stderr.read()
    assert "Traceback" not in err and err.strip().splitlines()[-1].startswith("error: interrupted again")


def test_a_full_disk_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HYDRA_FULL_ERROR", "0")  # an earlier main() in this process set it
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
