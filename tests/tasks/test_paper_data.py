"""scale=paper trains on the paper's data unless the command asks for generated data: the refusal (one
line, exit 2, through the entry point), the explicit opt-in, and the Makefile's paper data per table."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys

import pytest
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from rmsnorm_repro.tasks import TASKS, get_task_class
from rmsnorm_repro.tasks.paper_data import PAPER_DATA, SOURCES, TOP4_URL, refusal
from rmsnorm_repro.train import main
from runner_fixtures.helpers import CONFIGS, REPO, compose_cfg


def _main_stderr(monkeypatch, capsys, tmp_path, *overrides: str) -> tuple[int, list[str]]:
    for var in ("HYDRA_FULL_ERROR", "RMSNORM_FULL_ERROR"):
        monkeypatch.setenv(var, "0")
    monkeypatch.setattr(sys, "argv", ["rmsnorm-train", *overrides, f"paths.runs_dir={tmp_path}",
                                      "hydra/job_logging=none", "hydra/hydra_logging=none"])
    GlobalHydra.instance().clear()
    with pytest.raises(SystemExit) as info:
        main()
    GlobalHydra.instance().clear()
    return info.value.code, [line for line in capsys.readouterr().err.splitlines() if line.strip()]


@pytest.mark.parametrize("task", sorted(PAPER_DATA))
def test_scale_paper_without_data_is_refused_in_one_line_naming_the_paper_data(tmp_path, monkeypatch, capsys, task):
    code, err = _main_stderr(monkeypatch, capsys, tmp_path, f"task={task}", "scale=paper")
    assert code == 2
    data = PAPER_DATA[task]
    assert len(err) == 1 and err[0].startswith(f"error: scale=paper trains on the paper's data: task={task} ran on "
                                               f"data={data} (get it: {SOURCES[data].prepare}"), err
    assert "data=synthetic to train the paper's sizes on generated data" in err[0]
    assert not list(tmp_path.rglob("summary.json")) and not list(tmp_path.rglob("checkpoints"))


def test_the_rnnsearch_refusal_names_the_authors_preprocessed_copy_too(tmp_path, monkeypatch, capsys):
    from rmsnorm_repro.tasks.paper_data import NEMATUS_DATA_URL

    code, err = _main_stderr(monkeypatch, capsys, tmp_path, "task=rnnsearch", "scale=paper")
    assert code == 2 and len(err) == 1
    assert f"add data=wmt14, data=wmt14_nematus for the authors' preprocessed copy (get it: the authors' " \
           f"preprocessed WMT data from {NEMATUS_DATA_URL}" in err[0], err
    assert "wmt14_nematus" in get_task_class("rnnsearch").supported_data


def test_a_sweep_at_scale_paper_without_data_is_refused_once_before_any_job(tmp_path, monkeypatch, capsys):
    code, err = _main_stderr(monkeypatch, capsys, tmp_path, "-m", "task=convpool", "scale=paper", "seed=1,2,3")
    assert code == 2
    assert len(err) == 1 and err[0].startswith("error: scale=paper trains on the paper's data: task=convpool ran on "
                                               "data=cifar10"), err  # no "sweep: 3 runs" line, no job's own
    assert not list(tmp_path.rglob("*.log")) and not list(tmp_path.rglob(".hydra"))


def test_a_sweep_over_what_the_refusal_reads_is_left_to_its_jobs(tmp_path, monkeypatch, capsys):
    """task=convpool,reader: the sweep is not refused as a whole (its jobs could differ); each job refuses itself."""
    code, err = _main_stderr(monkeypatch, capsys, tmp_path, "-m", "task=convpool,reader", "scale=paper")
    assert code == 2 and any(line.startswith("sweep: 2 runs over task") for line in err), err
    assert [line.split(" ran on ")[0] for line in err if line.startswith("error: scale=paper")] == [
        "error: scale=paper trains on the paper's data: task=convpool", "error: scale=paper trains on the paper's data: task=reader"]


@pytest.mark.parametrize("overrides, refused", [
    (["scale=paper"], True),
    (["scale=paper", "data=synthetic"], False),   # asked for: a pipeline check at the paper's sizes
    (["scale=paper", "+data=synthetic"], False),
    (["scale=mini"], False),                       # generated data is what mini is for
    (["scale=paper", "data=cifar10"], False),
])
def test_only_an_unasked_paper_scale_run_on_generated_data_is_refused(overrides, refused):
    cfg = compose_cfg(["task=convpool", *(o for o in overrides if not o.startswith("+"))])
    assert (refusal(cfg, overrides) is not None) is refused


def test_every_task_has_its_paper_data_among_its_options():
    for task in TASKS:
        assert PAPER_DATA[task] in get_task_class(task).supported_data, task
        assert (CONFIGS / "data" / f"{PAPER_DATA[task]}.yaml").exists()


def _preset_task(preset: str) -> str:
    """The task a preset overrides, following the presets it includes (table3 includes table2)."""
    for entry in OmegaConf.load(CONFIGS / "experiment" / f"{preset}.yaml").defaults:
        if isinstance(entry, str):
            return _preset_task(entry)
        if "override /task" in entry:
            return str(entry["override /task"])
    raise AssertionError(f"{preset} names no task")


@pytest.mark.skipif(shutil.which("make") is None, reason="no make")
def test_makefile_table_targets_at_scale_paper_train_on_each_tasks_paper_data():
    def train_line(target: str, *args: str) -> str:
        out = subprocess.run(["make", "-n", target, "PY=python", *args], cwd=REPO, capture_output=True, text=True,
                             check=True).stdout
        return next(line for line in " ".join(out.split("\\\n")).splitlines() if "rmsnorm_repro.train" in line)

    for target in [p.stem for p in sorted((CONFIGS / "experiment").glob("*.yaml")) if p.stem != "table1"]:
        task = _preset_task(target)
        line = train_line(target, "SCALE=paper")
        assert f" data={PAPER_DATA[task]} " in line, (target, line)
        assert f"/{PAPER_DATA[task]}-paper" in line, (target, line)
        assert " data=synthetic " in train_line(target)  # mini: generated data
        assert " data=synthetic " in train_line(target, "SCALE=paper", "DATA=synthetic")


@pytest.mark.parametrize("layout", ["questions", "top4"])
def test_the_readers_missing_data_line_says_where_top4_comes_from(tmp_path, layout):
    from rmsnorm_repro.tasks.reader.data import load_reader_data

    cfg = compose_cfg(["task=reader", "data=cnn", f"data.root={tmp_path}", f"data.layout={layout}"])
    with pytest.raises(FileNotFoundError, match=re.escape(TOP4_URL)):
        load_reader_data(cfg)
