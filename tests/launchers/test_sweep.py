"""A multirun says what it is about to run: the count of a sweep's runs (a real sweep's lines:
tests/report/test_compare.py); training loads no plotting for it."""
from __future__ import annotations

import subprocess
import sys

import pytest

from rmsnorm_repro.launchers import sweep


def test_job_count_multiplies_the_swept_values():
    assert sweep.job_count({"norm": "layernorm,rmsnorm", "seed": "range(3)", "optim.lr": "0.1"}) == (6, ["norm", "seed"])
    assert sweep.job_count({"seed": "1"}) == (1, [])


def test_training_imports_the_sweep_callback_without_plotting():
    """The callback is wired into every multirun (configs/train.yaml): it loads the compare page only at the end."""
    code = "import sys, rmsnorm_repro.launchers.sweep; print(any(m.startswith('matplotlib') for m in sys.modules))"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "False\n"


@pytest.mark.parametrize("launcher", ["launcher=basic", pytest.param("launcher=joblib", marks=pytest.mark.slow)])
def test_the_end_table_is_printed_when_a_job_fails_and_names_it(tmp_path, launcher):
    from runner_fixtures.helpers import cli

    # p=2 is bad input (one job fails at its start), p=0.5 trains: Hydra raises before on_multirun_end
    proc = cli("-m", "task=tiny", "norm=prmsnorm", "norm.p=2,0.5", "train.steps=10", "train.eval_every=5", launcher,
               f"hydra.sweep.dir={tmp_path / 'sweep'}", f"paths.runs_dir={tmp_path}")
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "| group |" in proc.stdout and "prmsnorm p=0.5" in proc.stdout  # the table of the job that finished
    assert "sweep: 1 job(s) ended without a summary: norm.p=2," in proc.stderr  # the failed one, named


@pytest.mark.parametrize("launcher", [("launcher=joblib", "hydra.launcher.n_jobs=0"),
                                      ("launcher=local_parallel", "hydra.launcher.timeout_min=0")])
def test_a_launcher_setting_that_runs_nothing_is_one_line(tmp_path, launcher):
    from runner_fixtures.helpers import cli

    proc = cli("-m", "task=tiny", "seed=1,2", *launcher, f"hydra.sweep.dir={tmp_path / 'sweep'}")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr[-2000:]
    assert launcher[1] in proc.stderr and "SLURM" not in proc.stderr


def test_the_end_table_is_printed_when_a_job_crashes(tmp_path):
    from runner_fixtures.helpers import cli

    proc = cli("-m", "task=tiny", "task.crash_at=3,null", "train.steps=10", "train.eval_every=5",
               f"hydra.sweep.dir={tmp_path / 'sweep'}", f"paths.runs_dir={tmp_path}")
    assert proc.returncode != 0
    assert "| group |" in proc.stdout, proc.stderr[-2000:]  # the table of the job that finished
