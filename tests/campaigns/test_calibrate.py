"""Each verdict rule's error rates (campaigns/calibrate.py): every false verdict rate at most 10% with the groups'
spreads equal and 2x and 3x apart, at the seeds the campaigns run today; docs/verdicts.md is what they give."""
from __future__ import annotations

from dataclasses import replace

from rmsnorm_repro.campaigns import calibrate, demo, small
from rmsnorm_repro.paths import repo_dir


def test_every_rule_s_false_verdict_rate_is_at_most_10_percent_at_unequal_spreads():
    result = calibrate.calibrate(draws=800, speed_draws=100)
    assert {tier for tier, *_ in result["rules"]} == {t.name for t in result["tiers"]}
    for tier, claims, rule, n, rates in result["rules"]:
        for ratio, r in rates.items():
            assert r["false"] <= 0.10, (tier, claims, ratio, r)
    assert all(r["false"] <= 0.10 for r in result["speed"].values()), result["speed"]
    assert set(next(iter(result["rules"]))[4]) == set(calibrate.SPREADS) == {1, 2, 3}


def test_the_tiers_are_read_from_the_campaigns(monkeypatch):
    mini, small_tier, paper = calibrate.tiers()
    seeds = {s.name: len(dict(o.split("=", 1) for o in s.overrides).get("seed", "1").split(",")) for s in demo.SWEEPS}
    assert mini.tasks["rnnsearch"][1] == seeds["rnnsearch"] and mini.tasks["reader"][1] == seeds["reader"]
    assert "l2norm" in mini.tasks["rnnsearch"][0] and mini.table3
    assert small_tier.tasks == {task: (small.NORMS, len(small.DEFAULT_SEEDS.split(","))) for task in small.TASKS}
    assert not small_tier.fig3_ps and not small_tier.fig4_seeds  # make small trains neither
    assert paper.tasks["rnnsearch"][1] == 3 and len(paper.fig3_ps) == 10
    # a campaign that changes its seeds changes the page
    monkeypatch.setattr(demo, "SWEEPS", tuple(replace(s, seeds=3) if s.name == "reader" else s
                                             for s in demo.SWEEPS))
    assert calibrate.tiers()[0].tasks["reader"][1] == 3


def test_docs_verdicts_md_is_what_the_campaigns_give_today():
    """docs/verdicts.md regenerated (python -m rmsnorm_repro.campaigns.calibrate) equals the committed page."""
    committed = (repo_dir() / "docs" / "verdicts.md").read_text(encoding="utf-8")
    assert calibrate.markdown(calibrate.calibrate()) == committed, "run python -m rmsnorm_repro.campaigns.calibrate"
