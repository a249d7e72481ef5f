"""Issue 15, report: broken run files are one clear error naming the file, empty and unfinished runs
are counted as such, and step times carry their spread (the median's 95% interval) into the
speed-ups and the speed claims ("within noise" when the interval holds 0)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from scipy import stats

from rmsnorm_repro.report.paired import Measured
from rmsnorm_repro.report import aggregate, claims, rules, tables
from rmsnorm_repro.report.__main__ import main as report_main

ENV = {"torch": "2.14.1", "device": "cpu", "threads": 1}


def write_run(root: Path, norm: str, seed: int, *, task: str = "transformer", s: float = 100.0,
              ci: list[float] | None = None, status: str = "completed", final: dict | None = None,
              name: str | None = None) -> Path:
    """A run directory as the runner writes it; `ci` adds the new timing keys (median, quartiles, CI)."""
    run = root / (name or f"{task}-{norm}-s{seed}")
    run.mkdir(parents=True)
    config = {"seed": seed, "task": {"name": task}, "norm": {"name": norm, "p": 1.0}, "data": {"name": "synthetic"},
              "scale": {"name": "mini"}, "train": {"steps": 100}}
    (run / "config.yaml").write_text(yaml.safe_dump(config))
    (run / "metrics.jsonl").write_text("".join(json.dumps({"step": k, "wall_s": k * 0.1, "loss": 5.0 / k}) + "\n"
                                               for k in (10, 20, 30)))
    summary = {"task": task, "norm": norm, "p": 1.0, "seed": seed, "status": status, "steps": 100,
               "step_ms_median": s, "step_ms_mean": s * 1.3, "s_per_1k_steps": s,
               "final": {"test_bleu": 20.0} if final is None else final, "best": {}, "env": ENV}
    if ci is not None:
        summary.update({"step_ms_q1": s * 0.97, "step_ms_q3": s * 1.04, "s_per_1k_steps_ci95": ci})
    (run / "summary.json").write_text(json.dumps(summary))
    return run


def page(root: Path, name: str = "table4", tmp: Path | None = None) -> str:
    return tables.render_page(name, aggregate.load_runs(root), str(root), {}, tmp or root)


def row(text: str, model: str) -> list[str]:
    line = next(line for line in text.splitlines() if line.startswith(f"| {model} |"))
    return [c.strip() for c in line.strip("|").split("|")]


# Item 10: broken summaries, metrics and configs --------------------------------------------------

@pytest.mark.parametrize("content,what", [
    ("[]", "a list"), ("null", "null"), ('"completed"', "a string"),
    ('{"status": "completed", "steps": 5, "final": "oops"}', '"final" is a string'),
    ('{"status": "completed", "steps": 5, "final": {}, "best": [1, 2]}', '"best" is a list'),
    ('{"status": "completed", "steps": 5, "final": {}, "env": 3}', '"env" is a number'),
    ('{"status": "completed", "steps": "many", "final": {}}', '"steps" is a string'),
    ('{"status": "completed", "steps": 5, "final": {}, "s_per_1k_steps_ci95": [1]}', '"s_per_1k_steps_ci95"'),
])
def test_summary_of_the_wrong_shape_is_one_line_naming_the_file(tmp_path, capsys, content, what):
    """Before: `[]`, `null` or a non-dict "final" ended in an AttributeError traceback (rc 1). Now that run
    is left out, named in one line, and the page is written without it (exit 1: its numbers lack a run)."""
    write_run(tmp_path / "runs", "layernorm", 1)
    bad = write_run(tmp_path / "runs", "rmsnorm", 1) / "summary.json"
    bad.write_text(content)
    assert report_main([str(tmp_path / "runs"), "--table", "table4", "--out", str(tmp_path / "out"),
                        "--figures", str(tmp_path / "fig")]) == 1
    named = [line for line in capsys.readouterr().err.splitlines() if "left out" in line]
    assert len(named) == 1 and str(bad) in named[0] and what in named[0]


def test_undecodable_metrics_or_config_names_the_file(tmp_path, capsys):
    run = write_run(tmp_path / "runs", "rmsnorm", 1, task="rnnsearch")
    with open(run / "metrics.jsonl", "ab") as f:
        f.write(b'{"step": 40, "loss": 1.0, "note": "\xff"}\n')
    # fig1 reads the metrics (the last training loss and the curves)
    args = [str(tmp_path / "runs"), "--table", "fig1", "--out", str(tmp_path / "out"), "--figures", str(tmp_path / "f")]
    assert report_main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(run / "metrics.jsonl") in err and "line 4" in err
    (run / "metrics.jsonl").write_text('{"step": 10, "loss": 1.0}\n[1, 2]\n7\n')  # valid JSON, not objects: skipped
    assert aggregate.load_runs(tmp_path / "runs")[0].points("loss") == [(10, 10, 1.0)]
    (run / "config.yaml").write_text("task: [unclosed\n")
    assert report_main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(run / "config.yaml") in err


def test_a_status_only_summary_is_not_counted_as_a_run_with_numbers(tmp_path):
    """Before: the row said 2 runs while its mean was over 1 value."""
    write_run(tmp_path, "layernorm", 1, final={"test_bleu": 20.0})
    empty = write_run(tmp_path, "layernorm", 2)
    (empty / "summary.json").write_text('{"status": "completed"}')
    (group,) = aggregate.group_runs(aggregate.load_runs(tmp_path))
    assert len(group.completed) == 1 and group.stat("test_bleu").n == 1
    assert group.status_note() == "1 of 2 (1 without numbers)"
    assert row(page(tmp_path), "LayerNorm")[1] == "1 of 2 (1 without numbers)"


def test_runs_in_progress_are_listed(tmp_path):
    """Before: a run without summary.json was silently left out of the report."""
    write_run(tmp_path, "layernorm", 1)
    for seed in (2, 3):
        (write_run(tmp_path, "layernorm", seed) / "summary.json").unlink()
    (tmp_path / "crashed-at-start" / ".hydra").mkdir(parents=True)  # Hydra's files only: not a run
    (tmp_path / "crashed-at-start" / ".hydra" / "config.yaml").write_text("task: {name: transformer}\n")
    runs = aggregate.load_runs(tmp_path)
    assert len(runs) == 1 and [r.path.name for r in runs.in_progress] == ["transformer-layernorm-s2",
                                                                          "transformer-layernorm-s3"]
    text = page(tmp_path)
    assert "in progress: 2 runs: transformer-layernorm-s2, transformer-layernorm-s3" in text
    assert "convpool" not in text
    # runs of another task are not listed on this task's page
    (write_run(tmp_path, "rmsnorm", 1, task="convpool") / "summary.json").unlink()
    assert "transformer-layernorm-s2" in page(tmp_path) and "convpool-rmsnorm-s1" not in page(tmp_path)


# Item 11: step times with their spread, speed-ups with an interval --------------------------------

def test_old_summaries_still_read_without_an_interval(tmp_path):
    write_run(tmp_path, "layernorm", 1, s=100.0)
    write_run(tmp_path, "rmsnorm", 1, s=80.0)
    groups = {g.norm: g for g in aggregate.group_runs(aggregate.load_runs(tmp_path))}
    assert groups["rmsnorm"].time_interval() is None
    assert aggregate.speedup_interval(groups["rmsnorm"], groups["layernorm"]) is None
    assert row(page(tmp_path), "RMSNorm")[-1] == "80.0 (20.0%)"


def test_a_single_run_shows_its_median_and_interval(tmp_path):
    write_run(tmp_path, "layernorm", 1, s=100.0, ci=[95.0, 105.0])
    write_run(tmp_path, "rmsnorm", 1, s=80.0, ci=[78.0, 82.5])
    groups = {g.norm: g for g in aggregate.group_runs(aggregate.load_runs(tmp_path))}
    assert groups["rmsnorm"].time_interval() == aggregate.Interval(78.0, 82.5)
    gain = aggregate.speedup_interval(groups["rmsnorm"], groups["layernorm"])
    assert 0.10 < gain.lo < 0.20 < gain.hi < 0.30 and not gain.holds_zero
    text = page(tmp_path)
    assert row(text, "LayerNorm")[-1] == "100.0 [95.0, 105.0]"
    assert row(text, "RMSNorm")[-1] == f"80.0 [78.0, 82.5] (20.0% [{100 * gain.lo:.1f}, {100 * gain.hi:.1f}])"
    assert "95% interval" in text


def test_a_speedup_whose_interval_holds_zero_is_within_noise(tmp_path):
    write_run(tmp_path, "layernorm", 1, s=100.0, ci=[95.0, 105.0])
    write_run(tmp_path, "rmsnorm", 1, s=97.0, ci=[90.0, 106.0])
    write_run(tmp_path, "prmsnorm", 1, s=120.0, ci=[112.0, 130.0])
    text = page(tmp_path)
    assert row(text, "RMSNorm")[-1].endswith("within noise)") and "(3.0% [" in row(text, "RMSNorm")[-1]
    assert "within noise" not in row(text, "pRMSNorm")[-1] and "(-20.0% [" in row(text, "pRMSNorm")[-1]
    # the runs' own times are shown in the claim, never judged: they ran at different times
    speed = {c.claim: c for c in claims.speed_claims(aggregate.group_runs(aggregate.load_runs(tmp_path)))}
    for name in ("rmsnorm", "prmsnorm"):
        claim = speed[f"transformer: {name} is faster per step than LayerNorm"]
        assert claim.verdict == claims.UNSURE and "not measured side by side" in claim.numbers
        assert "shown, not judged" in claim.numbers


def test_seeds_widen_the_interval_by_their_spread(tmp_path):
    """Over seeds the interval is a bootstrap of the mean over runs (each run drawn from its own interval)."""
    for seed, s in ((1, 100.0), (2, 101.0), (3, 99.0)):
        write_run(tmp_path / "tight", "layernorm", seed, s=s, ci=[s - 1.0, s + 1.0])
    for seed, s in ((1, 80.0), (2, 120.0), (3, 100.0)):
        write_run(tmp_path / "spread", "layernorm", seed, s=s, ci=[s - 1.0, s + 1.0])
    tight, = aggregate.group_runs(aggregate.load_runs(tmp_path / "tight"))
    spread, = aggregate.group_runs(aggregate.load_runs(tmp_path / "spread"))
    a, b = tight.time_interval(), spread.time_interval()
    assert a.lo < 100.0 < a.hi and a.hi - a.lo < 3.0
    assert b.lo < 100.0 < b.hi and b.hi - b.lo > 15.0
    assert spread.time_interval() == b  # deterministic: the report does not change between runs of it
    text = page(tmp_path / "spread")
    assert row(text, "LayerNorm")[-1] == f"100.0 ± 20.0 [{b.lo:.1f}, {b.hi:.1f}]"


def test_speed_verdicts_come_from_steps_timed_side_by_side(tmp_path):
    """Runs that say RMSNorm is 30% faster decide nothing; the side-by-side steps do, both ways."""
    for seed in (1, 2):
        write_run(tmp_path, "layernorm", seed, s=100.0 + seed, ci=[97.0 + seed, 103.0 + seed])
        write_run(tmp_path, "rmsnorm", seed, s=70.0 + seed, ci=[68.0 + seed, 72.0 + seed])
        write_run(tmp_path, "prmsnorm", seed, s=70.0 + seed, ci=[68.0 + seed, 72.0 + seed])
    groups = aggregate.group_runs(aggregate.load_runs(tmp_path))
    times = {"layernorm": [100.0, 101.0, 99.0, 100.5, 99.5, 100.2],
             "rmsnorm": [90.0, 91.0, 89.0, 90.5, 89.5, 90.2],      # 10% faster, clearly
             "prmsnorm": [99.0, 102.0, 98.0, 101.5, 100.0, 100.1]}  # no difference
    measured = {"transformer": Measured(times, 2, " (test)")}
    speed = {c.claim: c for c in claims.speed_claims(groups, measured)}
    rms = speed["transformer: rmsnorm is faster per step than LayerNorm"]
    assert rms.verdict == claims.HOLDS and "side by side (test): speed-up (T_LN - T_X) / T_LN = 10.0%" in rms.numbers
    assert "from 3 rounds of 2 paired steps; the smallest speed-up it decides" in rms.numbers
    prms = speed["transformer: prmsnorm is faster per step than LayerNorm"]
    assert prms.verdict == claims.UNSURE and "within noise" in prms.numbers
    slower = {"transformer": Measured({"layernorm": times["rmsnorm"], "rmsnorm": times["layernorm"]}, 2, "")}
    # a speed.json of the old fixed-order design is read but judges nothing
    old = {c.claim: c for c in claims.speed_claims(groups, {"transformer": Measured(times, None, "")})}
    assert old["transformer: rmsnorm is faster per step than LayerNorm"].verdict == claims.UNSURE
    assert claims.speed_claims(groups, slower)[1].verdict == claims.FAILS


def test_one_verdict_rule_an_interval_against_the_margin():
    """Equivalence within +-margin from Welch's 90% interval; "cannot tell" names the seeds that would decide."""
    S = aggregate.Stat
    # the interval is scipy's Welch interval of the same seeds
    x, base = np.array([29.9, 30.2, 30.5]), np.array([29.8, 30.0, 30.2])
    welch = stats.ttest_ind(x, base, equal_var=False).confidence_interval(0.90)
    ours = rules.difference_interval(S(x.mean(), x.std(ddof=1), 3), S(base.mean(), base.std(ddof=1), 3), 0.90)
    assert np.allclose(ours, (welch.low, welch.high))
    verdict, why = claims.equivalence(S(30.2, 0.3, 3), S(30.0, 0.2, 3), 1.0, " BLEU")
    assert verdict == claims.HOLDS and "90% interval [-0.26, +0.66] vs +-1 BLEU: inside" in why
    assert claims.equivalence(S(27.0, 0.3, 3), S(30.0, 0.2, 3), 1.0)[0] == claims.FAILS
    verdict, why = claims.equivalence(S(30.2, 0.3, 2), S(30.0, 0.4, 2), 1.0, " BLEU")
    assert verdict == claims.UNSURE and "across an end" in why  # the seeds for 80% power: rules.power_note
    verdict, why = claims.equivalence(S(100.0, 0.0, 2), S(85.12, 21.04, 2), 1.0, " BLEU")  # the old mini "holds"
    assert verdict == claims.UNSURE
    assert claims.equivalence(S(30.0, 0.0, 1), S(30.0, 0.0, 1), 1.0)[0] == claims.UNSURE
    # differences (rmsnorm-report compare): the 95% interval excludes 0, or it is within noise
    assert rules.difference_verdict(S(31.0, 0.1, 3), S(30.0, 0.1, 3), "max") == rules.BETTER
    assert rules.difference_verdict(S(31.0, 0.1, 3), S(30.0, 0.1, 3), "min") == rules.WORSE
    assert rules.difference_verdict(S(30.1, 1.0, 3), S(30.0, 1.0, 3), "max") == rules.WITHIN_NOISE
    assert rules.difference_verdict(S(30.1, 1.0, 1), S(30.0, 1.0, 3), "max") == rules.TOO_FEW


