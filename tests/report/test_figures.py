"""Figures a reader can read: a curve of one point still shows, panels wrap instead of one long row,
each norm keeps its colour, and a seed trained twice counts once (figures, report pages, notebook)."""
from __future__ import annotations

import shutil
from pathlib import Path

from matplotlib.colors import to_rgb
from matplotlib.figure import Figure

from rmsnorm_repro.report import aggregate, figures
from rmsnorm_repro.report.__main__ import main as report_main
from runner_fixtures.fake_runs import write_fake_runs, write_run


def test_a_curve_of_one_point_is_drawn_with_a_marker_and_integer_steps(tmp_path: Path):
    write_run(tmp_path / "runs", "convpool", "rmsnorm", 1, steps=10, curve={"error": [80.0], "train_error": [85.0]})
    groups = aggregate.group_runs(aggregate.load_runs(tmp_path / "runs"))
    ax = Figure().subplots()
    assert figures.plot_curves(ax, groups, "error")
    (line,) = ax.get_lines()
    assert list(line.get_xdata()) == [10] and line.get_marker() == "o" and line.get_markersize() > 0
    ax.figure.canvas.draw()  # the tick locator runs at draw time
    labels = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
    assert "10" in labels and all(label.lstrip("−-").isdigit() for label in labels), labels  # no step 9.975
    assert figures.draw("table9", aggregate.load_runs(tmp_path / "runs"), tmp_path / "t9.png") is not None
    # long curves stay plain lines
    write_run(tmp_path / "long", "convpool", "rmsnorm", 1, steps=1000, curve={"error": [50.0] * 100})
    ax = Figure().subplots()
    figures.plot_curves(ax, aggregate.group_runs(aggregate.load_runs(tmp_path / "long")), "error")
    assert ax.get_lines()[0].get_marker() in (None, "None", "")


def test_each_norm_keeps_its_colour_and_a_p_sweep_gets_shades_of_it(tmp_path: Path):
    for norm, p in (("none", 1.0), ("layernorm", 1.0), ("prmsnorm", 0.125), ("prmsnorm", 0.5)):
        write_run(tmp_path / "runs", "rnnsearch", norm, 1, p=p)
    groups = aggregate.group_runs(aggregate.load_runs(tmp_path / "runs"))
    colors = dict(zip((g.label for g in groups), figures.group_colors(groups)))
    assert colors["none"] == to_rgb("tab:gray") and colors["layernorm"] == to_rgb("tab:blue")
    dark, light = colors["prmsnorm p=0.125"], colors["prmsnorm p=0.5"]
    assert dark != light and sum(dark) < sum(to_rgb("tab:orange")) < sum(light)


def test_panels_wrap_at_a_readable_width():
    assert figures.panel_grid(5, columns=3) == (2, 3, (15.0, 7.2))
    assert figures.panel_grid(2, columns=3) == (1, 2, (10.0, 3.6))


def test_a_seed_trained_twice_counts_once(tmp_path: Path, capsys):
    runs_dir = write_fake_runs(tmp_path / "runs")
    original = next(p for p in runs_dir.iterdir() if p.name.startswith("rnnsearch-rmsnorm-p1.0-s1"))
    shutil.copytree(original, runs_dir / "again" / original.name)  # the same run in a second directory
    found = aggregate.load_runs(runs_dir)
    unique = figures.unique_runs(found)
    assert len(found) == 15 and len(unique) == 14
    rms = next(g for g in aggregate.group_runs(unique) if g.task == "rnnsearch" and g.norm == "rmsnorm")
    assert sorted(r.seed for r in rms.runs) == [1, 2]
    # a completed run is kept over an interrupted one of the same seed
    write_run(runs_dir / "stopped", "convpool", "rmsnorm", 1, status="interrupted", s_per_1k=31)  # same settings
    kept = [r for r in figures.unique_runs(aggregate.load_runs(runs_dir)) if r.task == "convpool" and r.seed == 1]
    assert [r.status for r in kept] == ["completed"]
    # the report counts it once too, and says so
    assert report_main([str(runs_dir), "--table", "table2"]) == 0
    captured = capsys.readouterr()
    assert "| RMSNorm | 2 |" in captured.out and "duplicate run(s) of a seed left out" in captured.err
