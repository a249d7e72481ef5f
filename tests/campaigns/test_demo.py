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
    # 12 rnnsearch (6 norms x 2 seeds) + 8 transformer + 5 reader + 4 retrieval + 6 convpool + 16 table3 + 2 fig3 + 4 fig4
    minutes = sum(demo.EXPECTED_MINUTES.values())
    assert captured.out.startswith(f"demo: 57 runs in 8 sweeps (rnnsearch, transformer, reader, retrieval, convpool, "
                                   f"rnnsearch-table3, rnnsearch-fig3, rnnsearch-fig4) into {tmp_path / 'mini' / 'runs'}, 2 at a time, "
                                   f"about {minutes:.0f} minutes")
    assert ran == [s.name for s in demo.SWEEPS]
    assert "demo: reader done in 0.0 min" in captured.err and "so far, about" in captured.err  # the bar
    # a second start estimates from the times this machine took (and times nothing again here)
    monkeypatch.setattr(steps, "side_by_side", lambda *args, **kwargs: {})
    assert demo.main(["--out", str(tmp_path / "mini"), "--only", "reader"]) == 0
    assert f"demo: 5 runs in 1 sweeps (reader) into {tmp_path / 'mini' / 'runs'}, 2 at a time, about 0 minutes" \
        in capsys.readouterr().out  # 1.5 s last time
