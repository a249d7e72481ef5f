"""What the campaigns share: the bar over a campaign's sweeps."""
from __future__ import annotations

import time

from rmsnorm_repro.campaigns import common


def test_the_timed_bar_moves_with_the_clock_within_a_step_and_ends_full(monkeypatch):
    monkeypatch.setattr(common.TimedBar, "TICK_S", 0.01)
    with common.TimedBar({"a": 100.0, "b": 50.0}, "test") as bar:
        with bar.step("a"):
            time.sleep(0.1)
            assert 0 <= bar.bar.n < 100  # seconds of clock, capped at the step's estimate
        assert bar.bar.n == 100
        with bar.step("b"):
            pass
        assert bar.bar.n == bar.bar.total == 150
