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


def test_table3s_codebase_runs_change_no_claim_but_table3s(tmp_path):
    """Table 3's runs (codebase=theano|pytorch) beside Table 2's in one folder: the claims stay Table 2's, and
    Table 3's own claim (Theano's speed-up above PyTorch's) is stated as not reproducible here."""
    runs = rnnsearch_runs(tmp_path, {"layernorm": [22.5, 22.7], "rmsnorm": [22.4, 22.5], "prmsnorm": [22.3, 22.6]})
    before = [(c.claim, c.verdict, c.numbers) for c in claims.judge(runs)]
    for norm, bleu in (("rmsnorm", 10.0), ("prmsnorm", 9.0)):
        for seed in (1, 2):
            run = write_run(tmp_path, "rnnsearch", norm, seed, p=0.0625 if norm == "prmsnorm" else 1.0,
                            final={"test_bleu": bleu}, best={"bleu": bleu}, model={"hidden": 8, "codebase_run": True})
            config = yaml.safe_load((run / "config.yaml").read_text())
            (run / "config.yaml").write_text(yaml.safe_dump({**config, "codebase": "theano"}))
    assert len(aggregate.load_runs(tmp_path)) == len(runs) + 4
    after = claims.judge(aggregate.load_runs(tmp_path))
    assert [(c.claim, c.verdict, c.numbers) for c in after if not c.claim.startswith("Table 3")] == before
    table3, = [c for c in after if c.claim.startswith("Table 3")]
    assert table3.verdict == claims.UNSURE and "34.0% (Theano) vs 11.0% (PyTorch)" in table3.numbers
    assert "both columns run in the suite's PyTorch code" in table3.numbers


def _groups(tmp_path: Path, task: str, values: dict[str, list], metric: str = "test_bleu",
            status: dict[tuple[str, int], str] | None = None) -> list[aggregate.Group]:
    """Groups of `task` runs, one per value (None: a run that diverged); status: (norm, seed) -> status."""
    for norm, seeds in values.items():
        for seed, value in enumerate(seeds, 1):
            run_status = "diverged" if value is None else (status or {}).get((norm, seed), "completed")
            write_run(tmp_path, task, norm, seed, p=0.0625 if norm == "prmsnorm" else 1.0, status=run_status,
                      final={} if value is None else {metric: value}, best={} if value is None else {"bleu": value})
    return aggregate.group_runs(aggregate.load_runs(tmp_path))


def test_a_group_with_a_diverged_or_capped_seed_cannot_hold_a_match(tmp_path):
    """Survivors only: 1 of 3 RMSNorm seeds diverged; the 2 left match LayerNorm, which must not read "holds"."""
    groups = _groups(tmp_path / "a", "transformer", {"layernorm": [30.0, 30.1, 30.2], "rmsnorm": [30.1, 30.0, None]})
    claim = claims.match_claims(groups, ("transformer",))[0]
    assert claim.verdict == claims.UNSURE and "rmsnorm seed 3 diverged" in claim.numbers
    assert "cannot hold on the survivors alone" in claim.numbers
    # a run stopped by the wall-clock cap is incomplete too, and named
    groups = _groups(tmp_path / "b", "transformer", {"layernorm": [30.0, 30.1, 30.2], "rmsnorm": [30.1, 30.0, 30.2]})
    capped = next(run for g in groups for run in g.runs if g.norm == "layernorm" and run.seed == 2)
    capped.summary["stopped_by"] = "train.max_minutes"
    assert capped.capped
    claim = claims.match_claims(groups, ("transformer",))[0]
    assert claim.verdict == claims.UNSURE and "layernorm seed 2 stopped by the wall-clock cap" in claim.numbers
    capped.summary["stopped_by"] = "early_stopping"
    assert claims.match_claims(groups, ("transformer",))[0].verdict == claims.HOLDS


