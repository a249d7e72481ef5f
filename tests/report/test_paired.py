"""The side-by-side speed design (report/paired.py, bench/steps.balanced_order): balanced order, paired
log ratios with rounds as blocks, the smallest decidable speed-up, and speed.json's two versions."""
import json
import math
import re

import numpy as np
import pytest

from rmsnorm_repro.report import paired
from rmsnorm_repro.bench.steps import balanced_order


def test_every_norm_takes_every_place_and_every_pair_both_orders():
    for norms in (["a", "b"], ["a", "b", "c"]):
        orders = [balanced_order(norms, r) for r in range(2 * len(norms))]
        for norm in norms:  # each place equally often
            assert sorted(order.index(norm) for order in orders) == sorted(list(range(len(norms))) * 2)
        for x in norms:     # each pair in both orders equally often
            for y in norms:
                if x != y:
                    assert sum(o.index(x) < o.index(y) for o in orders) == len(orders) // 2
    assert ["".join(balanced_order(["a", "b"], r)) for r in range(4)] == ["ab", "ba", "ba", "ab"]  # ABBA


def test_rounds_are_the_units_the_issue_s_three_rounds_cannot_tell():
    """Three rounds whose speed-ups are 16.2%, 14.2% and 5.0% (results/small's old Transformer numbers, taken
    by round): the paired interval holds 0, where 12 steps bootstrapped one by one had said "holds"."""
    ln = [100.0] * 12
    x = [100.0 * (1 - g) for g in (0.162, 0.142, 0.050) for _ in range(4)]
    sp = paired.paired_speedup(x, ln, steps_per_round=4)
    assert sp.rounds == 3 and sp.steps == 4
    assert sp.lo < 0 < sp.hi
    d = np.log(np.array(x) / 100.0).reshape(3, 4).mean(axis=1)
    low, high = np.mean(d) + np.array([-1, 1]) * 4.302653 * np.std(d, ddof=1) / math.sqrt(3)  # t(0.975, 2)
    assert (sp.lo, sp.hi) == pytest.approx((1 - math.exp(high), 1 - math.exp(low)))
    assert sp.resolution > 0.05  # three rounds this noisy cannot decide a 5% difference


def test_pairing_removes_what_the_batches_and_rounds_share():
    """Step times that vary 2x with the batch and the round but keep X 10% faster on each: decided, tightly."""
    rng = np.random.default_rng(1)
    load = np.repeat(rng.uniform(1.0, 2.0, 8), 4) * rng.uniform(0.8, 1.2, 32)
    ln, x = 100.0 * load, 90.0 * load * np.exp(rng.normal(0, 0.01, 32))
    sp = paired.paired_speedup(list(x), list(ln), 4)
    assert 0.08 < sp.lo and sp.hi < 0.12 and sp.resolution < 0.05
    assert paired.decides({"layernorm": list(ln), "rmsnorm": list(x)}, 4)


def test_unequal_or_broken_rounds_say_what_is_wrong():
    with pytest.raises(ValueError, match="whole rounds of 4"):
        paired.paired_speedup([1.0] * 8, [1.0] * 7, 4)
    with pytest.raises(ValueError, match="2 or more rounds"):
        paired.paired_speedup([1.0] * 4, [1.0] * 4, 4)


def test_speed_json_version_2_round_trips_and_version_1_still_reads(tmp_path):
    m = {"transformer": paired.Measured({"layernorm": [2.0, 2.1], "rmsnorm": [1.9, 2.0]}, 1, " (here)")}
    paired.write_speed(tmp_path / "speed.json", m)
    assert json.loads((tmp_path / "speed.json").read_text())["version"] == paired.SPEED_VERSION
    assert paired.read_speed(tmp_path / "speed.json") == m
    (tmp_path / "old.json").write_text(json.dumps({"how": " (earlier)", "times_ms": {"rnnsearch": {"layernorm": [2.0]}}}))
    old = paired.read_speed(tmp_path / "old.json")
    assert old == {"rnnsearch": paired.Measured({"layernorm": [2.0]}, None, " (earlier)")}  # read, never judged
    assert paired.read_speed(tmp_path / "absent.json") == {}


