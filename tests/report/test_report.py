"""The report: aggregation over seeds, speed-ups, "fails to train", pages, figures and the CLI.

Every test writes small run directories in the format of README "What one run writes" with known
numbers, so the expected aggregates are computed by hand here, not by the code under test.
"""
from __future__ import annotations

import csv
import json
import math
import statistics
from pathlib import Path

import pytest
import yaml

from rmsnorm_repro.campaigns import demo
from rmsnorm_repro.report import aggregate, claims, figures, tables
from rmsnorm_repro.report.__main__ import main as report_main
from runner_fixtures.fake_runs import write_fake_runs, write_run

@pytest.fixture
def fake_runs(tmp_path: Path) -> Path:
    return write_fake_runs(tmp_path / "runs")


def test_stat_is_mean_and_sample_std():
    stat = aggregate.Stat.of([1.0, 2.0, 6.0])
    assert stat.n == 3 and stat.mean == pytest.approx(3.0)
    assert stat.std == pytest.approx(math.sqrt(((1 - 3) ** 2 + (2 - 3) ** 2 + (6 - 3) ** 2) / 2))
    assert aggregate.Stat.of([4.0]) == aggregate.Stat(4.0, 0.0, 1)
    assert aggregate.Stat.of([None, float("nan")]) is None


def test_groups_average_over_seeds_and_speedup_is_the_papers(fake_runs: Path):
    groups = {(g.task, g.norm): g for g in aggregate.group_runs(aggregate.load_runs(fake_runs))}
    ln, rms = groups["rnnsearch", "layernorm"], groups["rnnsearch", "rmsnorm"]
    assert len(ln.runs) == 2 and ln.stat("test_bleu") == aggregate.Stat(21.0, statistics.stdev([20.0, 22.0]), 2)
    assert ln.time().mean == pytest.approx(675.0) and rms.time().mean == pytest.approx(501.5)
    assert aggregate.speedup(rms.time(), ln.time()) == pytest.approx((675.0 - 501.5) / 675.0)
    assert groups["rnnsearch", "prmsnorm"].p == 0.0625 and groups["rnnsearch", "prmsnorm"].label == "prmsnorm p=0.0625"


def test_diverged_group_fails_to_train_but_keeps_its_time(fake_runs: Path):
    groups = {(g.task, g.norm): g for g in aggregate.group_runs(aggregate.load_runs(fake_runs))}
    none = groups["transformer", "none"]
    assert none.fails_to_train and none.stat("test_bleu") is None
    assert none.time().mean == pytest.approx(210.0)  # the paper times its failing baseline too
    assert not groups["transformer", "layernorm"].fails_to_train


def test_partly_diverged_group_averages_completed_runs_only(tmp_path: Path):
    write_run(tmp_path, "reader", "layernorm", 1, final={"error": 0.3})
    write_run(tmp_path, "reader", "layernorm", 2, final={"error": 0.5})
    write_run(tmp_path, "reader", "layernorm", 3, status="diverged", final={"error": 0.9})
    (group,) = aggregate.group_runs(aggregate.load_runs(tmp_path))
    assert not group.fails_to_train
    assert group.stat("error").mean == pytest.approx(0.4) and group.stat("error").n == 2
    assert group.status_note() == "2 of 3 (1 diverged)"


def test_swept_config_key_splits_groups(tmp_path: Path):
    for seed in (1, 2):
        write_run(tmp_path, "rnnsearch", "layernorm", seed, model={"init_center": 0.0})
        write_run(tmp_path, "rnnsearch", "layernorm", seed, model={"init_center": 0.2})
    runs = aggregate.load_runs(tmp_path)
    assert aggregate.swept_keys(runs) == ["task.model.init_center"]
    labels = sorted(g.label for g in aggregate.group_runs(runs))
    assert labels == ["layernorm init_center=0.0", "layernorm init_center=0.2"]
    assert all(len(g.runs) == 2 for g in aggregate.group_runs(runs))


