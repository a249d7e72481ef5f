"""Long commands say what they are about to do and show how far they are: the count of a sweep's
runs, `make demo`'s plan line and its bar (a real sweep's lines: tests/report/test_compare.py)."""
from __future__ import annotations

import json
import time
from pathlib import Path

from omegaconf import OmegaConf

from rmsnorm_repro.campaigns import demo
from rmsnorm_repro.report import sweep


def test_job_count_multiplies_the_swept_values():
    assert sweep.job_count({"norm": "layernorm,rmsnorm", "seed": "range(3)", "optim.lr": "0.1"}) == (6, ["norm", "seed"])
    assert sweep.job_count({"seed": "1"}) == (1, [])


def test_demo_says_its_runs_sweeps_place_and_time_before_it_starts(tmp_path: Path, monkeypatch, capsys):
    from rmsnorm_repro.bench import steps

    ran = []
    monkeypatch.setattr(demo, "run_sweep", lambda s, *args: ran.append(s.name) or (0, 1.5))
    monkeypatch.setattr(demo, "write_report", lambda out, timings: out / "REPORT.md")
    # the real side-by-side steps, one of each (the demo's 3 rounds x 4 take a minute or two)
    side_by_side = steps.side_by_side
    monkeypatch.setattr(steps, "side_by_side", lambda tasks, norms, scale, overrides, rounds, count:
                        side_by_side(tasks, norms, scale, overrides, 1, 1))
    assert demo.main(["--out", str(tmp_path / "mini")]) == 0
    captured = capsys.readouterr()
    times, _ = demo.load_speed(tmp_path / "mini")
    assert {task: sorted(t) for task, t in times.items()} == {
        task: ["layernorm", "prmsnorm", "rmsnorm"] for task in demo.TASK_ORDER}
    # 8 rnnsearch (4 norms x 2 seeds) + 8 transformer + 5 reader + 4 retrieval + 6 convpool + 2 fig3 + 2 fig4
    minutes = sum(demo.EXPECTED_MINUTES.values())
    assert captured.out.startswith(f"demo: 35 runs in 7 sweeps (rnnsearch, transformer, reader, retrieval, convpool, "
                                   f"rnnsearch-fig3, rnnsearch-fig4) into {tmp_path / 'mini' / 'runs'}, 2 at a time, "
                                   f"about {minutes:.0f} minutes")
    assert ran == [s.name for s in demo.SWEEPS]
    assert "demo: reader done in 0.0 min" in captured.err and "so far, about" in captured.err  # the bar
    # a second start estimates from the times this machine took (and times nothing again here)
    monkeypatch.setattr(steps, "side_by_side", lambda *args: {})
    assert demo.main(["--out", str(tmp_path / "mini"), "--only", "reader"]) == 0
    assert f"demo: 5 runs in 1 sweeps (reader) into {tmp_path / 'mini' / 'runs'}, 2 at a time, about 0 minutes" \
        in capsys.readouterr().out  # 1.5 s last time


def test_the_timed_bar_moves_with_the_clock_within_a_step_and_ends_full(monkeypatch):
    monkeypatch.setattr(sweep.TimedBar, "TICK_S", 0.01)
    with sweep.TimedBar({"a": 100.0, "b": 50.0}, "test") as bar:
        with bar.step("a"):
            time.sleep(0.1)
            assert 0 <= bar.bar.n < 100  # seconds of clock, capped at the step's estimate
        assert bar.bar.n == 100
        with bar.step("b"):
            pass
        assert bar.bar.n == bar.bar.total == 150