def test_interleaved_rounds_take_turns_step_by_step_on_the_same_batch(monkeypatch):
    """bench.steps.run(interleave=True): every norm's model built once a round, then ABBA step by step, step s
    of round r on batch s + r * steps for each norm; the record keeps round order (paired by index)."""
    from rmsnorm_repro.bench import steps

    calls = []

    class FakeRun:
        def __init__(self, task, norm, *args, **kwargs):
            self.norm, self.batch = norm, ["train.batch_size=4"]
            self.norms = type("N", (), {"describe": lambda self: {"impl_used": None}})()

        def step(self, step):
            calls.append((self.norm, step))
            return (2.0 if self.norm == "layernorm" else 1.0), 0.5

    monkeypatch.setattr(steps, "StepRun", FakeRun)
    monkeypatch.setattr(steps, "paper_ratios", lambda task: {})
    rows = steps.run(["reader"], ["layernorm", "rmsnorm"], rounds=2, steps=2, interleave=True, log=lambda *a: None)
    timed = [c for c in calls if c[1] > 0]
    assert timed == [("layernorm", 1), ("rmsnorm", 1), ("rmsnorm", 2), ("layernorm", 2),   # round 0: A B, then B A
                     ("rmsnorm", 3), ("layernorm", 3), ("layernorm", 4), ("rmsnorm", 4)]   # round 1 starts with B
    assert {row["norm"]: row["times_ms"] for row in rows} == {"layernorm": [2.0] * 4, "rmsnorm": [1.0] * 4}


def test_a_damaged_speed_json_is_named_never_read_as_absent(tmp_path):
    """A broken speed.json must not silently drop the speed verdicts: its reader raises, saying why."""
    (tmp_path / "speed.json").write_text('{"version": 2, "times_ms": ')
    with pytest.raises(paired.SpeedUnreadable, match="JSONDecodeError"):
        paired.read_speed(tmp_path / "speed.json")


@pytest.mark.parametrize("change,message", [
    (lambda d: d["times_ms"]["rnnsearch"]["rmsnorm"].__setitem__(1, float("nan")),
     "rnnsearch: rmsnorm's step 2 is nan ms; want a time > 0"),
    (lambda d: d["times_ms"]["rnnsearch"]["layernorm"].__setitem__(0, -3.0),
     "rnnsearch: layernorm's step 1 is -3.0 ms; want a time > 0"),
    (lambda d: d["times_ms"]["rnnsearch"]["layernorm"].__setitem__(0, float("inf")), "step 1 is inf ms"),
    (lambda d: d["times_ms"]["rnnsearch"]["layernorm"].__setitem__(0, 0), "step 1 is 0.0 ms"),
    (lambda d: d["steps_per_round"].__setitem__("rnnsearch", 0),
     "rnnsearch: steps_per_round is 0; want a whole number >= 1"),
    (lambda d: d["steps_per_round"].__setitem__("rnnsearch", 1.5), "steps_per_round is 1.5"),
    (lambda d: d["steps_per_round"].__setitem__("rnnsearch", True), "steps_per_round is True"),
    (lambda d: d["times_ms"]["rnnsearch"]["rmsnorm"].pop(), "rnnsearch: rmsnorm has 5 step times, layernorm 6"),
    (lambda d: d["steps_per_round"].__setitem__("rnnsearch", 4), "rnnsearch: 6 step times are not whole rounds of 4"),
])
def test_a_speed_json_with_a_time_or_round_that_cannot_be_is_named(tmp_path, change, message):
    """A NaN step read "faster: does not hold" (exit 0), steps_per_round 0 was a ZeroDivisionError (audit f15a5c5)."""
    data = {"version": 2, "how": {"rnnsearch": " (test)"}, "steps_per_round": {"rnnsearch": 2},
            "times_ms": {"rnnsearch": {"layernorm": [10.0, 10.1, 9.9, 10.0, 10.2, 9.8],
                                       "rmsnorm": [9.0, 9.1, 8.9, 9.0, 9.2, 8.8]}}}
    change(data)
    (tmp_path / "speed.json").write_text(json.dumps(data))
    with pytest.raises(paired.SpeedUnreadable, match=re.escape(message)):
        paired.read_speed(tmp_path / "speed.json")