def test_mean_curve_stops_where_a_run_stops(tmp_path: Path):
    a = write_run(tmp_path, "reader", "rmsnorm", 1, curve={"error": [0.9, 0.5, 0.3]})
    write_run(tmp_path, "reader", "rmsnorm", 2, curve={"error": [0.7, 0.3]})
    with open(a / "metrics.jsonl", "a") as f:
        f.write('{"step": 999, "loss"')  # torn last line of a killed run is skipped
    runs = aggregate.load_runs(tmp_path)
    xs, mean, std = aggregate.mean_curve(runs, "error")
    assert xs == [10, 20] and mean == pytest.approx([0.8, 0.4]) and std[0] == pytest.approx(statistics.stdev([0.9, 0.7]))
    xs_wall, _, _ = aggregate.mean_curve(runs, "error", x="wall_s")
    assert xs_wall == pytest.approx([0.1, 0.2])


def test_paper_csvs_hold_the_published_numbers():
    rows = {r["norm"]: r for r in tables.read_paper("table2")}
    assert (rows["rmsnorm"]["test14"], rows["rmsnorm"]["time_mean"], rows["rmsnorm"]["speedup_pct"]) == ("22.4", "501", "24.7")
    t4 = {r["norm"]: r for r in tables.read_paper("table4")}
    assert t4["none"]["note"] == "fails to train" and t4["none"]["test14"] == ""
    # the published speed-ups follow from the published times, (T_LN - T_X) / T_LN, to the paper's rounding
    for name, prefix in (("table2", ""), ("table3", "th_"), ("table3", "py_"), ("table4", ""), ("table6", ""),
                         ("table8", ""), ("table10", "")):
        paper = {r["norm"]: r for r in tables.read_paper(name)}
        t_ln = float(paper["layernorm"][prefix + "time_mean"])
        for norm in ("rmsnorm", "prmsnorm"):
            expected = 100 * (t_ln - float(paper[norm][prefix + "time_mean"])) / t_ln
            assert float(paper[norm][prefix + "speedup_pct"]) == pytest.approx(expected, abs=0.6), (name, norm)
    every = sorted(tables.PAPER_DIR.glob("table*.csv"))
    assert {p.stem for p in every} >= {"table2", "table3", "table4", "table5", "table6", "table7", "table8", "table10"}
    for path in every:
        with open(path, newline="") as f:
            header = next(csv.reader(f))
        assert header[0] in ("model", "method"), path


