"""wandb as a researcher uses it: declared metrics with their best in the summary, job type and tags,
wall-clock and throughput, one wandb run per run directory across resumes, the README's sync command
matching a sweep's offline folders, and the report's tables logged beside the runs (the online checks:
tests/test_wandb_access.py).

Nothing here reaches the network: runs are offline (or a stand-in module).
"""
from __future__ import annotations

import glob
import json
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from rmsnorm_repro.report.__main__ import main as report_main
from rmsnorm_repro.report.__main__ import markdown_tables
from rmsnorm_repro.runner import run
from rmsnorm_repro.runner import wandb_logger
from rmsnorm_repro.train import main
from runner_fixtures.helpers import REPO, cli_args, read_summary, tiny
from runner_fixtures.fake_runs import write_fake_runs

README = (REPO / "README.md").read_text()


class FakeRun:
    """What the runner calls on a wandb run, recorded."""

    def __init__(self, calls: list, kwargs: dict):
        self.calls, self.summary, self.id = calls, {}, kwargs["id"]
        calls.append(("init", kwargs))

    def define_metric(self, name, **kwargs):
        self.calls.append(("define", name, kwargs))

    def log(self, record, step=None):
        self.calls.append(("log", dict(record), step))

    def finish(self, exit_code=0):
        self.calls.append(("finish", exit_code))


@pytest.fixture
def fake_wandb(monkeypatch):
    calls: list = []
    monkeypatch.setitem(sys.modules, "wandb", types.SimpleNamespace(init=lambda **kw: FakeRun(calls, kw)))
    return calls


def test_a_run_declares_its_metrics_and_keeps_one_wandb_id_across_resumes(tmp_path, fake_wandb):
    overrides = ["logger=wandb", "logger.mode=offline", "train.eval_every=5", "norm.impl=reference"]
    run(tiny(tmp_path, *overrides, "train.steps=10"), tmp_path / "r", experiment="table9")
    first = [c for c in fake_wandb if c[0] == "init"][0][1]
    assert first["job_type"] == "train" and first["resume"] == "allow" and first["group"] == "table9"
    assert {"task:tiny", "data:synthetic", "scale:mini", "norm:rmsnorm"} <= set(first["tags"])
    assert (tmp_path / "r" / "wandb_id.txt").read_text().strip() == first["id"]

    defined = {c[1]: c[2] for c in fake_wandb if c[0] == "define"}
    assert defined["step"] == {} and defined["*"] == {"step_metric": "step"}
    # every validation metric, with its best and its last value in the summary
    assert defined["valid/error"] == {"step_metric": "step", "summary": "min,last"}
    assert defined["valid/accuracy"] == {"step_metric": "step", "summary": "max,last"}
    assert defined["valid/loss"] == {"step_metric": "step", "summary": "min,last"}
    logged = [c for c in fake_wandb if c[0] == "log"]
    assert all(record["step"] == step for _, record, step in logged)  # the declared step metric, in every record

    # resumed with more steps: the same wandb run
    fake_wandb.clear()
    run(tiny(tmp_path, *overrides, "train.steps=15"), tmp_path / "r", experiment="table9")
    again = [c for c in fake_wandb if c[0] == "init"][0][1]
    assert again["id"] == first["id"] and again["resume"] == "allow"
    assert read_summary(tmp_path / "r")["steps"] == 15


def test_wall_clock_throughput_and_summary_reach_wandb(tmp_path, fake_wandb):
    cfg = tiny(tmp_path, "logger=wandb", "logger.mode=offline")
    (tmp_path / "r").mkdir()
    logger = wandb_logger.WandbLogger(cfg, {}, tmp_path / "r", None)
    logger.log_line({"step": 40, "wall_s": 12.5, "loss": 0.5, "step_ms": 3.0, "lr": 0.01, "examples_per_s": 900.0},
                    {"bleu": 3.4, "loss": 2.0})
    _, record, step = fake_wandb[-1]
    assert step == 40 and record == {"step": 40, "wall_s": 12.5, "examples_per_s": 900.0, "valid/bleu": 3.4, "valid/loss": 2.0}
    assert ("define", "valid/bleu", {"step_metric": "step", "summary": "max,last"}) in fake_wandb
    logger.summary({"status": "completed", "steps": 40, "step_ms_median": 3.0, "step_ms_mean": 3.1, "s_per_1k_steps": 3.0,
                    "s_per_1k_steps_ci95": [2.9, 3.2], "selected_step": 40, "wall_s": 14.0, "examples_per_s": 880.0,
                    "final": {"bleu": 4.0}, "best": {"bleu": 3.4, "step": 40}, "env": {"device": "cpu", "impl": "fused-cpu"}})
    summary = logger.run.summary
    assert summary["s_per_1k_steps_ci95"] == [2.9, 3.2] and summary["selected_step"] == 40 and summary["wall_s"] == 14.0
    assert summary["final/bleu"] == 4.0 and summary["best/bleu"] == 3.4 and summary["env/impl"] == "fused-cpu"


