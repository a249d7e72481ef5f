"""`python -m rmsnorm_repro.train` as a user runs it: exit codes, one-line errors, SIGKILL/SIGTERM and
resume, multiruns (basic and joblib launchers), wandb offline without leaking secrets, convpool.

Each test is one to three subprocesses of the tiny task (tests/runner_fixtures); the in-process
behaviour is in test_runner.py.
"""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hydra.core.global_hydra import GlobalHydra

from rmsnorm_repro.runner import checkpoint, run
from rmsnorm_repro.train import main
from runner_fixtures.helpers import REPO, cli, cli_args, cli_env, read_metrics, read_summary, tiny


def _stderr_lines(proc) -> list[str]:
    return [line for line in proc.stderr.splitlines() if line.strip()]


def test_a_hydra_composition_error_is_one_line_on_stderr_and_exit_2(tmp_path):
    proc = cli("task=tiny", "norm=nosuch", f"paths.runs_dir={tmp_path}")
    assert proc.returncode == 2, proc.stderr
    assert _stderr_lines(proc) == ["error: Could not find 'norm/nosuch'; Available options in 'norm': batchnorm, "
                                   "l2norm, layernorm, none, prmsnorm, rmsnorm, weightnorm"], proc.stderr
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("overrides, message", [
    (["task=tiny", "norm=prmsnorm", "norm.p=1.5"], "error: norm.p must be a finite number in (0, 1], got 1.5"),
    (["task=tiny", "task.class_path=runner_fixtures.tiny_task:TinyStrictTask", "data=tinyreal", "paths.data_dir=/nonexistent"],
     "error: data.root=/nonexistent/tinyreal does not exist: put the tinyreal files there or point data.root at them"),
    (["task=tiny", "data=nosuch"], "error: Could not find 'data/nosuch'; Available options in 'data': "),
    (["task=tiny", "task.dropout=nan"], "error: task.dropout must be a finite number in [0, 1], got nan"),
    (["task=tiny", f"seed={2**32}"], f"error: seed must be an integer in [0, {2**32 - 1}], got {2**32}"),
])
def test_bad_input_through_main_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys, overrides, message):
    """The same entry point in-process (a subprocess each would cost seconds): Hydra's logging off."""
    for var in ("HYDRA_FULL_ERROR", "RMSNORM_FULL_ERROR"):  # main() sets them; restored after the test
        monkeypatch.setenv(var, "0")
    monkeypatch.setattr(sys, "argv", ["rmsnorm-train", *cli_args(*overrides, f"paths.runs_dir={tmp_path}",
                                      "hydra/job_logging=none", "hydra/hydra_logging=none")[3:]])
    GlobalHydra.instance().clear()
    with pytest.raises(SystemExit) as info:
        main()
    GlobalHydra.instance().clear()
    assert info.value.code == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith(message), err
    assert not list(tmp_path.rglob("summary.json")) and not list(tmp_path.rglob("metrics.jsonl"))


def _wait_for_step(run_dir: Path, step: int, proc: subprocess.Popen, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"run ended early: {proc.stderr.read()}")
        try:
            if any(r["step"] >= step for r in read_metrics(run_dir)):
                return
        except (FileNotFoundError, json.JSONDecodeError):
            pass
        time.sleep(0.01)
    raise AssertionError(f"step {step} not reached in {timeout} s")


@pytest.mark.slow
def test_sigkill_sigterm_and_resume_end_like_an_uninterrupted_run(tmp_path):
    overrides = ["task=tiny", "train.steps=100", "train.log_every=1", "train.checkpoint_every=10", "train.eval_every=20"]
    reference = run(tiny(tmp_path / "ref", *overrides), tmp_path / "ref" / "run")

    args = cli_args(*overrides, "task.sleep_ms=20", f"paths.runs_dir={tmp_path}")
    # named after its overrides (train.steps aside: the step budget may change on resume)
    run_dir = (tmp_path / "tiny" / "synthetic-mini" /
               "rmsnorm-p1.0-s1,task.sleep_ms=20,train.checkpoint_every=10,train.eval_every=20,train.log_every=1")
    ckpt = run_dir / "checkpoints" / "last.pt"

    # 1. SIGKILL after the first checkpoint, with logged steps past it
    proc = subprocess.Popen(args, env=cli_env(), cwd=REPO, stderr=subprocess.PIPE, text=True)
    _wait_for_step(run_dir, 15, proc)
    proc.kill()
    proc.wait()
    killed_at = max(r["step"] for r in read_metrics(run_dir))
    saved = checkpoint.load(ckpt)["step"]
    assert saved % 10 == 0 and saved < killed_at and not (run_dir / "summary.json").exists()

    # 2. the same command resumes; SIGTERM checkpoints, writes status interrupted and exits 128 + 15
    proc = subprocess.Popen(args, env=cli_env(), cwd=REPO, stderr=subprocess.PIPE, text=True)
    _wait_for_step(run_dir, saved + 15, proc)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 128 + signal.SIGTERM
    interrupted = read_summary(run_dir)
    assert interrupted["status"] == "interrupted" and interrupted["interrupted_by"] == "SIGTERM"
    assert checkpoint.load(ckpt)["step"] == interrupted["steps"] > saved + 10
    assert [r["step"] for r in read_metrics(run_dir)] == list(range(1, interrupted["steps"] + 1))

    # 3. and again, to the end (in-process: the same run() the CLI job calls, one python start less):
    # one metrics line per step, the same numbers as a run that was never interrupted
    resumed = run(tiny(tmp_path, *overrides, "task.sleep_ms=20"), run_dir)
    assert resumed["status"] == "completed" and resumed["steps"] == 100
    assert read_summary(run_dir)["status"] == "completed"
    lines = read_metrics(run_dir)
    assert [r["step"] for r in lines] == list(range(1, 101))
    assert [r["loss"] for r in lines] == [r["loss"] for r in read_metrics(tmp_path / "ref" / "run")]
    assert resumed["final"] == reference["final"] and resumed["best"] == reference["best"]