def test_table2_page_puts_ours_beside_the_paper(fake_runs: Path, tmp_path: Path):
    runs = aggregate.load_runs(fake_runs)
    text = tables.render_page("table2", runs, str(fake_runs), {}, tmp_path)
    assert "device_name=Test CPU 9000" in text and "torch=2.14.1" in text and "scale mini" in text
    assert "compile=False; norm impl: rmsnorm=fused-cpu, prmsnorm=fused-cpu." in text
    row = next(line for line in text.splitlines() if line.startswith("| RMSNorm |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    # model, runs, Test14 paper, ours, Test17 paper, ours, time paper, ours
    assert cells[1] == "2" and cells[2] == "22.4" and cells[3] == "21.0 ± 0.0"
    assert cells[6] == "501 ± 11.8 (24.7%)"
    assert cells[7] == f"501.5 ± 0.7 ({100 * (675 - 501.5) / 675:.1f}%)"
    l2 = next(line for line in text.splitlines() if line.startswith("| L2-Norm |"))
    assert "not run" in l2 and "20.7" in l2
    assert "| pRMSNorm (p=0.0625) |" in text


def test_table4_marks_the_diverged_baseline_fails_to_train(fake_runs: Path, tmp_path: Path):
    text = tables.render_page("table4", aggregate.load_runs(fake_runs), "runs", {}, tmp_path)
    row = next(line for line in text.splitlines() if line.startswith("| Baseline |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1] == "0 of 2 (2 diverged)"
    assert cells[2] == "fails to train" and cells[3] == "fails to train"  # paper and ours
    assert cells[-1].startswith("210.0 ± 0.0 (")


def test_table5_and_table10_pages(fake_runs: Path, tmp_path: Path):
    runs = aggregate.load_runs(fake_runs)
    t5 = tables.render_page("table5", runs, "runs", {}, tmp_path)
    baseline_s = next(line for line in t5.splitlines() if line.startswith("| Baseline | S |"))
    assert "| 7.35 | 3.00 |" in baseline_s and "| 3.04 | 3.00 |" in baseline_s
    t10 = tables.render_page("table10", runs, "runs", {}, tmp_path)
    rms = next(line for line in t10.splitlines() if line.startswith("| RMSNorm |"))
    assert "| 8.83 | 9.00 ± 0.00 |" in rms and "31 ± 0.5 (20.5%)" in rms


def test_unknown_table_and_missing_runs_are_clear_errors(fake_runs: Path, tmp_path: Path, capsys):
    assert report_main([str(fake_runs), "--table", "table99"]) == 2
    assert "unknown table 'table99'" in capsys.readouterr().err
    assert report_main([str(fake_runs), "--table", "table6", "--out", str(tmp_path)]) == 2
    assert "no reader runs" in capsys.readouterr().err
    assert report_main([str(tmp_path / "nothing"), "--table", "table2"]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_cli_writes_pages_and_figures(fake_runs: Path, tmp_path: Path):
    out, figs = tmp_path / "tables", tmp_path / "figures"
    assert report_main([str(fake_runs), "--table", "all", "--out", str(out), "--figures", str(figs)]) == 0
    written = sorted(p.name for p in out.glob("*.md"))
    assert "table2.md" in written and "table4.md" in written and "table10.md" in written and "table6.md" not in written
    assert not list(out.glob(".*"))  # no temporary files left behind
    for name in ("fig1", "fig2", "table9"):
        png = figs / f"{name}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
        assert f"![{name}](../figures/{name}.png)" in "".join(p.read_text() for p in out.glob("*.md"))


def test_figure_with_no_data_is_skipped(tmp_path: Path):
    write_run(tmp_path / "runs", "retrieval", "rmsnorm", 1)  # no rsum logged
    runs = aggregate.load_runs(tmp_path / "runs")
    assert figures.draw("fig6", runs, tmp_path / "fig6.png") is None and not (tmp_path / "fig6.png").exists()
    assert figures.draw("fig5", runs, tmp_path / "fig5.png") is None  # no reader runs at all


def test_demo_report_states_each_claim_with_numbers(tmp_path: Path, monkeypatch):
    out = tmp_path / "mini"
    write_fake_runs(out / "runs" / "rnnsearch")
    # no spreads: every claim as its rule judges it (which the demo cannot afford: tests/campaigns/test_demo.py)
    monkeypatch.setattr(demo, "SPREADS_PATH", tmp_path / "none.json")
    path = demo.write_report(out, {"rnnsearch": (0, 90.0)})
    text = path.read_text()
    claims = {line.split(" | ")[0][2:].replace("\\|", "|"): line for line in text.splitlines()
              if line.startswith("| ") and "**" in line}
    assert "**holds** | 6/6 cells match the paper" in claims["Table 1, RMSNorm: invariances as published"]
    # the Baseline's loss is 1.5x the others' at every step: its mean over steps 10-100 too, on both seeds; the
    # same on both seeds is no noise estimate: a zero-width interval decides nothing
    fig1 = claims["Fig. 1 (per step): normalized RNNSearch's training loss falls faster than the Baseline's"]
    assert "**cannot tell** | mean `loss` over 10-100 steps; layernorm 1.351 ± 0.000 (n=2) vs Baseline 2.027" in fig1
    assert "a zero-width interval" in fig1
    # per second (the runs' own clocks: the Baseline's steps take 400 ms, LayerNorm's 670) the lead reverses
    assert "**holds**" in claims["Fig. 1 (per second): LayerNorm's lead over the Baseline is smaller per second than per step"]
    # LayerNorm's two seeds 2 BLEU apart cannot show a match within 1 BLEU: Welch's 90% interval, se
    # sqrt(1.41^2 / 2 + 0) = 1, df 1 (all the spread on one side), t 6.31
    match = claims["rnnsearch: RMSNorm's test BLEU matches LayerNorm's (within 1 BLEU)"]
    assert "**cannot tell**" in match and "difference +0.00, 90% interval [-6.31, +6.31] vs +-1 BLEU" in match
    match = claims["rnnsearch: pRMSNorm's test BLEU matches LayerNorm's (within 1 BLEU)"]
    assert "**cannot tell** | LayerNorm 21.00 ± 1.41 (n=2), pRMSNorm p=0.0625 20.50 ± 0.00 (n=2)" in match
    assert "**holds** | all 2 Baseline runs diverged" in claims["Table 4: the Transformer without normalization fails to train"]
    speed = claims["rnnsearch: rmsnorm is faster per step than LayerNorm"]  # runs' times: shown, not judged
    assert "**cannot tell** | not measured side by side" in speed and "LayerNorm 675.0 ± 7.1 (n=2)" in speed
    # Table 5's statistics of one seed a side: no interval
    assert "**cannot tell** | layernorm \\|M\\| 1.500 (n=1)" in next(v for k, v in claims.items() if k.startswith("Table 5"))
    # the demo trains no Figure 3 or 4 sweep (their claims need more seeds than it can afford): one p, no shifted init
    assert "**cannot tell**" in next(v for k, v in claims.items() if k.startswith("Fig. 3"))
    assert "**cannot tell**" in next(v for k, v in claims.items() if k.startswith("Fig. 4"))
    assert "| rnnsearch | 0 | 1.5 |" in text  # the sweep's time
    for section in ("## Table 1", "## Table 2:", "## Table 5:", "## Figure 3:", "## Figure 4:"):
        assert section in text, section
    assert "No runs: the `reader` sweep produced none" in text
    assert text.count("![fig1](figures/fig1.png)") == 1 and not (out / "figures" / "fig4.png").exists()
    assert text.count("No runs at mini: no sweep trains this setting") == 2


def test_claims_cannot_tell_when_nothing_learned(tmp_path: Path):
    for p in (0.25, 1.0):
        write_run(tmp_path / "p", "rnnsearch", "prmsnorm", 1, p=p, best={"bleu": 0.2})
    for norm in ("layernorm", "rmsnorm"):
        write_run(tmp_path / "init", "rnnsearch", norm, 1, best={"bleu": 0.1})
    fig3 = claims.p_claim(aggregate.group_runs(aggregate.load_runs(tmp_path / "p")))
    fig4 = claims.init_centre_claim(aggregate.group_runs(aggregate.load_runs(tmp_path / "init")))
    assert fig3.verdict == fig4.verdict == claims.UNSURE
    assert "no run reached BLEU 1" in fig3.numbers and "neither reached BLEU 1" in fig4.numbers


def test_pages_say_how_valid_bleu_was_decoded_and_what_the_reader_read(tmp_path: Path):
    """Audit N4 and N3: a curve's BLEU says greedy or beam; every reader number says its passages."""
    runs_dir = tmp_path / "runs"
    for seed, beam in ((1, 1), (2, 5)):
        run = write_run(runs_dir, "rnnsearch", "rmsnorm", seed, final={"test14_bleu": 20.0}, best={"bleu": 19.0})
        config = yaml.safe_load((run / "config.yaml").read_text())
        config["task"]["decode"] = {"valid_beam": beam}
        (run / "config.yaml").write_text(yaml.safe_dump(config))
    reader = write_run(runs_dir, "reader", "rmsnorm", 1, final={"error": 0.4, "accuracy": 0.6}, best={"accuracy": 0.6})
    config = yaml.safe_load((reader / "config.yaml").read_text())
    config["data"] = {"name": "cnn"}
    (reader / "config.yaml").write_text(yaml.safe_dump(config))
    summary = json.loads((reader / "summary.json").read_text())
    (reader / "summary.json").write_text(json.dumps({**summary, "data_info": {"layout": "questions", "top_sentences": None}}))
    runs = aggregate.load_runs(runs_dir)
    assert "Valid BLEU at evaluation steps (curves, \"best valid BLEU\"): greedy, beam 5" in tables.render_page("fig2", runs, "runs", {}, tmp_path)
    assert "Reader passages (every number on this page): WHOLE CNN documents" in tables.render_page("table6", runs, "runs", {}, tmp_path)


def test_table9_shows_the_authors_training_error_beside_the_eval_mode_one(tmp_path: Path):
    write_run(tmp_path / "runs", "convpool", "rmsnorm", 1, final={"train_batch_error": 12.5, "train_error": 3.25, "error": 9.0})
    text = tables.render_page("table9", aggregate.load_runs(tmp_path / "runs"), "runs", {}, tmp_path)
    header = next(line for line in text.splitlines() if line.startswith("| model"))
    assert "final train error % (training batches, the authors')" in header and "final train error % (eval mode)" in header
    row = next(line for line in text.splitlines() if line.startswith("| rmsnorm"))
    assert "12.5" in row and "3.2" in row
