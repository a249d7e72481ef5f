"""A sweep never puts two jobs in one folder: every key it varies names the job folders
(record.job_dirname), whatever exclude_keys says; real multiruns through the CLI."""
from __future__ import annotations

import json

import pytest

from rmsnorm_repro.record import MAX_NAME
from runner_fixtures.helpers import cli, read_summary

pytestmark = pytest.mark.slow  # every test here trains real runs


def _runs(root):
    return {p.parent.name: json.loads(p.read_text()) for p in root.rglob("summary.json")}


def test_a_sweep_over_the_step_budget_keeps_one_folder_per_job(tmp_path):
    proc = cli("-m", "task=tiny", "train.steps=4,8", f"paths.runs_dir={tmp_path}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = _runs(tmp_path)
    assert sorted(runs) == ["train.steps=4", "train.steps=8"]
    assert {name: s["steps"] for name, s in runs.items()} == {"train.steps=4": 4, "train.steps=8": 8}


def test_a_sweep_over_tasks_into_one_sweep_dir_keeps_one_folder_per_task(tmp_path):
    proc = cli("-m", "task=tiny,tiny2", "train.steps=4", f"hydra.sweep.dir={tmp_path / 'sweep'}",
               f"paths.runs_dir={tmp_path}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = _runs(tmp_path / "sweep")
    assert sorted(runs) == ["task=tiny", "task=tiny2"]
    assert all(s["status"] == "completed" for s in runs.values())


def test_keys_a_sweep_does_not_vary_stay_out_of_its_folder_names(tmp_path):
    # the step budget is excluded, and not swept here: the folders are named by the seeds alone
    proc = cli("-m", "task=tiny", "seed=1,2", "train.steps=4", f"paths.runs_dir={tmp_path}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(_runs(tmp_path)) == ["seed=1", "seed=2"]


def test_overrides_too_long_for_a_folder_name_are_shortened_and_kept_in_config_yaml(tmp_path):
    # four long overrides: their names would pass the 255 bytes a path component may have
    long = [f"+task.note{i}={'x' * 80}" for i in range(4)]
    proc = cli("-m", "task=tiny", "train.steps=2", "seed=1,2", *long, f"paths.runs_dir={tmp_path}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    folders = [p.parent for p in tmp_path.rglob("summary.json")]
    assert len(folders) == 2 and all(len(f.name.encode()) <= MAX_NAME for f in folders)
    for folder in folders:
        recorded = (folder / "config.yaml").read_text()
        assert all(line.split("=", 1)[0].lstrip("+") in recorded for line in long)
        assert read_summary(folder)["status"] == "completed"
