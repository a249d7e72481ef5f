"""`make demo` says what it is about to do before it starts: its runs, sweeps, place and time."""
from __future__ import annotations

from pathlib import Path

from rmsnorm_repro.campaigns import demo


def test_demo_says_its_runs_sweeps_place_and_time_before_it_starts(tmp_path: Path, monkeypatch, capsys):
    from rmsnorm_repro.bench import steps

    ran = []
    monkeypatch.setattr(demo, "run_sweep", lambda s, *args: ran.append(s.name) or (0, 1.5))
    monkeypatch.setattr(demo, "write_report", lambda out, timings, damaged: out / "REPORT.md")
    # the real side-by-side steps, two rounds of one (the demo's rounds until a 5% speed-up is decidable take minutes)
    side_by_side = steps.side_by_side
    monkeypatch.setattr(steps, "side_by_side", lambda tasks, norms, scale, overrides, how="":
                        side_by_side(tasks, norms, scale, overrides, 2, 1, 2, how))
    assert demo.main(["--out", str(tmp_path / "mini")]) == 0
    captured = capsys.readouterr()
    measured = demo.load_speed(tmp_path / "mini")
    assert {task: sorted(m.times_ms) for task, m in measured.items()} == {
        task: ["layernorm", "prmsnorm", "rmsnorm"] for task in demo.TASK_ORDER}
    # 36 rnnsearch (6 norms x 6 seeds) + 8 transformer (4 x 2) + 10 reader (5 x 2) + 8 retrieval (4 x 2)
    # + 36 convpool (6 x 6) + 4 table3 (2 norms x 2 codebases x 1 seed)
    minutes = sum(demo.EXPECTED_MINUTES.values())
    assert captured.out.startswith(f"demo: 102 runs in 6 sweeps (rnnsearch, transformer, reader, retrieval, convpool, "
                                   f"rnnsearch-table3) into {tmp_path / 'mini' / 'runs'}, 2 at a time, "
                                   f"about {minutes:.0f} minutes")
    assert ran == [s.name for s in demo.SWEEPS]
    assert "demo: reader done in 0.0 min" in captured.err and "so far, about" in captured.err  # the bar
    # a second start estimates from the times this machine took (and times nothing again here)
    monkeypatch.setattr(steps, "side_by_side", lambda *args, **kwargs: {})
    assert demo.main(["--out", str(tmp_path / "mini"), "--only", "reader"]) == 0
    assert f"demo: 10 runs in 1 sweeps (reader) into {tmp_path / 'mini' / 'runs'}, 2 at a time, about 0 minutes" \
        in capsys.readouterr().out  # 1.5 s last time


# Seeds per claim, from the measured spreads ------------------------------------------------------------
from rmsnorm_repro.report.claims import Claim  # noqa: E402

SPREADS = demo.load_spreads()


def test_the_committed_spreads_cover_every_claim_the_demo_plans():
    assert SPREADS, "results/mini/spreads.json: the spreads the demo's seeds were chosen from"
    for entry in SPREADS.values():
        for label, spread in entry.items():
            assert set(spread) == {"metric", "sd", "n", "mean"} and spread["n"] >= 2 and spread["sd"] >= 0, label
    names = {s.name for s in demo.SWEEPS}
    assert all(plan.sweep is None or plan.sweep in names for plan in demo.CLAIMS)


def test_every_claim_judged_at_mini_gets_from_its_sweep_the_seeds_a_50_percent_chance_needs():
    """Seeds per claim are read from SWEEPS: a claim the page judges has at least the seeds its measured
    spreads need (claim_power >= 50%); one it does not judge says why, with the seeds it would need."""
    judged = 0
    for plan in demo.CLAIMS:
        decision = demo.decide(plan, SPREADS)
        sweep = next((s for s in demo.SWEEPS if s.name == plan.sweep), None)
        assert decision.seeds == (sweep.seeds if sweep else 0) and decision.measured, plan
        if decision.not_judged is None:
            judged += 1
            assert decision.needed is not None and sweep.seeds >= decision.needed and decision.power >= 0.5, plan
        else:
            assert decision.not_judged.startswith("not judged at mini: at the measured spread"), plan
    assert judged >= 4  # Figure 1 per step, Figure 7, Table 2's L2-Norm and CIFAR's direction at least


def test_a_claim_the_demo_cannot_afford_reads_not_judged_with_its_reason_and_numbers():
    spreads = {"reader": {"layernorm": {"metric": "error", "sd": 0.03, "n": 3, "mean": 0.15},
                          "rmsnorm": {"metric": "error", "sd": 0.03, "n": 3, "mean": 0.14}}}
    plan = demo.ClaimPlan("reader: RMSNorm's", "reader", "match", (("rmsnorm", "layernorm"),), 0.01, "reader")
    decision = demo.decide(plan, spreads)
    assert decision.needed is None and "more than 20 seeds a side" in decision.not_judged
    claims = [Claim("reader: RMSNorm's test error matches LayerNorm's (within 0.01)", "cannot tell", "LayerNorm 0.15"),
              Claim("Fig. 1 (per second): LayerNorm's lead", "holds", "x"),
              Claim("Table 4: the Transformer", "holds", "y")]
    out = demo.apply_decisions(claims, [decision], shared=2)
    assert [c.verdict for c in out] == ["not judged at mini", "not judged at mini", "holds"]
    assert out[0].numbers.endswith("Measured: LayerNorm 0.15") and "shared the machine" in out[1].numbers
    assert demo.apply_decisions(claims, [], shared=1)[1].verdict == "holds"  # one run at a time: its clocks compare


def test_the_demo_sets_no_wall_clock_cap_unless_asked(tmp_path, monkeypatch):
    commands = []
    monkeypatch.setattr(demo, "run_logged", lambda command, log, threads: commands.append(command) or (0, 1.0))
    demo.run_sweep(demo.SWEEPS[0], tmp_path, tmp_path, 2, None)
    demo.run_sweep(demo.SWEEPS[0], tmp_path, tmp_path, 2, 30.0)
    assert not any(a.startswith("train.max_minutes") for a in commands[0]) and "train.max_minutes=30" in commands[1]
    assert "seed=1,2,3,4,5,6" in commands[0] and "norm=none,layernorm,l2norm,weightnorm,rmsnorm,prmsnorm" in commands[0]
