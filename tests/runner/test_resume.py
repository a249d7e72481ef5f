"""Runs whose numbers would be silently wrong, lost, or late to stop: each case failed before its fix.

The tiny task of tests/runner_fixtures (an MLP on Gaussian blobs) stands in for every paper task.
"""
from __future__ import annotations

import math
import multiprocessing as mp
import os
import signal
import threading
import time

import pytest

from rmsnorm_repro.runner import ConfigError, run
from rmsnorm_repro.runner import checkpoint
from runner_fixtures import tiny_task
from runner_fixtures.helpers import read_metrics, read_summary

DECAY = ["optim.schedule.name=linear_decay", "optim.schedule.decay_start=0.5", "optim.schedule.beta1_after_decay=0.5"]


def _lrs(run_dir):
    return [(r["step"], r["lr"], r["loss"]) for r in read_metrics(run_dir)]


def test_resume_to_more_steps_that_would_splice_the_schedule_is_refused(tmp_path, tiny_cfg):
    # linear_decay depends on train.steps: 40 steps decayed from step 20 to 0 at 40; a 60-step run
    # decays from 30. Continuing the 40-step run to 60 would not be a 60-step run.
    run(tiny_cfg("train.steps=40", *DECAY), tmp_path / "r")
    with pytest.raises(ConfigError, match=r"train.steps.*40.*60.*schedule.*start over"):
        run(tiny_cfg("train.steps=60", *DECAY), tmp_path / "r")
    assert read_summary(tmp_path / "r")["steps"] == 40  # left alone


@pytest.mark.slow
def test_resume_to_more_steps_before_the_schedule_depends_on_them_equals_a_fresh_run(tmp_path, tiny_cfg):
    # a 40-step run stopped (SIGTERM) before step 20, where its decay starts, continued to 60 steps:
    # every step it trained had the lr and beta1 of a 60-step run, so it equals a fresh one
    slow = ("task.sleep_ms=30", "train.log_every=1", *DECAY)
    threading.Timer(0.6, os.kill, (os.getpid(), signal.SIGTERM)).start()
    stopped = run(tiny_cfg("train.steps=40", *slow), tmp_path / "r")
    assert stopped["status"] == "interrupted" and stopped["steps"] < 20
    resumed = run(tiny_cfg("train.steps=60", *slow), tmp_path / "r")
    fresh = run(tiny_cfg("train.steps=60", *slow), tmp_path / "fresh")
    assert resumed["final"] == fresh["final"]
    assert _lrs(tmp_path / "r") == _lrs(tmp_path / "fresh")


def test_a_budget_stopped_run_is_finished_and_a_rerun_changes_nothing(tmp_path, tiny_cfg):
    args = ("train.max_minutes=0.003", "task.sleep_ms=20", "train.steps=1000")
    first = run(tiny_cfg(*args), tmp_path / "r")
    assert first["status"] == "completed" and first["steps"] < 1000 and first["stopped_by"] == "train.max_minutes"
    files = {p: p.read_bytes() for p in (tmp_path / "r").rglob("*") if p.is_file()}
    again = run(tiny_cfg(*args), tmp_path / "r")
    assert again == first
    assert {p: p.read_bytes() for p in (tmp_path / "r").rglob("*") if p.is_file()} == files


@pytest.mark.parametrize("status_args", [(), ("norm=none", "optim.lr=1e30")], ids=["completed", "diverged"])
def test_a_finished_run_kept_without_its_checkpoints_is_not_trained_again(tmp_path, tiny_cfg, status_args):
    # results/small/runs commits run records (config, summary, metrics) without weights: rerunning the
    # command that made one must keep it, not train a fresh model over it
    first = run(tiny_cfg(*status_args), tmp_path / "r")
    for ckpt in (tmp_path / "r").glob("checkpoints/*"):
        ckpt.unlink()
    files = {p: p.read_bytes() for p in (tmp_path / "r").rglob("*") if p.is_file()}
    assert run(tiny_cfg(*status_args), tmp_path / "r") == first
    assert {p: p.read_bytes() for p in (tmp_path / "r").rglob("*") if p.is_file()} == files
    # what would need its weights is one line, and the record stays
    with pytest.raises(ConfigError, match=r"finished.*step \d+ but its checkpoints are gone.*train.steps: 40 -> 60.*"
                                          r"hydra.run.dir=<new folder>.*kept$"):
        run(tiny_cfg(*status_args, "train.steps=60"), tmp_path / "r")
    with pytest.raises(ConfigError, match=r"checkpoints are gone.*train.select_metric"):
        run(tiny_cfg(*status_args, "train.select_metric=loss"), tmp_path / "r")
    assert {p: p.read_bytes() for p in (tmp_path / "r").rglob("*") if p.is_file()} == files


