"""The verdict rules (report/rules.py): a zero-width interval decides nothing, and `power` / `seeds_for_power`
simulate the rule itself (the seeds they name give 80%, not the ~50% of "the interval would decide")."""
from __future__ import annotations

import numpy as np

from rmsnorm_repro.report import rules
from rmsnorm_repro.report.aggregate import Stat as S


def test_a_zero_width_interval_decides_nothing():
    # the committed mini "RNNSearch RMSNorm matches LayerNorm: holds" from 100.00 +- 0 vs 100.00 +- 0
    verdict, why = rules.equivalence(S(100.0, 0.0, 2), S(100.0, 0.0, 2), 1.0, " BLEU")
    assert verdict == rules.UNSURE and "zero-width interval" in why
    verdict, why = rules.direction(S(0.0, 0.0, 2), S(50.0, 0.0, 2), below=True)
    assert verdict == rules.UNSURE and "zero-width interval" in why
    assert rules.non_inferiority(S(20.0, 0.0, 2), S(20.0, 0.0, 2), 1.0)[0] == rules.UNSURE
    # a spread on one side is enough for an interval
    assert rules.equivalence(S(100.0, 0.0, 3), S(100.0, 0.1, 3), 1.0)[0] == rules.HOLDS


def test_seeds_for_power_gives_80_percent_by_simulating_the_rule():
    sd_x, sd_b = 0.7, 0.06  # the small tier's pRMSNorm and LayerNorm BLEU spreads, margin 1
    n = rules.seeds_for_power("match", sd_x, sd_b)
    assert n is not None and rules.power("match", n, sd_x, sd_b) >= 0.80 > rules.power("match", n - 1, sd_x, sd_b)
    # the power is that of the rule itself: direct simulation with n normal seeds a side through `equivalence`
    rng = np.random.default_rng(1)
    held = [rules.equivalence(S.of(rng.normal(0, sd_x, n)), S.of(rng.normal(0, sd_b, n)), 1.0)[0] == rules.HOLDS
            for _ in range(1500)]
    assert abs(np.mean(held) - rules.power("match", n, sd_x, sd_b)) < 0.04
    # a direction: power at the effect claimed, rising with it
    assert rules.power("direction", 3, 0.5, 0.5, effect=2.0) > rules.power("direction", 3, 0.5, 0.5, effect=0.5)
    assert rules.seeds_for_power("match", 30.0, 30.0) is None  # more than 50 seeds a side


def test_power_note_states_power_at_the_seeds_run_and_the_seeds_for_80_percent():
    note = rules.power_note("match", S(35.06, 0.70, 2), S(35.94, 0.06, 2), 0.0, 1.0)
    assert note.startswith("power at 2 seeds a side and these spreads (no difference): ")
    assert "seeds a side give 80%" in note


def test_fig3_trend_uses_only_its_own_residuals():
    verdict, change, interval, df = rules.p_trend([0.0625, 0.0625, 0.5, 1.0], [20.0, 20.1, 20.05, 20.0], 1.0)
    assert df == 2 and verdict == rules.HOLDS and abs(change) < 0.2
    assert rules.p_trend([0.25, 1.0], [20.0, 20.0], 1.0)[2] is None  # a line through 2 points: no noise estimate