@pytest.mark.slow
def test_multirun_goes_on_after_a_diverged_run(tmp_path):
    proc = cli("-m", "task=tiny", "optim.lr=1e30,0.01", "norm=none", "train.steps=10", f"paths.runs_dir={tmp_path}")
    assert proc.returncode == 0, proc.stderr
    sweep = tmp_path / "multirun" / "tiny" / "synthetic-mini"
    statuses = {d.name: read_summary(d)["status"] for d in sweep.iterdir() if d.is_dir()}
    assert statuses == {"norm=none,optim.lr=1e+30": "diverged", "norm=none,optim.lr=0.01": "completed"}


@pytest.mark.slow
def test_joblib_launcher_runs_jobs_in_parallel_processes(tmp_path):
    proc = cli("-m", "launcher=joblib", "task=tiny", "seed=1,2", "train.steps=5", f"paths.runs_dir={tmp_path}")
    assert proc.returncode == 0, proc.stderr
    summaries = [json.loads(p.read_text()) for p in sorted(tmp_path.rglob("summary.json"))]
    assert [(s["seed"], s["status"]) for s in summaries] == [(1, "completed"), (2, "completed")]
    assert "Joblib.Parallel(n_jobs=2" in proc.stdout


@pytest.mark.slow
def test_wandb_offline_run_keeps_secrets_out_of_every_file(tmp_path, monkeypatch):
    """Through main() in-process (wandb starts its own service process either way)."""
    wandb = pytest.importorskip("wandb")
    key, literal = "fake-wandb-key-0123456789", "literal-secret-value"
    for var, value in {"WANDB_API_KEY": key, "WANDB_CONFIG_DIR": tmp_path / "wcfg", "WANDB_CACHE_DIR": tmp_path / "wcache",
                       "WANDB_DATA_DIR": tmp_path / "wdata", "WANDB_SILENT": "true", "HYDRA_FULL_ERROR": "0",
                       "RMSNORM_FULL_ERROR": "0"}.items():
        monkeypatch.setenv(var, str(value))
    monkeypatch.delenv("WANDB_MODE")  # logger.mode null and no WANDB_MODE: offline by default
    monkeypatch.setattr(sys, "argv", ["rmsnorm-train", *cli_args(
        "task=tiny", "logger=wandb", "train.steps=5", f"paths.runs_dir={tmp_path}", f"+extra.token={literal}",
        "+logger.api_key=${oc.env:WANDB_API_KEY}", "hydra/job_logging=none", "hydra/hydra_logging=none")[3:]])
    GlobalHydra.instance().clear()
    try:
        main()
    finally:
        GlobalHydra.instance().clear()
        wandb.teardown()
    run_dir = tmp_path / "tiny" / "synthetic-mini" / "rmsnorm-p1.0-s1"  # secret overrides never name a directory
    assert read_summary(run_dir)["status"] == "completed"
    assert list((run_dir / "wandb").glob("offline-run-*/run-*.wandb"))
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert any(p.name == "overrides.yaml" for p in files)  # Hydra's copies were written, and scrubbed
    assert [p for p in files if key.encode() in p.read_bytes() or literal.encode() in p.read_bytes()] == []


@pytest.mark.slow
@pytest.mark.skipif(not (REPO / "rmsnorm_repro" / "tasks" / "convpool" / "task.py").exists(), reason="convpool task not here yet")
def test_convpool_runs_through_the_cli(tmp_path):
    proc = cli("task=convpool", "norm=prmsnorm", "train.steps=4", "train.eval_every=2", "train.batch_size=8",
               "task.synthetic.train_size=64", "task.synthetic.test_size=32", "task.train_error_size=32",
               "task.eval_batch_size=32", f"paths.runs_dir={tmp_path}")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(next(tmp_path.rglob("summary.json")).read_text())
    assert (summary["task"], summary["norm"], summary["p"], summary["status"]) == ("convpool", "prmsnorm", 0.125, "completed")
    assert 0 <= summary["final"]["error"] <= 100 and summary["step_ms_median"] > 0  # error in percent


def test_a_resume_over_a_metrics_line_that_is_not_utf8_is_one_line(tmp_path, monkeypatch, capsys):
    """Audit f15a5c5: record.RecordError from metrics.jsonl (runner/files.py) reached Hydra as a traceback."""
    from runner_fixtures.helpers import SEARCHPATH, main_in_process

    run_dir = tmp_path / "run"
    base = [SEARCHPATH, "task=tiny", "train.eval_every=2", f"hydra.run.dir={run_dir}"]
    assert main_in_process(monkeypatch, capsys, *base, "train.steps=2")[0] in (0, None)
    with open(run_dir / "metrics.jsonl", "ab") as metrics:
        metrics.write(b'{"step": 2, "loss": \xff}\n')
    code, err = main_in_process(monkeypatch, capsys, *base, "train.steps=4")
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith("error: ") and "metrics.jsonl: line" in err[0] and "not valid UTF-8" in err[0]
