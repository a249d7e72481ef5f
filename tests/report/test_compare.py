"""`rmsnorm-report compare` on real tiny runs: two norms x two seeds, trained here.

The expected cells and verdicts are computed in the tests from the runs' summary.json files
(statistics.fmean / stdev, the two-standard-error rule written out), not by the code under test.
"""
from __future__ import annotations

import json
import math
import os
import shutil
import statistics
from pathlib import Path

import pytest

from rmsnorm_repro.report import compare
from rmsnorm_repro.report.__main__ import main as report_main
from rmsnorm_repro.runner import run
from runner_fixtures.fake_runs import write_run
from runner_fixtures.helpers import cli, tiny

NORMS, SEEDS = ("layernorm", "rmsnorm"), (1, 2)
FAST = ("train.steps=10", "train.eval_every=5", "train.checkpoint_every=10", "task.eval_size=64")


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> Path:
    """A sweep folder of 4 completed tiny runs, named as a multirun names its jobs."""
    root = tmp_path_factory.mktemp("compare")
    for norm in NORMS:
        for seed in SEEDS:
            run(tiny(root, f"norm={norm}", f"seed={seed}", *FAST), root / "sweep" / f"norm={norm},seed={seed}")
    return root / "sweep"


def summaries(sweep: Path, norm: str) -> list[dict]:
    return [json.loads((sweep / f"norm={norm},seed={seed}" / "summary.json").read_text()) for seed in SEEDS]


def cell(values: list[float], digits: int) -> str:
    return f"{statistics.fmean(values):.{digits}f} ± {statistics.stdev(values):.{digits}f}"


