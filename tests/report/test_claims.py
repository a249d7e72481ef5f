"""The claims as the paper frames them (report/claims.py): directions, non-inferiority, the split a claim
names, and `rmsnorm-report claims RUNS...` on any runs."""
from __future__ import annotations

import json
from pathlib import Path

import yaml

from rmsnorm_repro.report import aggregate, claims
from rmsnorm_repro.report.__main__ import main as report_main
from runner_fixtures.fake_runs import write_fake_runs, write_run

S = aggregate.Stat


def test_a_direction_holds_fails_or_cannot_tell_by_the_95_percent_interval():
    assert claims.direction(S(8.8, 0.2, 3), S(10.5, 0.2, 3), below=True)[0] == claims.HOLDS
    assert claims.direction(S(10.5, 0.2, 3), S(8.8, 0.2, 3), below=True)[0] == claims.FAILS
    assert claims.direction(S(10.4, 1.0, 3), S(10.5, 1.0, 3), below=True)[0] == claims.UNSURE
    verdict, why = claims.direction(S(8.8, 0.0, 1), S(10.5, 0.2, 3), below=True)
    assert verdict == claims.UNSURE and "needs 2+ seeds a side" in why


def rnnsearch_runs(root: Path, bleu: dict[str, list[float]], loss: dict[str, float] | None = None) -> list[aggregate.Run]:
    for norm, values in bleu.items():
        for seed, value in enumerate(values, 1):
            write_run(root, "rnnsearch", norm, seed, p=0.0625 if norm == "prmsnorm" else 1.0,
                      final={"test_bleu": value}, best={"bleu": value}, loss_scale=(loss or {}).get(norm, 1.0) + 0.01 * seed)
    return aggregate.load_runs(root)


def test_l2norm_below_the_others_and_weightnorm_slower(tmp_path):
    runs = rnnsearch_runs(tmp_path, {"none": [21.6, 21.7], "layernorm": [22.5, 22.7], "rmsnorm": [22.4, 22.5],
                                     "l2norm": [20.6, 20.8], "weightnorm": [21.5, 21.6]},
                          loss={"weightnorm": 1.4})
    groups = aggregate.group_runs(runs)
    l2 = claims.l2norm_claim(groups)
    assert l2.verdict == claims.HOLDS and l2.claim == "Table 2: L2-Norm's RNNSearch test BLEU is below the other models'"
    assert "L2-Norm 20.700 ± 0.141 (n=2) vs none 21.650" in l2.numbers
    wn = claims.weightnorm_claim(groups)
    assert wn.verdict == claims.HOLDS and "WeightNorm" in wn.numbers and "mean `loss` over 10-100 steps" in wn.numbers
    # L2-Norm above one of them: decided the other way
    runs = rnnsearch_runs(tmp_path / "b", {"none": [19.0, 19.2], "l2norm": [20.6, 20.8]})
    assert claims.l2norm_claim(aggregate.group_runs(runs)).verdict == claims.FAILS


def test_fig4_needs_two_seeds_a_side_and_judges_non_inferiority(tmp_path):
    for norm, values in (("layernorm", [20.0, 20.4]), ("rmsnorm", [20.1, 20.3])):
        for seed, value in enumerate(values, 1):
            write_run(tmp_path / "two", "rnnsearch", norm, seed, best={"bleu": value}, model={"init_center": 0.2})
    claim = claims.init_centre_claim(aggregate.group_runs(aggregate.load_runs(tmp_path / "two")))
    assert claim.verdict == claims.HOLDS and "90% interval" in claim.numbers and "vs -1" in claim.numbers
    for norm, value in (("layernorm", 20.0), ("rmsnorm", 25.0)):  # one seed a side: a coin flip, not a verdict
        write_run(tmp_path / "one", "rnnsearch", norm, 1, best={"bleu": value}, model={"init_center": 0.2})
    claim = claims.init_centre_claim(aggregate.group_runs(aggregate.load_runs(tmp_path / "one")))
    assert claim.verdict == claims.UNSURE and "2+ seeds a side" in claim.numbers


def test_a_claim_names_the_split_its_metric_was_scored_on(tmp_path):
    for norm in ("layernorm", "rmsnorm"):
        for seed in (1, 2):
            write_run(tmp_path, "transformer", norm, seed, final={"valid_beam_bleu": 30.0 + seed / 10})
    names = [c.claim for c in claims.match_claims(aggregate.group_runs(aggregate.load_runs(tmp_path)), ("transformer",))]
    assert names[0] == "transformer: RMSNorm's valid BLEU matches LayerNorm's (within 1 BLEU)"


