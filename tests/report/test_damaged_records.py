"""Fault injection into run records (docs/reliability.md): every reading command leaves a damaged run
out and names it in one line, fills a key an older run did not record by the rule a resume uses, and
never gives a verdict that the damage changed."""
from __future__ import annotations

import json
from pathlib import Path

import yaml

from rmsnorm_repro.report import aggregate, compare
from rmsnorm_repro.report.__main__ import main as report_main
from runner_fixtures.fake_runs import write_run


def four_runs(root: Path) -> list[Path]:
    """layernorm and rmsnorm x seeds 1, 2, every config with train.precision (as today's runs write it)."""
    runs = []
    for norm, error in (("layernorm", 0.30), ("rmsnorm", 0.20)):
        for seed in (1, 2):
            run = write_run(root, "reader", norm, seed, final={"error": error + seed / 1000})
            config = yaml.safe_load((run / "config.yaml").read_text())
            config["train"]["precision"] = "fp32"
            (run / "config.yaml").write_text(yaml.safe_dump(config))
            summary = json.loads((run / "summary.json").read_text())
            (run / "summary.json").write_text(json.dumps({**summary, "data": "synthetic", "scale": "mini"}))
            runs.append(run)
    return runs


def drop_key(run: Path, section: str, key: str) -> None:
    config = yaml.safe_load((run / "config.yaml").read_text())
    del config[section][key]
    (run / "config.yaml").write_text(yaml.safe_dump(config))


def test_a_key_older_runs_did_not_record_does_not_split_their_groups(tmp_path: Path):
    runs = four_runs(tmp_path)
    for run in runs[1:]:
        drop_key(run, "train", "precision")  # recorded before train.precision existed: they trained in fp32
    c = compare.compare([str(tmp_path)])
    assert [(g.label, len(g.runs)) for g in c.groups] == [("norm=layernorm", 2), ("norm=rmsnorm", 2)]
    assert [(g.label, len(g.runs)) for g in aggregate.group_runs(aggregate.load_runs(tmp_path))] == [
        ("layernorm", 2), ("rmsnorm", 2)]


def test_a_run_without_config_yaml_joins_its_group_from_its_summary(tmp_path: Path):
    runs = four_runs(tmp_path)
    (runs[3] / "config.yaml").unlink()
    c = compare.compare([str(tmp_path)])
    assert [(g.label, len(g.runs)) for g in c.groups] == [("norm=layernorm", 2), ("norm=rmsnorm", 2)]
    groups = aggregate.group_runs(aggregate.load_runs(tmp_path))
    assert [(g.label, len(g.runs)) for g in groups] == [("layernorm", 2), ("rmsnorm", 2)]


def test_a_bad_byte_in_one_metrics_file_leaves_that_run_out_named(tmp_path: Path, capsys):
    runs = four_runs(tmp_path)
    with open(runs[0] / "metrics.jsonl", "ab") as f:
        f.write(b'{"step": 200, "loss": "\xff"}\n')
    assert report_main(["compare", str(tmp_path), "--out", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert "left out 1 run(s)" in err and "1 run(s) could not be read" in err
    page = (tmp_path / "out" / "compare.md").read_text()
    assert "metrics.jsonl: line 11 is not valid UTF-8" in page


def test_table_all_on_runs_that_fit_no_page_is_one_line_and_not_0(tmp_path: Path, capsys):
    four_runs(tmp_path)  # task "reader"-named runs of no page's setting: a made-up recipe
    for run in tmp_path.iterdir():
        summary = json.loads((run / "summary.json").read_text())
        (run / "summary.json").write_text(json.dumps({**summary, "task": "tiny"}))
    assert report_main([str(tmp_path), "--table", "all", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "fit none of the pages" in err


def test_a_run_whose_lock_is_held_is_shown_as_training_not_by_its_old_summary(tmp_path: Path, capsys):
    import fcntl

    runs = four_runs(tmp_path)
    started = tmp_path / "reader-rmsnorm-new"  # a fresh run, its summary not yet written
    started.mkdir()
    (started / "config.yaml").write_text((runs[3] / "config.yaml").read_text())
    with open(runs[3] / ".lock", "a") as resumed, open(started / ".lock", "a") as fresh:
        fcntl.flock(resumed, fcntl.LOCK_EX)  # runs[3] is being extended: its summary.json is of the last session
        fcntl.flock(fresh, fcntl.LOCK_EX)
        assert report_main(["compare", str(tmp_path), "--out", str(tmp_path / "out")]) == 0
    page = (tmp_path / "out" / "compare.md").read_text()
    assert f"`../{runs[3].name}` (training)" in page and f"`../{started.name}` (training)" in page
    assert "| norm=rmsnorm | 1 |" in page.replace("**", "")
    assert aggregate.load_runs(tmp_path)[3].status == "completed"  # the lock is released: its numbers count again


def test_a_file_given_as_the_runs_folder_is_named_as_a_file(tmp_path: Path, capsys):
    (tmp_path / "runs.txt").write_text("x")
    assert report_main([str(tmp_path / "runs.txt"), "--table", "table2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is a file, not a folder of runs" in err


def test_a_folder_name_that_is_not_utf8_is_shown_escaped(tmp_path: Path):
    import os

    runs = four_runs(tmp_path / "runs")
    os.rename(runs[3], os.fsdecode(bytes(tmp_path / "runs") + b"/bad\xffname"))
    assert report_main(["compare", str(tmp_path / "runs"), "--out", str(tmp_path / "out")]) == 0
    assert "`../runs/bad\\xffname`" in (tmp_path / "out" / "compare.md").read_text()


def test_a_page_names_the_runs_folder_above_it_by_its_name(tmp_path: Path):
    from rmsnorm_repro.report.tables import relative_to_page

    runs = tmp_path / "runs"
    (runs / "report").mkdir(parents=True)
    assert relative_to_page(runs, runs / "report") == "../../runs"  # not ".."
    assert relative_to_page(runs / "a", runs / "report") == "../a"


def test_the_report_leaves_a_damaged_run_out_names_it_and_exits_1(tmp_path: Path, capsys):
    from runner_fixtures.fake_runs import write_fake_runs

    root = write_fake_runs(tmp_path / "runs")
    damaged = next(p for p in sorted(root.iterdir()) if p.name.startswith("transformer-layernorm"))
    (damaged / "summary.json").write_text('{"status": "comp')
    assert report_main([str(root), "--table", "table4", "--out", str(tmp_path / "out")]) == 1
    err = [line for line in capsys.readouterr().err.splitlines() if "left out" in line]
    assert len(err) == 1 and damaged.name in err[0] and "not valid JSON" in err[0]
    page = (tmp_path / "out" / "table4.md").read_text()
    assert f"Left out as damaged" in page and damaged.name in page and str(tmp_path) not in page
