"""The speed claims (report/speed_claims.py): the size against the paper's speed-up, the speed-up the suite's
own measurements predict, and the machines of the timing and of the runs."""
from __future__ import annotations

from pathlib import Path

from rmsnorm_repro.report import aggregate, speed_claims
from rmsnorm_repro.report.paired import Measured
from rmsnorm_repro.report.rules import FAILS, HOLDS, UNSURE
from runner_fixtures.fake_runs import ENV, write_run

LN = [100.0, 101.0, 99.0, 100.5, 99.5, 100.2, 100.1, 99.9]


def groups_of(root: Path, device_name: str, s_rms: float = 98.0) -> list[aggregate.Group]:
    for seed in (1, 2):
        for norm, s in (("layernorm", 100.0), ("rmsnorm", s_rms)):
            run = write_run(root, "rnnsearch", norm, seed, s_per_1k=s + seed / 10, env={**ENV, "device_name": device_name})
            summary = (run / "summary.json").read_text().replace('"s_per_1k_steps": ',
                                                                 f'"s_per_1k_steps_ci95": [{s - 1}, {s + 1}], "s_per_1k_steps": ')
            (run / "summary.json").write_text(summary)
    return aggregate.group_runs(aggregate.load_runs(root))


def timed(gain: float, machine: str = "AMD EPYC") -> dict[str, Measured]:
    how = f" (one process, 1 thread(s), {machine}, 2026-12-07, scale=mini sizes and batches)"
    jitter = (1.001, 0.999, 1.0, 1.002)  # per round, so the rounds' ratios spread a little
    return {"rnnsearch": Measured({"layernorm": LN, "rmsnorm": [t * (1 - gain) * jitter[i // 2] for i, t in enumerate(LN)]},
                                  2, how)}


def test_the_size_of_the_speed_up_is_judged_against_the_paper_s(tmp_path):
    """A 2% speed-up that surely exists does not make the paper's 24.7% (Table 2): direction holds, size does not."""
    found = {c.claim: c for c in speed_claims.speed_claims(groups_of(tmp_path, "AMD EPYC"), timed(0.02), ("rnnsearch",))}
    direction = found["rnnsearch: rmsnorm is faster per step than LayerNorm"]
    size = found["rnnsearch: rmsnorm's speed-up is at least 50% of the paper's (24.7%, Table 2, TITAN X (Pascal))"]
    assert direction.verdict == HOLDS and size.verdict == FAILS
    assert "measured 2.0% [" in size.numbers and "vs 12.3% (0.5 x the paper's 24.7% on TITAN X (Pascal))" in size.numbers
    found = {c.claim: c for c in speed_claims.speed_claims(groups_of(tmp_path / "b", "AMD EPYC"), timed(0.2),
                                                           ("rnnsearch",))}
    assert found["rnnsearch: rmsnorm's speed-up is at least 50% of the paper's (24.7%, Table 2, TITAN X (Pascal))"
                 ].verdict == HOLDS


def test_the_line_names_both_machines_and_which_clock_it_trusts(tmp_path):
    # the runs' own clocks say RMSNorm is 10% slower; the paired timing, on another CPU, 2% faster
    found = speed_claims.speed_claims(groups_of(tmp_path, "AMD EPYC", s_rms=110.0), timed(0.02, "Intel(R) Xeon(R)"),
                                      ("rnnsearch",))
    line = found[0].numbers
    assert "timed on Intel(R) Xeon(R), the runs trained on AMD EPYC: the verdicts speak for Intel(R) Xeon(R) only" in line
    assert "the runs' own clocks disagree with the paired timing" in line and "trusted: the paired timing" in line
    same = speed_claims.speed_claims(groups_of(tmp_path / "b", "AMD EPYC"), timed(0.02), ("rnnsearch",))[0].numbers
    assert "timed on" not in same and "disagree" not in same and "(shown, not judged)" in same


def test_the_predicted_speed_up_is_the_norm_s_share_times_its_saving():
    """results/speed/profile-rnnsearch-mini-cpu.json: LayerNorm's ops 9.46% of its step; module-cpu.json: RMSNorm's
    module 0.67x, 0.68x and 1.02x LayerNorm's at its three shapes (median 0.68): 9.46% x (1 - 0.68) = 3.0%."""
    value, text = speed_claims.predicted_speedup("rnnsearch", "mini", "rmsnorm")
    ratio = sorted([0.16672 / 0.24941, 1.83290 / 2.69355, 56.9433 / 55.9120])[1]
    assert abs(value - 0.0946 * (1 - ratio)) < 0.001 and "AMD EPYC" in text and "median over shapes" in text
    value, text = speed_claims.predicted_speedup("rnnsearch", "mini", "prmsnorm")
    assert value is not None and "pRMSNorm's time / LayerNorm's" in text
    value, text = speed_claims.predicted_speedup("rnnsearch", "paper", "rmsnorm")
    assert value is None and "not measured at scale=paper" in text


def test_table3_is_stated_as_not_reproducible():
    claim = speed_claims.table3_claim({})
    assert claim.verdict == UNSURE and "34.0% (Theano) vs 11.0% (PyTorch)" in claim.numbers
