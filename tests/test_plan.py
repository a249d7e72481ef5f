"""`python -m rmsnorm_repro.plan <table>` (`make plan`): every table's plan prints without training, its run
count is the preset's sweep, GPU-hours come from a GPU check's step medians (and only for the batch it
timed), the data line says what is missing and how to get it."""
from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from rmsnorm_repro.plan import main
from rmsnorm_repro.tasks.paper_data import PAPER_DATA, SOURCES
from runner_fixtures.helpers import CONFIGS, REPO

PRESETS = sorted(p.stem for p in (CONFIGS / "experiment").glob("*.yaml"))


def _check(tmp_path, steps: list[dict]):
    (tmp_path / "gpu-testcard.json").write_text(json.dumps({"device": "Test Card", "steps": steps}))
    return tmp_path


@pytest.mark.parametrize("table", PRESETS)
def test_every_table_prints_its_plan_without_training(table, tmp_path, capsys):
    assert main([table, "--speed", str(tmp_path), f"paths.data_dir={tmp_path / 'data'}"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"Plan for {table} at scale=paper on data=")
    assert "GPU time: unmeasured: no GPU check" in out and "make speed-gpu" in out
    data = out.split("on data=", 1)[1].split(" ", 1)[0]
    assert data in PAPER_DATA.values()
    assert f"data={data} in {tmp_path / 'data' / data}: MISSING" in out and SOURCES[data].prepare in out
    assert not (tmp_path / "data").exists()


def test_runs_and_gpu_hours_follow_the_sweep_and_the_checks_step_times(tmp_path, capsys):
    speed = _check(tmp_path, [
        {"task": "transformer", "norm": "rmsnorm", "precision": "fp32", "step_ms": 180.0, "batch": ["train.batch_tokens=25000"]},
        {"task": "transformer", "norm": "layernorm", "precision": "fp32", "step_ms": 360.0, "batch": ["train.batch_tokens=25000"]},
        {"task": "transformer", "norm": "none", "precision": "fp32", "step_ms": 90.0, "batch": ["train.batch_tokens=5000"]},
    ])
    assert main(["table4", "--seeds", "1,2", "--speed", str(speed)]) == 0
    out = capsys.readouterr().out
    assert "Runs: 8 of task=transformer, 2,400,000 training steps in all (300,000 a run" in out
    assert "| norm=rmsnorm,seed=2 | 300,000 | 180.0 | 15.0 |" in out  # 300k x 0.18 s = 15 h
    assert "| norm=layernorm,seed=1 | 300,000 | 360.0 | 30.0 |" in out
    assert "| norm=none,seed=1 | 300,000 | unmeasured | - |" in out  # timed at another batch: not used
    assert "| all 4 measured runs | 1,200,000 | | 90.0 |" in out
    assert "Unmeasured on Test Card: 4 of 8 runs" in out


def test_at_another_scale_no_paper_size_step_time_is_used(tmp_path, capsys):
    speed = _check(tmp_path, [{"task": "rnnsearch", "norm": "rmsnorm", "precision": "fp32", "step_ms": 1.0, "batch": []}])
    assert main(["table2", "--scale", "mini", "--speed", str(speed)]) == 0
    out = capsys.readouterr().out
    assert "on data=synthetic" in out and "nothing on disk" in out and "GPU-hours" not in out


def test_an_unknown_table_is_one_line_and_exit_2(capsys):
    assert main(["table99"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: no experiment preset 'table99'; choose one of: fig1")


@pytest.mark.skipif(shutil.which("make") is None, reason="no make")
def test_make_plan_runs_the_plan_for_the_table_and_scale():
    out = subprocess.run(["make", "-n", "plan", "TABLE=table7", "SCALE=paper", "SEEDS=1", "PY=python"], cwd=REPO,
                         capture_output=True, text=True, check=True).stdout
    assert "python -m rmsnorm_repro.plan table7 --scale paper --seeds 1" in out


def test_rnnsearch_plans_name_the_authors_preprocessed_copy_and_plan_on_it(tmp_path, capsys):
    assert main(["table2", "--speed", str(tmp_path), f"paths.data_dir={tmp_path / 'data'}"]) == 0
    out = capsys.readouterr().out
    assert f"  or the authors' preprocessed copy: --data wmt14_nematus ({SOURCES['wmt14_nematus'].prepare})" in out
    assert main(["table2", "--data", "wmt14_nematus", "--speed", str(tmp_path), f"paths.data_dir={tmp_path / 'data'}"]) == 0
    out = capsys.readouterr().out
    assert f"data=wmt14_nematus in {tmp_path / 'data' / 'wmt14_nematus'}: MISSING" in out
    assert "first preparation: no BPE to train" in out and "or the authors' preprocessed copy" not in out
    assert main(["table4", "--speed", str(tmp_path), f"paths.data_dir={tmp_path / 'data'}"]) == 0
    assert "authors' preprocessed copy" not in capsys.readouterr().out  # the Transformer's is not public


# Reliability audit at f15a5c5, case 8 and the plan's traceback ------------------------------------------
@pytest.mark.parametrize("seeds,message", [("1,,2", "--seeds 1,,2: an empty seed between commas"),
                                           ("1,1", "--seeds 1,1: seed 1 given twice"),
                                           ("1,x", "--seeds 1,x: 'x' is not a whole number")])
def test_a_seed_list_that_is_empty_twice_or_not_a_number_is_refused(seeds, message, tmp_path, capsys):
    """"1,,2" planned 18 runs and "1,1" doubled the GPU-hours."""
    assert main(["table4", "--seeds", seeds, "--speed", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {message}")


TIMED = {"task": "transformer", "norm": "rmsnorm", "precision": "fp32", "batch": ["train.batch_tokens=25000"]}


@pytest.mark.parametrize("steps,message", [
    ([{**TIMED, "step_ms": float("nan")}], "transformer/rmsnorm/fp32: step_ms nan is not a time > 0"),
    ([{**TIMED, "step_ms": -5.0}], "transformer/rmsnorm/fp32: step_ms -5.0 is not a time > 0"),
    ([{**TIMED, "step_ms": "fast"}], "transformer/rmsnorm/fp32: step_ms 'fast' is not a time > 0"),
    ([1], "a step is 1, not an object"),
    ([{**TIMED, "step_ms": 1.0, "batch": "train.batch_tokens=25000"}],
     "transformer/rmsnorm/fp32: batch 'train.batch_tokens=25000' is not a list of key=value"),
    ([{**TIMED, "step_ms": 1.0, "task": None}], "a step names no task, norm and precision"),
])
def test_a_gpu_check_with_a_time_that_is_not_one_or_odd_fields_is_skipped_by_name(steps, message, tmp_path, capsys):
    """NaN or negative step_ms planned nan or negative GPU-hours, exit 0; "steps": [1] was a traceback."""
    assert main(["table4", "--seeds", "1", "--speed", str(_check(tmp_path, steps))]) == 0
    out, err = capsys.readouterr()
    assert f"plan: {tmp_path / 'gpu-testcard.json'} is not a GPU check's record ({message}); skipped" in err
    assert "GPU time: unmeasured: no GPU check" in out and "nan" not in out


def test_two_gpu_checks_of_one_device_are_both_shown_by_file(tmp_path, capsys):
    """The later one replaced the first, silently."""
    _check(tmp_path, [{**TIMED, "step_ms": 180.0}])
    old = {"device": "Test Card", "steps": [{**TIMED, "step_ms": 360.0}]}
    (tmp_path / "gpu-testcard-old.json").write_text(json.dumps(old))
    assert main(["table4", "--seeds", "1", "--speed", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert "GPU time on Test Card (gpu-testcard-old.json)" in out and "GPU time on Test Card (gpu-testcard.json)" in out
    assert "| norm=rmsnorm,seed=1 | 300,000 | 180.0 | 15.0 |" in out
    assert "| norm=rmsnorm,seed=1 | 300,000 | 360.0 | 30.0 |" in out
    assert "gpu-testcard-old.json and gpu-testcard.json both time Test Card: each is shown" in err