def _hold(run_dir, started, release):
    from runner_fixtures.helpers import tiny as tiny_cfg

    cfg = tiny_cfg(run_dir.parent, "task.sleep_ms=50", "train.steps=1000", "train.max_minutes=0.05")
    started.set()
    run(cfg, run_dir)


@pytest.mark.slow
def test_a_second_process_on_the_same_run_directory_is_refused(tmp_path, tiny_cfg):
    ctx = mp.get_context("spawn")
    started = ctx.Event()
    other = ctx.Process(target=_hold, args=(tmp_path / "r", started, None))
    other.start()
    try:
        started.wait(60)
        deadline = time.monotonic() + 60
        while not (tmp_path / "r" / "metrics.jsonl").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        with pytest.raises(ConfigError, match=r"another process .*pid \d+"):
            run(tiny_cfg("task.sleep_ms=50", "train.steps=1000", "train.max_minutes=0.05"), tmp_path / "r")
    finally:
        other.join(120)
    assert read_summary(tmp_path / "r")["status"] == "completed"  # the first run's files, whole


@pytest.mark.parametrize("override", ["optim.lr=inf", "optim.lr=nan", "optim.clip=inf", "optim.eps=inf",
                                      "train.max_minutes=inf", "norm.eps=inf", "norm.eps=nan"])
def test_non_finite_settings_are_refused_at_start(tmp_path, override, tiny_cfg):
    with pytest.raises(ConfigError, match=override.split("=")[0].replace(".", r"\.")):
        run(tiny_cfg(override), tmp_path / "r")
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("split", ["valid", "test"])
def test_a_signal_during_evaluation_stops_within_seconds(tmp_path, split, monkeypatch, tiny_cfg):
    # the evaluation sends the run SIGTERM as it begins, then would take 20 s
    monkeypatch.setattr(tiny_task, "SIGTERM_IN_EVAL", split)
    t0 = time.monotonic()
    summary = run(tiny_cfg("train.steps=40", "train.eval_every=20"), tmp_path / "r")
    assert time.monotonic() - t0 < 10
    assert summary["status"] == "interrupted" and summary["interrupted_by"] == "SIGTERM"
    saved = checkpoint.load(tmp_path / "r" / "checkpoints" / "last.pt")["step"]
    assert saved == summary["steps"] == (20 if split == "valid" else 40)
    # the rerun finishes it: evaluation is redone, never a step trained twice
    done = run(tiny_cfg("train.steps=40", "train.eval_every=20"), tmp_path / "r")
    assert done["status"] == "completed" and "error" in done["final"]
    assert [r["step"] for r in read_metrics(tmp_path / "r")] == [5, 10, 15, 20, 25, 30, 35, 40]


def test_a_damaged_checkpoint_is_one_line_naming_the_file(tmp_path, tiny_cfg):
    run(tiny_cfg("train.steps=20"), tmp_path / "r")
    ckpt = tmp_path / "r" / "checkpoints" / "last.pt"
    ckpt.write_bytes(ckpt.read_bytes()[:2000])
    with pytest.raises(ConfigError) as e:
        run(tiny_cfg("train.steps=40"), tmp_path / "r")
    message = str(e.value)
    assert str(ckpt) in message and "start over" in message and "\n" not in message
    assert "weights_only" not in message


def test_step_time_is_the_median_with_a_spread(tmp_path, tiny_cfg):
    summary = run(tiny_cfg("train.steps=40"), tmp_path / "r")
    assert summary["s_per_1k_steps"] == summary["step_ms_median"]
    q1, q3 = summary["step_ms_q1"], summary["step_ms_q3"]
    lo, hi = summary["s_per_1k_steps_ci95"]
    assert q1 <= summary["step_ms_median"] <= q3 and lo <= summary["step_ms_median"] <= hi


def test_one_slow_step_does_not_move_the_step_time():
    from rmsnorm_repro.runner.loop import step_time_stats

    steady = step_time_stats([10.0] * 50 + [11.0] * 49)
    spiked = step_time_stats([10.0] * 50 + [11.0] * 48 + [30_000.0])  # a kernel build inside one step
    assert spiked["s_per_1k_steps"] == steady["s_per_1k_steps"]
    assert math.isclose(spiked["step_ms_median"], steady["step_ms_median"])


def test_the_norm_kernel_is_ready_before_the_clock_starts(tiny_cfg, tmp_path, monkeypatch):
    """A 30-77 s first-use kernel build once landed inside step 1, and so inside the time budget."""
    from rmsnorm_repro.norms.rmsnorm import RMSNormalization
    from rmsnorm_repro.runner import loop

    events = []
    monkeypatch.setattr(RMSNormalization, "prepare", lambda self, device="cpu": events.append("prepare") or "reference")
    train = loop.train
    monkeypatch.setattr(loop, "train", lambda *a, **k: events.append("clock starts") or train(*a, **k))
    run(tiny_cfg("norm=rmsnorm", "train.steps=2"), tmp_path / "r")
    assert events == ["prepare", "clock starts"]