def test_a_group_at_the_metric_s_bound_is_not_judged(tmp_path):
    groups = _groups(tmp_path, "rnnsearch", {"layernorm": [100.0, 100.0], "rmsnorm": [100.0, 100.0]})
    claim = claims.match_claims(groups, ("rnnsearch",))[0]
    assert claim.verdict == claims.UNSURE and "LayerNorm at the ceiling (100)" in claim.numbers
    groups = _groups(tmp_path / "cifar", "convpool", {"layernorm": [0.0, 0.0], "rmsnorm": [1.0, 1.2]}, metric="error")
    claim = claims.match_claims(groups, ("convpool",))[0]
    assert claim.verdict == claims.UNSURE and "at the floor" in claim.numbers


def test_fails_to_train_needs_an_interval_below_the_threshold(tmp_path):
    """Table 4's Baseline at 7.38 +- 5.18 BLEU against LayerNorm's 33.70 learned something: not "holds"."""
    groups = _groups(tmp_path / "a", "transformer", {"none": [3.72, 11.04], "layernorm": [30.07, 37.33]})
    claim = claims.transformer_baseline_claim(groups)
    assert claim.verdict == claims.UNSURE and "Baseline minus 0.5 x LayerNorm" in claim.numbers
    groups = _groups(tmp_path / "b", "transformer", {"none": [2.0, 2.5, 2.2], "layernorm": [30.0, 31.0, 30.5]})
    assert claims.transformer_baseline_claim(groups).verdict == claims.HOLDS
    groups = _groups(tmp_path / "c", "transformer", {"none": [25.0, 25.5, 25.2], "layernorm": [30.0, 31.0, 30.5]})
    assert claims.transformer_baseline_claim(groups).verdict == claims.FAILS
    # at BLEU 0 on every seed the Baseline still fails to train; a diverged seed is named
    groups = _groups(tmp_path / "d", "transformer", {"none": [0.0, 0.0, None], "layernorm": [30.0, 31.0, 30.5]})
    claim = claims.transformer_baseline_claim(groups)
    assert claim.verdict == claims.HOLDS and "none seed 3 diverged" in claim.numbers


def test_table10_batchnorm_and_weightnorm_rows_and_test17(tmp_path):
    groups = _groups(tmp_path / "cifar", "convpool", {"batchnorm": [8.2, 8.3, 8.25], "weightnorm": [10.5, 10.6, 10.4],
                                                     "layernorm": [10.4, 10.5, 10.6]}, metric="error")
    found = {c.claim: c for c in claims.match_claims(groups, ("convpool",))}
    bn = found["convpool: BatchNorm's test error % is below LayerNorm's (Table 10: 8.25% vs 10.49%)"]
    assert bn.verdict == claims.HOLDS and "power at 3 seeds a side" in bn.numbers
    assert found["convpool: WeightNorm's test error % is below LayerNorm's (Table 10: 8.28% vs 10.49%)"].verdict \
        == claims.UNSURE
    groups = _groups(tmp_path / "wmt", "transformer", {"layernorm": [27.7, 27.6], "rmsnorm": [27.7, 27.8]},
                     metric="test17_bleu")
    test17 = claims.test17_claims(groups, ("transformer",))
    assert test17[0].claim == "transformer: RMSNorm's Test17 BLEU matches LayerNorm's (within 1 BLEU)"
    assert test17[0].verdict == claims.HOLDS
    assert claims.test17_claims(_groups(tmp_path / "none", "transformer", {"layernorm": [1.0, 2.0]}), ("transformer",)) == []


def test_fig3_is_judged_on_pRMSNorm_s_own_noise(tmp_path):
    """The committed mini "Fig. 3: does not hold" came from pooling other norms' tight seeds into pRMSNorm's:
    on its own (wide) noise the same points cannot tell."""
    for seed, bleu in ((1, 5.7), (2, 65.5)):
        write_run(tmp_path, "rnnsearch", "prmsnorm", seed, p=0.0625, best={"bleu": bleu})
    for p in (0.25, 1.0):
        write_run(tmp_path, "rnnsearch", "prmsnorm", 1, p=p, best={"bleu": 99.0}, model={"hidden": 8, "p": p})
    claim = claims.p_claim(aggregate.group_runs(aggregate.load_runs(tmp_path)))
    assert claim.verdict == claims.UNSURE and "pRMSNorm's own residuals" in claim.numbers