def test_claims_subcommand_judges_any_runs(tmp_path, capsys):
    write_fake_runs(tmp_path / "runs")
    speed = tmp_path / "speed.json"
    speed.write_text(json.dumps({"version": 2, "how": {"rnnsearch": " (test)"}, "steps_per_round": {"rnnsearch": 2},
                                 "times_ms": {"rnnsearch": {"layernorm": [10.0, 10.1, 9.9, 10.0, 10.2, 9.8],
                                                              "rmsnorm": [9.0, 9.1, 8.9, 9.0, 9.2, 8.8]}}}))
    out = tmp_path / "claims.md"
    assert report_main(["claims", str(tmp_path / "runs"), "--speed", str(speed), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert text == out.read_text() and text.startswith("| claim | mini on synthetic | numbers |")
    assert "| Table 4: the Transformer without normalization fails to train | **holds** |" in text
    assert "| rnnsearch: rmsnorm is faster per step than LayerNorm | **holds** | side by side (test): speed-up" in text
    assert "reader:" not in text  # no reader runs: no reader claims
    assert "Table 1, " not in text  # Table 1 is computed, not trained: only with --table1


def test_claims_subcommand_refuses_mixed_scales_and_missing_paths(tmp_path, capsys):
    write_fake_runs(tmp_path / "runs")
    other = write_run(tmp_path / "runs", "rnnsearch", "layernorm", 3)
    config = yaml.safe_load((other / "config.yaml").read_text())
    config["scale"] = {"name": "small"}
    (other / "config.yaml").write_text(yaml.safe_dump(config))
    assert report_main(["claims", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err
    assert "runs of several scales or data sets (mini on synthetic; small on synthetic)" in err and "Traceback" not in err
    assert report_main(["claims", str(tmp_path / "nowhere")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_claims_subcommand_names_every_run_it_leaves_out_and_never_tracebacks(tmp_path, capsys):
    """Reliability audit at f15a5c5: a damaged summary or a non-UTF-8 metrics line was a traceback, and a run
    still training dropped out of n without a word."""
    import fcntl

    root = write_fake_runs(tmp_path / "runs") and tmp_path / "runs"
    run = lambda name: next(path for path in sorted(root.iterdir()) if path.name.startswith(name))
    cut, listed, bad_byte, resumed = (run("transformer-layernorm-p1.0-s1"), run("transformer-layernorm-p1.0-s2"),
                                      run("rnnsearch-rmsnorm-p1.0-s2"), run("rnnsearch-layernorm-p1.0-s2"))
    (cut / "summary.json").write_text('{"task": "transformer", "status": ')
    (listed / "summary.json").write_text("[1, 2]")
    metrics = (bad_byte / "metrics.jsonl").read_bytes()
    (bad_byte / "metrics.jsonl").write_bytes(b'{"step": 5, "loss": "\xff"}\n' + metrics)
    fresh = root / "rnnsearch-rmsnorm-new"  # started, no summary yet
    fresh.mkdir()
    (fresh / "config.yaml").write_text((resumed / "config.yaml").read_text())
    with open(resumed / ".lock", "a") as lock, open(fresh / ".lock", "a") as fresh_lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # being extended: its old summary is not this run's result
        fcntl.flock(fresh_lock, fcntl.LOCK_EX)
        assert report_main(["claims", str(root), "--out", str(tmp_path / "claims.md")]) == 1
    out, err = capsys.readouterr()
    assert "Traceback" not in err and out.startswith("| claim | mini on synthetic | numbers |")
    left_out = err.split("left out of these verdicts: ", 1)[1]
    for path, why in ((cut, "not valid JSON"), (listed, "summary.json"), (bad_byte, "metrics.jsonl"),
                      (resumed, "training"), (fresh, "training")):
        assert f"{path} (" in left_out and why in left_out.split(f"{path} (", 1)[1].split(")")[0]
    page = (tmp_path / "claims.md").read_text()
    assert f"`{resumed.name}` (training)" in page and f"`{cut.name}`" in page and str(tmp_path) not in page
    assert "3 run(s) could not be read" in err


def test_claims_subcommand_on_a_file_or_an_unwritable_out_is_one_line(tmp_path, capsys):
    root = write_fake_runs(tmp_path / "runs") and tmp_path / "runs"
    (tmp_path / "runs.txt").write_text("x")
    assert report_main(["claims", str(tmp_path / "runs.txt")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "runs.txt is a file, not a folder of runs" in err
    (tmp_path / "taken").mkdir()
    assert report_main(["claims", str(root), "--out", str(tmp_path / "taken")]) == 2
    out, err = capsys.readouterr()
    assert out.startswith("| claim |") and err.count("\n") == 1
    assert err.startswith("rmsnorm-report claims: cannot write") and "--out" in err
    speed = tmp_path / "speed.json"  # a NaN step read "faster: does not hold", exit 0 (audit f15a5c5)
    speed.write_text('{"version": 2, "how": {"rnnsearch": ""}, "steps_per_round": {"rnnsearch": 1}, '
                     '"times_ms": {"rnnsearch": {"layernorm": [10.0, 10.0], "rmsnorm": [NaN, 9.0]}}}')
    assert report_main(["claims", str(root), "--speed", str(speed)]) == 2
    err = capsys.readouterr().err
    assert "rnnsearch: rmsnorm's step 1 is nan ms; want a time > 0" in err and "Traceback" not in err


def test_table3s_codebase_runs_change_no_claim(tmp_path):
    """Table 3's runs (codebase=theano|pytorch) beside Table 2's in one folder: the claims stay Table 2's."""
    runs = rnnsearch_runs(tmp_path, {"layernorm": [22.5, 22.7], "rmsnorm": [22.4, 22.5], "prmsnorm": [22.3, 22.6]})
    before = [(c.claim, c.verdict, c.numbers) for c in claims.judge(runs)]
    for norm, bleu in (("rmsnorm", 10.0), ("prmsnorm", 9.0)):
        for seed in (1, 2):
            run = write_run(tmp_path, "rnnsearch", norm, seed, p=0.0625 if norm == "prmsnorm" else 1.0,
                            final={"test_bleu": bleu}, best={"bleu": bleu}, model={"hidden": 8, "codebase_run": True})
            config = yaml.safe_load((run / "config.yaml").read_text())
            (run / "config.yaml").write_text(yaml.safe_dump({**config, "codebase": "theano"}))
    assert len(aggregate.load_runs(tmp_path)) == len(runs) + 4
    assert [(c.claim, c.verdict, c.numbers) for c in claims.judge(aggregate.load_runs(tmp_path))] == before