def rows(text: str, first: str) -> dict[str, list[str]]:
    """The rows of the table whose header starts with `first`, by their first cell."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {first} |"))
    out = {}
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        if set(cells[0]) != {"-"}:  # the header's rule
            out[cells[0]] = cells
    return out


def test_the_table_and_verdicts_match_values_computed_by_hand(sweep: Path, tmp_path: Path, capsys):
    assert report_main(["compare", str(sweep), "--out", str(tmp_path / "out")]) == 0
    printed = capsys.readouterr().out
    page = (tmp_path / "out" / "compare.md").read_text()
    assert printed.strip() == page.strip()
    table = rows(page, "group")
    header = table.pop("group")
    assert header == ["group", "n", "error", "accuracy", "valid_error", "valid_accuracy", "selected step", "steps",
                      "ms/step", "minutes"]
    assert list(table) == [f"norm={n}" for n in NORMS]
    means = {}
    # ms/step decimals follow the column's largest mean (a loaded machine can push a tiny step past 1 ms)
    step_ms = max(statistics.fmean(x["s_per_1k_steps"] for x in summaries(sweep, norm)) for norm in NORMS)
    step_digits = 1 if step_ms >= 100 else 2 if step_ms >= 1 else 4
    for norm in NORMS:
        s = summaries(sweep, norm)
        cells = [c.strip("*") for c in table[f"norm={norm}"]]
        assert cells[1] == "2"
        for i, key in enumerate(("error", "accuracy", "valid_error", "valid_accuracy"), start=2):
            assert cells[i] == cell([x["final"][key] for x in s], 4), (norm, key)
        assert cells[6] == cell([x["selected_step"] for x in s], 0) and cells[7] == "10 ± 0"
        assert cells[8].startswith(cell([x["s_per_1k_steps"] for x in s], step_digits) + " [")
        assert cells[9] == cell([x["wall_s"] / 60 for x in s], 4)
        means[norm] = {key: statistics.fmean(x["final"][key] for x in s) for key in ("error", "accuracy")}
    # the best mean of a column is bold: the lower error, the higher accuracy
    best_error = min(NORMS, key=lambda n: means[n]["error"])
    best_accuracy = max(NORMS, key=lambda n: means[n]["accuracy"])
    assert table[f"norm={best_error}"][2].startswith("**") and table[f"norm={best_accuracy}"][3].startswith("**")
    # rmsnorm against the default baseline, layernorm
    diff = rows(page, "group | against")["norm=rmsnorm"]
    assert diff[1] == "norm=layernorm"
    ln, rms = summaries(sweep, "layernorm"), summaries(sweep, "rmsnorm")
    for i, (key, higher_is_better) in enumerate((("error", False), ("accuracy", True)), start=2):
        a, b = [x["final"][key] for x in rms], [x["final"][key] for x in ln]
        # Welch's 95% interval: df by Welch-Satterthwaite, rounded down (2 seeds a side: 1 or 2), t from a table
        d = statistics.fmean(a) - statistics.fmean(b)
        va, vb = statistics.variance(a) / 2, statistics.variance(b) / 2
        df = math.floor((va + vb) ** 2 / (va ** 2 + vb ** 2))
        bound = {1: 12.7062, 2: 4.3027}[df] * math.sqrt(va + vb)
        verdict = "within noise" if abs(d) <= bound else "better" if (d > 0) == higher_is_better else "worse"
        assert diff[i] == f"{d:+.4f} ({verdict})", key
    # every number names its runs; no absolute path of this machine
    shown = [os.path.relpath(sweep / f"norm=layernorm,seed={seed}", tmp_path / "out") for seed in SEEDS]
    assert f"- norm=layernorm (n=2): `{shown[0]}`, `{shown[1]}`" in page and shown[0].startswith("..")
    assert str(tmp_path) not in page and str(sweep) not in page
    png = tmp_path / "out" / "compare.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and "![curves](compare.png)" in page


def test_run_folders_and_globs_group_alike_and_a_baseline_can_be_chosen(sweep: Path, tmp_path: Path):
    by_glob = compare.compare([str(sweep / "norm=*")], baseline="norm=rmsnorm")
    assert [g.label for g in by_glob.groups] == ["norm=layernorm", "norm=rmsnorm"]
    assert [len(g.runs) for g in by_glob.groups] == [2, 2] and by_glob.keys == ["norm.name"]
    one_by_one = compare.compare([str(sweep / f"norm={n},seed={s}") for n in NORMS for s in SEEDS])
    assert [g.label for g in one_by_one.groups] == ["norm=layernorm", "norm=rmsnorm"]
    text = compare.render(by_glob, tmp_path)
    diff = rows(text, "group | against")
    assert list(diff) == ["group", "norm=layernorm"] and diff["norm=layernorm"][1] == "norm=rmsnorm"
    ln, rms = summaries(sweep, "layernorm"), summaries(sweep, "rmsnorm")
    d = statistics.fmean(x["final"]["error"] for x in ln) - statistics.fmean(x["final"]["error"] for x in rms)
    assert diff["norm=layernorm"][2].startswith(f"{d:+.4f} (")


def test_bad_input_is_one_line_and_exit_2(sweep: Path, tmp_path: Path, capsys):
    write_run(tmp_path / "other", "rnnsearch", "layernorm", 1)
    cases = [
        ([str(sweep), str(tmp_path / "other")], "the runs mix tasks: rnnsearch (1 run), tiny (4 runs)"),
        ([str(sweep), "--baseline", "lr=1"], "--baseline lr=1: give key=value with a key the runs differ in (norm)"),
        ([str(sweep), "--baseline", "norm=batchnorm"], "no group has norm=batchnorm (they have layernorm, rmsnorm)"),
        ([str(tmp_path / "nothing*")], "matches no folder"),
    ]
    for args, message in cases:
        assert report_main(["compare", *args, "--out", str(tmp_path / "out")]) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, err


def test_runs_left_out_are_named(sweep: Path, tmp_path: Path, capsys):
    runs = tmp_path / "runs"
    shutil.copytree(sweep, runs, ignore=shutil.ignore_patterns("compare"))
    for name, change in (("norm=rmsnorm,seed=3", {"status": "interrupted"}),
                         ("norm=rmsnorm,seed=4", {"record_version": 99})):
        shutil.copytree(runs / "norm=rmsnorm,seed=1", runs / name)
        summary = json.loads((runs / name / "summary.json").read_text())
        (runs / name / "summary.json").write_text(json.dumps({**summary, "seed": int(name[-1]), **change}))
    assert report_main(["compare", str(runs)]) == 1  # one of them unreadable: the verdicts may lack it
    captured = capsys.readouterr()
    page = (runs / "compare" / "compare.md").read_text()
    assert "left out 2 run(s)" in captured.err and "1 run(s) could not be read" in captured.err
    assert "`../norm=rmsnorm,seed=3` (interrupted)" in page and "`../norm=rmsnorm,seed=4` (" in page
    assert "record version 99" in page
    assert rows(page, "group")["norm=rmsnorm"][1] == "2"  # neither counts


def test_groups_are_named_by_the_keys_that_split_them(tmp_path: Path):
    # p follows from the norm (1 for layernorm, 0.5 for prmsnorm), lr is swept: the groups are norm x lr
    for norm, p in (("layernorm", 1.0), ("prmsnorm", 0.5)):
        for lr in (0.1, 0.01):
            for seed in (1, 2):
                write_run(tmp_path, "convpool", norm, seed, p=p, model={"lr": lr})
    c = compare.compare([str(tmp_path)])
    assert c.keys == ["norm.name", "task.model.lr"]
    assert [g.label for g in c.groups] == ["norm=layernorm lr=0.01", "norm=layernorm lr=0.1",
                                          "norm=prmsnorm lr=0.01", "norm=prmsnorm lr=0.1"]
    # each prmsnorm group is measured against the layernorm group of its own lr
    assert [compare.baseline_of(c, g).label for g in c.groups[2:]] == ["norm=layernorm lr=0.01", "norm=layernorm lr=0.1"]


def test_a_cell_from_fewer_runs_than_its_groups_n_says_how_many(tmp_path: Path):
    """compare counted runs without a value in n, the cell from the rest, no word (audit f15a5c5, case 7)."""
    for norm in ("layernorm", "rmsnorm"):
        for seed in (1, 2, 3):
            final = {} if (norm, seed) == ("rmsnorm", 3) else {"error": 0.2 + seed / 100}
            write_run(tmp_path, "reader", norm, seed, final=final)
    page = compare.render(compare.compare([str(tmp_path)]), tmp_path)
    table = rows(page.replace("**", ""), "group")
    assert table["norm=rmsnorm"][1] == "3" and table["norm=rmsnorm"][2] == f"{cell([0.21, 0.22], 4)} (n=2)"
    assert table["norm=layernorm"][2] == cell([0.21, 0.22, 0.23], 4)  # every run has it: no note
    assert "(n=k): the cell's mean is over k of the group's runs" in page


@pytest.mark.slow
def test_a_real_sweep_folder(tmp_path: Path, capsys):
    proc = cli("-m", "task=tiny", "norm=layernorm,rmsnorm", "seed=1,2", *FAST, f"hydra.sweep.dir={tmp_path / 'sweep'}",
               f"paths.runs_dir={tmp_path}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    # it said what it would run, counted the runs, and its end printed the table (launchers/sweep.py)
    assert f"sweep: 4 runs over norm x seed into {tmp_path / 'sweep'}, 1 at a time (BasicLauncher)" in proc.stderr
    assert "sweep: 1/4 runs done in " in proc.stderr and "sweep: 4/4 runs done in " in proc.stderr
    at_end = rows(proc.stdout, "group")
    assert [at_end[g][1] for g in ("norm=layernorm", "norm=rmsnorm")] == ["2", "2"]
    assert not (tmp_path / "sweep" / "compare").exists()  # printed only: the sweep folder holds its jobs alone
    assert report_main(["compare", str(tmp_path / "sweep")]) == 0
    table = rows(capsys.readouterr().out, "group")
    assert [table[g][1] for g in ("norm=layernorm", "norm=rmsnorm")] == ["2", "2"]


def test_runs_without_config_yaml_are_still_told_apart_by_their_summaries_norm(tmp_path: Path):
    for norm in ("layernorm", "rmsnorm"):
        (write_run(tmp_path, "reader", norm, 1, final={"error": 0.3}) / "config.yaml").unlink()
    c = compare.compare([str(tmp_path)])
    assert [g.label for g in c.groups] == ["norm=layernorm", "norm=rmsnorm"]
