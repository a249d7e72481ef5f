"""Table 3's page: each of the paper's column pairs (Th, Py) fed by the runs of its own codebase, speed-ups
against that codebase's LayerNorm; Table 2's runs fill neither pair and the page says how to get them."""
from __future__ import annotations

from pathlib import Path

import yaml

from rmsnorm_repro.report.__main__ import main as report_main
from runner_fixtures.fake_runs import write_run

# codebase -> norm -> (s per 1k steps, test14 BLEU)
RUNS = {"theano": {"layernorm": (20.0, 22.0), "rmsnorm": (10.0, 23.0)},
        "pytorch": {"layernorm": (40.0, 24.0), "rmsnorm": (30.0, 25.0)}}
SETTINGS = {"theano": {"eps": 1e-5, "eps_inside": True, "bias": True}, "pytorch": {"eps": 1e-8, "eps_inside": False, "bias": False}}


def _row(page: str, model: str) -> list[str]:
    line = next(line for line in page.splitlines() if line.startswith(f"| {model} |"))
    return [cell.strip() for cell in line.strip()[1:-1].split("|")]


def test_each_column_pair_reads_its_own_codebases_runs(tmp_path: Path):
    for codebase, norms in RUNS.items():
        for norm, (s_per_1k, bleu) in norms.items():
            run = write_run(tmp_path / "runs" / codebase, "rnnsearch", norm, 1, s_per_1k=s_per_1k,
                            final={"test14_bleu": bleu})
            config = yaml.safe_load((run / "config.yaml").read_text())
            config["codebase"] = {"name": codebase}
            config["norm"].update(SETTINGS[codebase] if norm == "rmsnorm" else {"eps": 1e-5, "bias": True})
            (run / "config.yaml").write_text(yaml.safe_dump(config))
    assert report_main([str(tmp_path / "runs"), "--table", "table3", "--out", str(tmp_path / "pages")]) == 0
    page = (tmp_path / "pages" / "table3.md").read_text()
    header = _row(page, "model")
    ln, rms = dict(zip(header, _row(page, "LayerNorm"))), dict(zip(header, _row(page, "RMSNorm")))
    assert (rms["Test14 paper Th"], rms["Test14 ours Th"], rms["Test14 paper Py"], rms["Test14 ours Py"]) == \
        ("22.5", "23.0", "22.9", "25.0")
    assert ln["Test14 ours Th"] == "22.0" and ln["Test14 ours Py"] == "24.0"
    assert rms["time ours Th"].startswith("10.0") and "(50.0%" in rms["time ours Th"]  # against Theano's LayerNorm
    assert rms["time ours Py"].startswith("30.0") and "(25.0%" in rms["time ours Py"]  # against PyTorch's
    assert "None of these runs" not in page


def test_table2_runs_fill_neither_pair_and_the_page_says_how_to_get_table3s(tmp_path: Path):
    write_run(tmp_path / "runs", "rnnsearch", "rmsnorm", 1, final={"test14_bleu": 21.0})
    assert report_main([str(tmp_path / "runs"), "--table", "table3", "--out", str(tmp_path / "pages")]) == 0
    page = (tmp_path / "pages" / "table3.md").read_text()
    header = _row(page, "model")
    rms = dict(zip(header, _row(page, "RMSNorm")))
    assert rms["Test14 ours Th"] == "-" and rms["Test14 ours Py"] == "-" and rms["runs Th"] == "not run"
    assert "None of these runs has either codebase's norm settings" in page and "make table3" in page


def test_a_time_page_of_fp32_cuda_runs_says_whether_they_ran_on_tf32(tmp_path: Path):
    """The paper's fp32 GPU times had no TF32; ours on CUDA do by default (train.tf32): the page says so."""
    for norm, tf32 in (("layernorm", True), ("rmsnorm", False)):
        write_run(tmp_path / "runs", "convpool", norm, 1, final={"error": 10.0},
                  env={"torch": "2.14.1", "device": "cuda:0", "device_name": "H100", "precision": "fp32", "tf32": tf32})
    assert report_main([str(tmp_path / "runs"), "--table", "table10", "--out", str(tmp_path / "pages")]) == 0
    page = (tmp_path / "pages" / "table10.md").read_text()
    assert "TF32: 1 of our 2 fp32 CUDA runs ran their products on TF32 cores" in page
    write_run(tmp_path / "cpu", "convpool", "layernorm", 1, final={"error": 10.0})
    assert report_main([str(tmp_path / "cpu"), "--table", "table10", "--out", str(tmp_path / "cpu_pages")]) == 0
    assert "TF32" not in (tmp_path / "cpu_pages" / "table10.md").read_text()


def test_a_run_stopped_by_the_wall_clock_cap_is_marked_capped_in_the_table_and_the_run_list(tmp_path: Path):
    """A run train.max_minutes stopped trained fewer steps than its recipe: every table that shows its group
    says so, and its group's run list too; a run that ran its steps is not marked."""
    import json

    from rmsnorm_repro.report.aggregate import group_runs, load_runs
    from rmsnorm_repro.report.tables import runs_cell

    capped = write_run(tmp_path / "runs", "rnnsearch", "l2norm", 1, final={"test14_bleu": 1.7})
    summary = json.loads((capped / "summary.json").read_text())
    (capped / "summary.json").write_text(json.dumps({**summary, "steps": 40, "stopped_by": "train.max_minutes"}))
    write_run(tmp_path / "runs", "rnnsearch", "l2norm", 2, final={"test14_bleu": 60.0})
    write_run(tmp_path / "runs", "rnnsearch", "layernorm", 1, final={"test14_bleu": 60.0})
    assert report_main([str(tmp_path / "runs"), "--table", "table2", "--out", str(tmp_path / "pages")]) == 0
    page = (tmp_path / "pages" / "table2.md").read_text()
    header = _row(page, "model")
    l2, ln = dict(zip(header, _row(page, "L2-Norm"))), dict(zip(header, _row(page, "LayerNorm")))
    assert l2["runs"] == "2; CAPPED: 1 stopped by train.max_minutes (steps 40), not complete" and ln["runs"] == "1"
    assert "- l2norm (completed: 2; CAPPED: 1 stopped by train.max_minutes (steps 40), not complete)" in page
    runs = load_runs(tmp_path / "runs")
    assert sorted(run.capped for run in runs) == [False, False, True]
    assert all("CAPPED" not in runs_cell(g) for g in group_runs([r for r in runs if not r.capped]))


def test_a_page_of_runs_that_shared_the_machine_shows_no_time_of_their_own(tmp_path: Path):
    from rmsnorm_repro.report.aggregate import load_runs
    from rmsnorm_repro.report.tables import render_page

    for norm in ("layernorm", "rmsnorm"):
        write_run(tmp_path / "runs", "transformer", norm, 1, s_per_1k=300.0, final={"test14_bleu": 20.0})
    runs = load_runs(tmp_path / "runs")
    alone = render_page("table4", runs, "runs", {}, tmp_path)
    shared = render_page("table4", runs, "runs", {}, tmp_path, own_clock=False)
    assert "time ours" in _row(alone, "model") and "time ours" not in _row(shared, "model")
    assert "they shared the machine, so their own clocks are not comparable" in shared
