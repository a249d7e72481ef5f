"""Each verdict rule's error rates (report/calibrate.py): every false verdict rate at most 10%, at every
tier's seeds and steps (seeded; a few seconds with fewer draws than docs/verdicts.md's)."""
from rmsnorm_repro.report import calibrate


def test_every_rule_s_false_verdict_rate_is_at_most_10_percent():
    rows = calibrate.calibrate(draws=800)
    assert {tier for tier, *_ in rows} == {t.name for t in calibrate.TIERS}
    for tier, rule, claims, rates in rows:
        assert rates["false"] <= 0.10, (tier, rule, rates)