def test_make_small_says_its_runs_place_and_time_before_it_starts(tmp_path: Path, monkeypatch, capsys):
    from rmsnorm_repro.campaigns import small

    ran, timed = [], []
    monkeypatch.setattr(small, "run_logged", lambda command, log, threads: ran.append(command) or (0, 2.0))
    monkeypatch.setattr(small, "write_report", lambda out, timings: out / "REPORT.md")
    monkeypatch.setattr(small, "measure_speed", lambda *args: timed.append(args))
    monkeypatch.setattr(small, "REFERENCE_RUNS", tmp_path / "no-committed-runs")
    (tmp_path / "small" / "runs" / "rnnsearch").mkdir(parents=True)  # as the sweep would leave it
    args = ["--out", str(tmp_path / "small"), "--seeds", "1,2", "--jobs", "2", "--threads", "1", "--precision", "fp32"]
    assert small.main(args) == 0
    out = capsys.readouterr().out
    # 2 models x 4 norms x 2 seeds; each model's 8 runs two at a time: 4 rounds of RUN_MINUTES
    expected = 2 * 4 * small.RUN_MINUTES
    assert (f"small: 16 runs (rnnsearch and transformer x none, layernorm, rmsnorm, prmsnorm x seeds 1,2) into "
            f"{tmp_path / 'small' / 'runs'}, 2 at a time with 1 thread(s) each, fp32, on ") in out
    assert (f"; about {expected:.0f} minutes: rnnsearch {small.RUN_MINUTES:.1f} min a run (no run timed yet: the "
            "recipe's estimate), 8 to train") in out
    assert len(ran) == 2 and len(timed) == 1 and timed[0][2] == "small"  # then the side-by-side step times

    # two runs of today's recipe finished in 10 minutes each, one of an earlier recipe (other steps) in 30: it is
    # finished, but times nothing; rnnsearch's plan is the 5 left, 3 rounds of 10 minutes
    recipe = small.recipe_values("rnnsearch")
    for norm, seed, steps, wall_s in (("none", 1, recipe["train.steps"], 600.0), ("layernorm", 1, recipe["train.steps"], 600.0),
                                      ("none", 2, 2 * recipe["train.steps"], 1800.0)):
        run = tmp_path / "small" / "runs" / "rnnsearch" / f"{norm}-p1.0-s{seed}"
        run.mkdir()
        config = OmegaConf.create({"task": {"name": "rnnsearch"}, "norm": {"name": norm, "p": 1.0}, "seed": seed})
        for key, value in {**recipe, "train.steps": steps}.items():
            OmegaConf.update(config, key, value)
        (run / "config.yaml").write_text(OmegaConf.to_yaml(config))
        (run / "summary.json").write_text(json.dumps({"task": "rnnsearch", "norm": norm, "p": 1.0, "seed": seed,
                                                      "status": "completed", "steps": steps, "final": {},
                                                      "wall_s": wall_s, "env": {"device_name": "AMD EPYC"}}))
    assert small.main(args) == 0
    out = capsys.readouterr().out
    assert (f"about {30 + 4 * small.RUN_MINUTES:.0f} minutes: rnnsearch 10.0 min a run (mean of 2 earlier runs here, "
            "AMD EPYC), 5 to train") in out

    # every run of rnnsearch finished (records kept without their weights, as results/small/runs): its sweep
    # is not started at all, so nothing a sweep job could refuse or retrain (another precision) is asked of it
    for norm in small.NORMS:
        for seed in (1, 2):
            run = tmp_path / "small" / "runs" / "rnnsearch" / f"{norm}-p1.0-s{seed}"
            run.mkdir(exist_ok=True)
            (run / "config.yaml").write_text(f"task: {{name: rnnsearch}}\nnorm: {{name: {norm}, p: 1.0}}\nseed: {seed}\n")
            (run / "summary.json").write_text(json.dumps({"task": "rnnsearch", "norm": norm, "p": 1.0, "seed": seed,
                                                          "status": "completed", "steps": 100, "final": {},
                                                          "wall_s": 600.0}))
    ran.clear()
    assert small.main(args + ["--only", "rnnsearch"]) == 0
    assert ran == [] and "every run under" in capsys.readouterr().out
