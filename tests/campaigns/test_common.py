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


def test_the_reports_say_when_runs_ended_from_their_records_not_their_files(tmp_path):
    from rmsnorm_repro.report.aggregate import Run

    def ran(ended):
        return Run(tmp_path, {} if ended is None else {"ended_utc": ended})

    assert common.finished_at([ran("2026-12-08T01:50:09Z"), ran("2026-12-07T20:55:00Z")]) == \
        "the last ended 2026-12-08 01:50 UTC"
    # runs written before ended_utc (or with a value it cannot read) are counted, never dated by a file's mtime
    assert common.finished_at([ran("2026-12-08T01:50:09Z"), ran(None), ran("yesterday")]) == \
        "the last ended 2026-12-08 01:50 UTC (2 of 3 record no end time)"
    assert common.finished_at([ran(None)]).startswith("the runs record no end time")