def test_fig4_instability_by_counts_of_divergence(tmp_path):
    for norm, statuses in (("layernorm", ["diverged"] * 5), ("rmsnorm", ["completed"] * 5)):
        for seed, status in enumerate(statuses, 1):
            write_run(tmp_path / "five", "rnnsearch", norm, seed, status=status, best={"bleu": 20.0},
                      model={"init_center": 0.2})
    claim = claims.instability_claim(aggregate.group_runs(aggregate.load_runs(tmp_path / "five")))
    assert claim.verdict == claims.HOLDS and "LayerNorm 5 of 5, RMSNorm 0 of 5" in claim.numbers
    assert claims.divergence_verdict(2, 0, 2, 2)[0] == claims.UNSURE  # two seeds a side never decide (p = 1/6)
    assert claims.divergence_verdict(0, 5, 5, 5)[0] == claims.FAILS


def test_the_claims_table_ends_with_how_many_false_verdicts_chance_would_give(tmp_path):
    lines = claims.markdown([claims.Claim("Table 1, X: y", claims.HOLDS, ""), claims.Claim("a", claims.HOLDS, ""),
                             claims.Claim("b", claims.UNSURE, "")], "here")
    assert lines[-1].startswith("2 claims judged by the noise rules (Table 1's computed rows aside): 1 hold, 0 do not "
                                "hold, 1 cannot tell.") and "up to 0.2 of these verdicts could be false" in lines[-1]
    # a claim a tier does not judge is not counted as judged, and the line says so
    lines = claims.markdown([claims.Claim("a", claims.HOLDS, ""), claims.Claim("c", "not judged at mini", "why")], "here")
    assert lines[-1].startswith("1 claims judged by the noise rules (Table 1's computed rows aside): 1 hold, 0 do not "
                                "hold, 0 cannot tell (1 more not judged here: the reason in each row).")


def test_demo_report_only_judges_speed_by_size_and_states_table3(tmp_path):
    """`python -m rmsnorm_repro.campaigns.demo --report-only` on runs and a speed.json: the speed claims' size
    lines, Table 3's, and the chance line reach the page."""
    from rmsnorm_repro.campaigns import demo

    out = tmp_path / "mini"
    write_fake_runs(out / "runs" / "rnnsearch")
    for norm in ("layernorm", "rmsnorm"):
        for seed in (1, 2):
            run = write_run(out / "runs" / "rnnsearch-table3", "rnnsearch", norm, seed, final={"test_bleu": 20.0},
                            model={"hidden": 8, "codebase_run": True})
            config = yaml.safe_load((run / "config.yaml").read_text())
            (run / "config.yaml").write_text(yaml.safe_dump({**config, "codebase": "theano"}))
    (out / "speed.json").write_text(json.dumps({
        "version": 2, "how": {"rnnsearch": " (one process, 1 thread(s), Test CPU 9000, 2026-12-07, scale=mini)"},
        "steps_per_round": {"rnnsearch": 2},
        "times_ms": {"rnnsearch": {"layernorm": [10.0, 10.1, 9.9, 10.0, 10.2, 9.8],
                                   "rmsnorm": [9.0, 9.2, 8.9, 9.0, 9.1, 8.8]}}}))
    assert demo.main(["--report-only", "--out", str(out)]) == 0
    text = (out / "REPORT.md").read_text()
    assert "| rnnsearch: rmsnorm is faster per step than LayerNorm | **holds** |" in text
    assert ("| rnnsearch: rmsnorm's speed-up is at least 50% of the paper's (24.7%, Table 2, TITAN X (Pascal)) | "
            "**does not hold** | measured 10.0% [8.7%, 11.3%] vs 12.3%") in text
    assert "Table 3: RMSNorm's speed-up is larger in the Theano column than in the PyTorch one | **cannot tell**" in text
    assert "claims judged by the noise rules" in text
