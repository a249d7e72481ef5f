"""What the campaigns share: the bar over a campaign's sweeps, pRMSNorm's partial widths, the seeds per claim."""
from __future__ import annotations

import time

import pytest

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


# pRMSNorm's partial widths: never narrower than the paper's -------------------------------------------
SCALES = {"rnnsearch": ("mini", "small"), "transformer": ("mini", "small"), "reader": ("mini",),
          "retrieval": ("mini",), "convpool": ("mini",)}


@pytest.mark.slow  # builds every task's model at the paper's size (~1 min)
@pytest.mark.parametrize("task", sorted(SCALES))
def test_prmsnorm_k_is_never_below_the_papers_at_any_scale(task):
    """At each scale the composed model's pRMSNorm statistic takes no fewer features (positions for the CNN)
    than the paper's model at the same place: the widths sorted, k compared place by place."""
    paper = common.partial_widths(task, "paper")
    assert paper and all(k >= 1 for _, k in paper)
    for scale in SCALES[task]:
        mine = common.partial_widths(task, scale)
        assert len(mine) == len(paper), (task, scale, mine, paper)
        assert all(k >= k_paper for (_, k), (_, k_paper) in zip(mine, paper)), (task, scale, mine, paper)


def test_the_mini_transformer_at_the_papers_p_would_be_narrower_than_the_papers_k():
    """The check above can fail: at 6.25% the mini Transformer's k is 4 of 64, the paper's 32 of 512."""
    from rmsnorm_repro.norms.formulas import partial_k

    assert partial_k(64, 0.0625) == 4 < partial_k(512, 0.0625) == 32 <= partial_k(64, 0.5)


# Seeds per claim: the power of report/claims.py's rules ------------------------------------------------
def test_welch_intervals_are_the_claims_rule():
    import numpy as np

    from rmsnorm_repro.report.aggregate import Stat
    from rmsnorm_repro.report.claims import difference_interval

    rng = np.random.default_rng(3)
    x, base = rng.normal(1.0, 2.0, (5, 3)), rng.normal(0.0, 0.5, (5, 4))
    lo, hi = common.welch_intervals(x, base, 0.9)
    for i in range(5):
        want = difference_interval(Stat.of(x[i]), Stat.of(base[i]), 0.9)
        assert (lo[i], hi[i]) == pytest.approx(want)


def test_claim_power_grows_with_seeds_and_falls_with_spread():
    assert common.claim_power("match", (30, 5.0), (30, 5.0), 3, margin=1.0) < 0.05  # mini BLEU spreads: hopeless
    tight = [common.claim_power("match", (0.1, 0.004), (0.1, 0.004), n, margin=0.01) for n in (2, 3, 6)]
    assert tight[0] < tight[1] < tight[2] and tight[2] > 0.9
    assert common.claim_power("below", (2.0, 0.1), (5.0, 0.01), 2) > 0.9  # Figure 1's gap: two seeds decide
    assert common.seeds_for_power("below", (11.0, 2.0), (26.0, 3.0)) == 2
    assert common.seeds_for_power("match", (30, 5.0), (30, 5.0), margin=1.0, most=10) is None
