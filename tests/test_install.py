"""A regular (non-editable) install works from any directory, and the files the suite writes stay put.

The wheel test builds the package from a copy of the checkout (the checkout gets no build/ folder),
installs it into a scratch virtual environment and runs `rmsnorm-train` and `rmsnorm-report` from a
directory outside the repository. torch and the other dependencies come from this interpreter's
environment through a .pth file (no network); `venv --system-site-packages` would not do: it exposes
the base interpreter's packages, not those of the venv the tests run in. About 30 s.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from rmsnorm_repro import paths
from rmsnorm_repro.norms import table1 as t1
from rmsnorm_repro.report.__main__ import main as report_main
from runner_fixtures.helpers import REPO
from runner_fixtures.fake_runs import write_fake_runs

TINY_CONVPOOL = ["task=convpool", "train.steps=2", "scale=mini", "device=cpu", "norm.impl=reference",
                 "train.eval_every=2", "train.batch_size=8", "task.synthetic.train_size=64", "task.synthetic.test_size=32",
                 "task.train_error_size=32", "task.eval_batch_size=32"]


def _run(args: list, cwd: Path, env: dict | None = None, timeout: float = 180) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{args}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    return proc


@pytest.mark.slow
def test_a_wheel_ships_configs_and_paper_numbers_and_runs_from_anywhere(tmp_path):
    # 1. the wheel, built from a copy of what git tracks for it
    src = tmp_path / "src"
    for name in ("pyproject.toml", "setup.py", "README.md", "rmsnorm_repro", "configs", "results/paper"):
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
        else:
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(REPO / name, src / name)
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q",
          "-w", tmp_path / "dist", src], cwd=tmp_path)
    (wheel,) = (tmp_path / "dist").glob("rmsnorm_repro-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    code = {f"rmsnorm_repro/{p.relative_to(REPO / 'rmsnorm_repro').as_posix()}" for p in (REPO / "rmsnorm_repro").rglob("*.py")}
    configs = {f"rmsnorm_repro/configs/{p.relative_to(REPO / 'configs').as_posix()}" for p in (REPO / "configs").rglob("*.yaml")}
    paper = {f"rmsnorm_repro/paper/{p.name}" for p in (REPO / "results" / "paper").glob("*.csv")}
    assert code | configs | paper <= names, sorted((code | configs | paper) - names)[:10]
    assert "rmsnorm_repro/norms/fused/rmsnorm_cpu.cpp" in names

    # 2. a scratch environment with the wheel; the rest from this one
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", venv], cwd=tmp_path)
    site = Path(sysconfig.get_paths(vars={"base": str(venv), "platbase": str(venv)})["purelib"])
    (site / "_deps_from_test_env.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    _run([sys.executable, "-m", "pip", "--python", venv / "bin" / "python", "install", "--no-deps", "--no-index", "-q", wheel],
         cwd=tmp_path)

    # 3. a tiny run and its report, from a directory that is not the checkout
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(OMP_NUM_THREADS="1", WANDB_MODE="disabled", HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1")
    where = _run([venv / "bin" / "python", "-c", "import rmsnorm_repro.paths as p; print(p.__file__, p.configs_dir(), p.paper_dir())"],
                 cwd=work, env=env).stdout.split()
    assert all(str(site) in w for w in where), where  # the installed copy, not the checkout's
    _run([venv / "bin" / "rmsnorm-train", *TINY_CONVPOOL], cwd=work, env=env)
    (summary,) = (work / "results" / "runs" / "convpool").rglob("summary.json")
    assert json.loads(summary.read_text())["status"] == "completed"
    page = _run([venv / "bin" / "rmsnorm-report", "results/runs", "--table", "table10"], cwd=work, env=env).stdout
    row = next(line for line in page.splitlines() if line.startswith("| RMSNorm |"))
    assert re.search(r"\| \d+\.\d+ \|", row), row  # the paper's numbers came with the package
    assert (work / "results" / "runs" / "report" / "table10.md").exists()


def test_every_reader_of_configs_and_the_papers_numbers_asks_paths():
    """No module finds configs/ or results/paper/ relative to its own file: an installed wheel has no such parents."""
    # redact.py names the folder holding the package only to keep it out of written files (a leaf below paths)
    offenders = [str(p.relative_to(REPO)) for p in (REPO / "rmsnorm_repro").rglob("*.py")
                 if p.name not in ("paths.py", "redact.py") and re.search(r"Path\(__file__\)(\.resolve\(\))?\.parents?\b", p.read_text())]
    assert offenders == []
    assert paths.configs_dir() == REPO / "configs" and paths.paper_dir() == REPO / "results" / "paper"  # a checkout


def test_the_report_writes_beside_its_runs_unless_told(tmp_path):
    runs = write_fake_runs(tmp_path / "runs")
    assert report_main([str(runs), "--table", "table2"]) == 0
    assert (runs / "report" / "table2.md").exists() and (runs / "report" / "figures" / "fig1.png").exists()
    assert "![fig1](figures/fig1.png)" in (runs / "report" / "table2.md").read_text()
    # the make targets that refresh committed pages say where they write
    makefile = (REPO / "Makefile").read_text()
    assert "-m rmsnorm_repro.norms.table1 --out results/tables/table1.md" in makefile
    assert "--table $@ \\\n\t\t--out results/tables --figures results/figures" in makefile
    assert "-m rmsnorm_repro.campaigns.demo --out results/mini" in makefile


def test_regenerating_table1_rewrites_the_committed_page_unchanged():
    """Round-off (float64, ~1e-16, its last digits vary by machine) is written as "< 1e-12"."""
    assert t1.fmt_change(2.8e-16) == t1.fmt_change(2.7e-16) == t1.fmt_change(0.0) == "< 1e-12"
    assert t1.fmt_change(0.533) == "5.3e-01"
    text, _ = t1.render(t1.compute(0), t1.read_paper(), seed=0)
    assert text == (REPO / "results" / "tables" / "table1.md").read_text()


def test_figures_regenerate_byte_for_byte(tmp_path):
    from rmsnorm_repro.report import aggregate, figures

    runs = aggregate.load_runs(write_fake_runs(tmp_path / "runs"))
    a, b = figures.draw("fig1", runs, tmp_path / "a.png"), figures.draw("fig1", runs, tmp_path / "b.png")
    assert a.read_bytes() == b.read_bytes() and b"Matplotlib" not in a.read_bytes()


def test_readme_says_how_to_open_the_notebook():
    readme, makefile = (REPO / "README.md").read_text(), (REPO / "Makefile").read_text()
    pyproject = (REPO / "pyproject.toml").read_text()
    assert "make notebook" in readme and re.search(r"^notebook: ", makefile, re.M)
    assert re.search(r'^notebook = \[\n\s+"jupyterlab', pyproject, re.M)
    assert '".[dev,notebook]"' in makefile


@pytest.mark.parametrize("name", ["configs", "paper"])
def test_paths_point_at_an_installed_copy_first(tmp_path, monkeypatch, name):
    (tmp_path / name).mkdir()
    monkeypatch.setattr(paths, "PACKAGE", tmp_path)
    assert (paths.configs_dir() if name == "configs" else paths.paper_dir()) == tmp_path / name


def test_the_demo_report_rewritten_from_the_same_runs_is_the_same_file(tmp_path):
    from rmsnorm_repro.campaigns import demo

    out = tmp_path / "mini"
    write_fake_runs(out / "runs" / "rnnsearch")
    demo.save_timings(out, {"rnnsearch": (0, 90.04), "transformer": (0, 30.0)})  # as `make demo` leaves them
    assert demo.main(["--out", str(out), "--report-only"]) == 0
    first = (out / "REPORT.md").read_text()
    assert "| rnnsearch | 0 | 1.5 |" in first and "the last ended 2026-01-02 03:04 UTC." in first  # the runs' time
    assert demo.main(["--out", str(out), "--report-only"]) == 0
    assert (out / "REPORT.md").read_text() == first
