"""The side-by-side speed design's statistics and its record, speed.json (light: no torch).

bench.steps times norms in balanced order, step s of round r on the same batch for every norm; here a
comparison is judged from the rounds' mean log ratios (rounds as blocks), and speed.json is read and
written. report/claims.speed_claims and campaigns/calibrate use these without building models.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy import stats

from ..atomic import atomic_write_text

# The speed rule: a side-by-side measurement decides "X is faster than LayerNorm" ------------------
SPEED_LEVEL = 0.95      # the speed-up's interval: two-sided 95%
SPEED_POWER = 0.80      # a measurement is long enough when it decides DECIDE with this probability
DECIDE = 0.05           # the speed-up (as a fraction) every measurement must be able to decide


@dataclass(frozen=True)
class PairedSpeedup:
    """X against LayerNorm from paired step times: speed-up (T_LN - T_X) / T_LN = 1 - exp(mean log ratio),
    its SPEED_LEVEL interval from the rounds' mean log ratios (Student t, rounds - 1 df), and `resolution`:
    the smallest speed-up (either way) this measurement decides with SPEED_POWER probability."""
    gain: float
    lo: float
    hi: float
    rounds: int
    steps: int
    resolution: float


def round_log_ratios(times_x: list[float], times_ln: list[float], steps_per_round: int) -> np.ndarray:
    """Each round's mean of log(T_X / T_LN) over its steps, step s of X paired with step s of LayerNorm
    (the same batch); the rounds are the blocks (independent units) of the design."""
    x, ln = np.asarray(times_x, dtype=np.float64), np.asarray(times_ln, dtype=np.float64)
    if len(x) != len(ln) or len(x) % steps_per_round:
        raise ValueError(f"paired step times need equal lengths in whole rounds of {steps_per_round}: "
                         f"got {len(x)} and {len(ln)}")
    return np.log(x / ln).reshape(-1, steps_per_round).mean(axis=1)


def resolution(log_ratios: np.ndarray) -> float:
    """The smallest speed-up a t-interval over these rounds decides with SPEED_POWER probability (the usual
    (t_{1-a/2} + t_power) x standard error), as a fraction; inf with fewer than 2 rounds."""
    n = len(log_ratios)
    if n < 2:
        return math.inf
    se = float(np.std(log_ratios, ddof=1)) / math.sqrt(n)
    shift = (stats.t.ppf(0.5 + SPEED_LEVEL / 2, n - 1) + stats.t.ppf(SPEED_POWER, n - 1)) * se
    return float(1.0 - math.exp(-shift))


def paired_speedup(times_x: list[float], times_ln: list[float], steps_per_round: int) -> PairedSpeedup:
    d = round_log_ratios(times_x, times_ln, steps_per_round)
    if len(d) < 2:
        raise ValueError("a paired speed-up needs 2 or more rounds")
    interval = stats.ttest_1samp(d, 0.0).confidence_interval(SPEED_LEVEL)
    return PairedSpeedup(1.0 - math.exp(float(d.mean())), 1.0 - math.exp(interval.high), 1.0 - math.exp(interval.low),
                         len(d), steps_per_round, resolution(d))


def decides(wall: dict[str, list[float]], steps_per_round: int, base: str = "layernorm") -> bool:
    """Whether every norm's comparison with `base` so far resolves a DECIDE speed-up (see resolution)."""
    others = [n for n in wall if n != base]
    return bool(others) and base in wall and all(
        resolution(round_log_ratios(wall[n], wall[base], steps_per_round)) <= DECIDE for n in others)


# speed.json: what the reports' speed claims are judged on. Version 2: per task, the step times of each
# norm in round order (step s of round r at index r * steps_per_round + s, paired across norms) and
# steps_per_round; version 1 (no "version" key) timed the norms in a fixed order: read, never judged.
SPEED_VERSION = 2


@dataclass(frozen=True)
class Measured:
    """One task's side-by-side step times: {norm: ms}, steps a round (None: a version-1 file), how."""
    times_ms: dict[str, list[float]]
    steps_per_round: int | None
    how: str


class SpeedUnreadable(ValueError):
    """A speed.json that exists but cannot be read as one (its reader names it; never read as absent)."""


def read_speed(path: Path) -> dict[str, Measured]:
    """A speed.json's measurements by task; {} when it is absent; SpeedUnreadable (saying why) when it
    cannot be read. A version-1 file (no "version"; "how" one text for all tasks or one per task) reads
    with steps_per_round None."""
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        times, how = data["times_ms"], data["how"]
        per_round = data.get("steps_per_round", {}) if data.get("version") == SPEED_VERSION else {}
        measured = {task: Measured({n: [float(t) for t in v] for n, v in norms.items()}, per_round.get(task),
                                   how if isinstance(how, str) else str(how.get(task, "")))
                    for task, norms in times.items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
        raise SpeedUnreadable(f"{type(err).__name__}: {err}") from None
    for task, m in measured.items():
        _check_measured(task, m)
    return measured


def _check_measured(task: str, m: Measured) -> None:
    """SpeedUnreadable naming a step time that is not a time (NaN, inf, <= 0: a NaN ratio reads as "slower")
    or rounds that cannot be (steps_per_round not a whole number >= 1, lengths that do not pair)."""
    for norm, times in m.times_ms.items():
        bad = next((i for i, t in enumerate(times) if not (math.isfinite(t) and t > 0)), None)
        if bad is not None:
            raise SpeedUnreadable(f"{task}: {norm}'s step {bad + 1} is {times[bad]} ms; want a time > 0")
    if m.steps_per_round is None:  # version 1: read, never judged
        return
    if not (isinstance(m.steps_per_round, int) and not isinstance(m.steps_per_round, bool) and m.steps_per_round >= 1):
        raise SpeedUnreadable(f"{task}: steps_per_round is {m.steps_per_round!r}; want a whole number >= 1")
    lengths = {norm: len(times) for norm, times in m.times_ms.items()}
    first = next(iter(lengths), None)
    for norm, n in lengths.items():
        if n != lengths[first]:
            raise SpeedUnreadable(f"{task}: {norm} has {n} step times, {first} {lengths[first]}; paired norms are "
                                  "timed the same steps")
    if first is not None and lengths[first] % m.steps_per_round:
        raise SpeedUnreadable(f"{task}: {lengths[first]} step times are not whole rounds of {m.steps_per_round}")


def write_speed(path: Path, measured: dict[str, Measured]) -> None:
    """speed.json (version SPEED_VERSION) from measurements by task; a task measured in version 1 stays
    without steps_per_round (judged "cannot tell" until measured again)."""
    atomic_write_text(path, json.dumps({
        "version": SPEED_VERSION,
        "how": {task: m.how for task, m in measured.items()},
        "steps_per_round": {task: m.steps_per_round for task, m in measured.items() if m.steps_per_round},
        "times_ms": {task: m.times_ms for task, m in measured.items()}}, indent=1) + "\n")