# Issue 54: one rule for which keys group runs (record.splits_groups) ---------------------------------
SMALL_RUNS = Path(__file__).resolve().parents[2] / "results" / "small" / "runs" / "rnnsearch"


def _small_runs_plus_a_seed(tmp_path: Path, **changes: object) -> Path:
    """results/small's RNNSearch runs (seeds 1 and 2, written before train.max_loss existed) and a seed 3 of
    rmsnorm and layernorm as today's suite writes it: train.max_loss 1e6, plus `changes` (dotted keys)."""
    import shutil

    root = tmp_path / "rnnsearch"
    # the records of seeds 1-2 (trained before max_loss and allocator existed), not the later seed 3 / p = 0.125
    shutil.copytree(SMALL_RUNS, root, ignore=shutil.ignore_patterns("*-s3", "prmsnorm-p0.125-*"))
    for norm in ("rmsnorm", "layernorm"):
        new = root / f"{norm}-p1.0-s3"
        shutil.copytree(root / f"{norm}-p1.0-s2", new)
        config = yaml.safe_load((new / "config.yaml").read_text())
        config["seed"] = 3
        config["train"]["max_loss"] = 1.0e6
        for key, value in changes.items():
            *parents, leaf = key.split(".")
            node = config
            for part in parents:
                node = node[part]
            node[leaf] = value
        (new / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
        summary = json.loads((new / "summary.json").read_text())
        (new / "summary.json").write_text(json.dumps({**summary, "seed": 3}))
    return root


@pytest.mark.parametrize("changes", [{}, {"data.root": "/elsewhere/multi30k"}, {"allocator": "default"},
                                     {"train.log_every": 5, "train.checkpoint_every": 50}],
                         ids=["max_loss", "data_root", "allocator", "log_and_checkpoint_every"])
def test_a_new_seed_joins_the_old_records_group(tmp_path, changes):
    # record.filled_config gives the old records train.max_loss None (they trained without it); a new run has
    # 1e6: no step of a completed run differs, so the seeds stay one group (they split into n=2 and n=1, and
    # both "RMSNorm matches" claims turned from holds to cannot tell)
    from rmsnorm_repro.report import compare

    runs = aggregate.load_runs(_small_runs_plus_a_seed(tmp_path, **changes))
    sizes = {group.label: len(group.runs) for group in aggregate.group_runs(runs)}
    assert sizes == {"none": 2, "layernorm": 3, "rmsnorm": 3, "prmsnorm p=0.0625": 2}
    assert compare.differing_keys(runs) == ["norm.name"]


def test_an_old_record_without_the_allocator_key_joins_todays_runs(tmp_path):
    root = _small_runs_plus_a_seed(tmp_path)
    for old in root.glob("*-s[12]"):  # recorded before `allocator` existed: filled as "default"; today's: tuned
        config = yaml.safe_load((old / "config.yaml").read_text())
        del config["allocator"]
        (old / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    groups = aggregate.group_runs(aggregate.load_runs(root))
    assert sorted(len(group.runs) for group in groups) == [2, 2, 3, 3]


def test_a_key_that_changes_what_is_trained_still_splits():
    from rmsnorm_repro import record

    assert record.splits_groups("optim.lr") and record.splits_groups("train.steps")
    assert record.splits_groups("data.name") and record.splits_groups("train.precision")
    assert not any(record.splits_groups(key) for key in ("seed", "data.root", "train.max_loss", "allocator",
                                                          "paths.runs_dir", "logger.name", "overrides"))


# Issue 54: a config.yaml is known complete before it is read -----------------------------------------
@pytest.mark.parametrize("cut", ["mid_value", "after_a_header", "seal_line_gone"])
def test_a_cut_config_yaml_of_a_fresh_run_is_named_and_left_out(tmp_path, tiny_cfg, cut):
    from rmsnorm_repro.runner import run

    for seed in (1, 2):
        run(tiny_cfg(f"seed={seed}", "train.steps=2", "train.eval_every=2"), tmp_path / "runs" / f"s{seed}")
    config = tmp_path / "runs" / "s2" / "config.yaml"
    text = config.read_text()
    assert text.splitlines()[-1].startswith("# the config above is complete: sha1 ")
    # `lr: 0.01` cut to `lr: 0.0` is still valid YAML: it read as another run (a group of its own)
    at = {"mid_value": text.index("lr: 0.01") + len("lr: 0.0"), "after_a_header": text.index("train:") + 7,
          "seal_line_gone": text.rstrip("\n").rindex("\n") + 1}[cut]
    config.write_text(text[:at])
    unreadable: list = []
    runs = aggregate.load_runs(tmp_path / "runs", unreadable)
    assert [run.seed for run in runs] == [1]
    assert [path.name for path, _ in unreadable] == ["s2"]
    assert "config.yaml was cut short" in unreadable[0][1] and "\n" not in unreadable[0][1]


def test_an_old_record_cut_after_a_header_is_one_line_not_a_type_error(tmp_path):
    # a config.yaml of a run older than the seal line, cut after `train:`: train is null, and filling in
    # train.compile (record.ADDED_KEYS) raised a TypeError in record.unflatten
    run = write_run(tmp_path, "rmsnorm", 1)
    (run / "config.yaml").write_text("seed: 1\ntrain:\n")
    unreadable: list = []
    assert aggregate.load_runs(tmp_path, unreadable) == []
    [(path, why)] = unreadable
    assert path == run and why.startswith(f"{run / 'config.yaml'}: train holds null") and "cut short" in why