# Offline: the folders a sweep leaves, and the README's sync command ----------------------------------
def _readme_sync_globs() -> tuple[str, str]:
    single = re.search(r"^wandb sync (<run dir>/wandb/offline-run-\*)$", README, re.M)
    sweep = re.search(r"^wandb sync (results/runs/multirun/<sweep>/<data>-<scale>/\S+)", README, re.M)
    assert single and sweep, "README: the two `wandb sync` lines"
    return single[1], sweep[1]


@pytest.mark.slow
def test_readme_sync_command_matches_a_resumed_sweeps_offline_folders(tmp_path, monkeypatch):
    wandb = pytest.importorskip("wandb")
    for var, value in {"WANDB_MODE": "offline", "WANDB_CONFIG_DIR": tmp_path / "wcfg", "WANDB_CACHE_DIR": tmp_path / "wcache",
                       "WANDB_DATA_DIR": tmp_path / "wdata", "WANDB_SILENT": "true", "HYDRA_FULL_ERROR": "0",
                       "RMSNORM_FULL_ERROR": "0"}.items():
        monkeypatch.setenv(var, str(value))
    runs = tmp_path / "results" / "runs"
    try:
        for steps in (4, 8):  # a sweep of one job, then the same sweep extended: a resume
            monkeypatch.setattr(sys, "argv", ["rmsnorm-train", *cli_args(
                "-m", "task=tiny", "logger=wandb", "seed=1", f"train.steps={steps}", f"paths.runs_dir={runs}",
                "hydra/job_logging=none", "hydra/hydra_logging=none")[3:]])
            GlobalHydra.instance().clear()
            main()
    finally:
        GlobalHydra.instance().clear()
        wandb.teardown()
    job = runs / "multirun" / "tiny" / "synthetic-mini" / "seed=1"
    assert read_summary(job)["steps"] == 8
    run_id = (job / "wandb_id.txt").read_text().strip()
    single, sweep = _readme_sync_globs()
    segments = sorted(glob.glob(single.replace("<run dir>", str(job))))
    # one id, two segments (wandb adds "-1" to the second folder's name when both start in the same second)
    assert len(segments) == 2 and all(re.search(rf"-{run_id}(-\d+)?$", s) for s in segments), segments
    pattern = str(tmp_path / sweep.replace("<sweep>", "tiny").replace("<data>-<scale>", "synthetic-mini"))
    assert sorted(glob.glob(pattern)) == segments


# The report's tables ------------------------------------------------------------------------------
def test_markdown_tables_are_read_back_as_written():
    page = "# T\n\n| model | a paper | a ours |\n|---|---|---|\n| RMSNorm | 22.4 | 21.0 ± 0.3 |\n| x \\| y | 1 |\n\ntext\n"
    assert markdown_tables(page) == [(["model", "a paper", "a ours"], [["RMSNorm", "22.4", "21.0 ± 0.3"], ["x | y", "1", ""]])]


def test_report_logs_its_table_beside_the_papers_to_wandb_offline(tmp_path, monkeypatch, capsys):
    wandb = pytest.importorskip("wandb")
    for var, value in {"WANDB_CONFIG_DIR": tmp_path / "wcfg", "WANDB_CACHE_DIR": tmp_path / "wcache",
                       "WANDB_DATA_DIR": tmp_path / "wdata", "WANDB_SILENT": "true"}.items():
        monkeypatch.setenv(var, str(value))
    monkeypatch.delenv("WANDB_MODE", raising=False)  # offline by default
    runs = write_fake_runs(tmp_path / "runs")
    try:
        assert report_main([str(runs), "--table", "table2", "--wandb"]) == 0
    finally:
        wandb.teardown()
    assert "logged table2 to wandb" in capsys.readouterr().err
    (table,) = glob.glob(str(runs / "report" / "wandb" / "offline-run-*" / "files" / "media" / "table" / "table2" / "*.table.json"))
    logged = json.loads(Path(table).read_text())
    assert logged["columns"][:4] == ["model", "runs", "Test14 paper", "Test14 ours"]
    assert ["RMSNorm", "2", "22.4", "21.0 ± 0.0"] == next(r for r in logged["data"] if r[0] == "RMSNorm")[:4]
    assert glob.glob(str(runs / "report" / "wandb" / "offline-run-*" / "files" / "media" / "images" / "figures" / "fig1_*.png"))


def test_makefile_table_targets_log_the_table_when_the_runs_do():
    def report_line(*args: str) -> str:
        out = subprocess.run(["make", "-n", "table4", *args], cwd=REPO, capture_output=True, text=True, check=True).stdout
        return " ".join(out.split("\\\n")).split("rmsnorm_repro.report ", 1)[1].splitlines()[0]

    assert "--wandb" in report_line("ARGS=logger=wandb train.steps=5")
    assert "--wandb" not in report_line()
    assert "--out results/tables --figures results/figures" in report_line()
