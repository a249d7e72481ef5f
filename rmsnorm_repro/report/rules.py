"""The verdict rules every claim is judged by (report/claims.py, report/speed_claims.py) and their power.

A verdict is "holds", "does not hold" or "cannot tell". A difference of two groups' means gets Welch's
interval (each side's own variance, Welch-Satterthwaite degrees of freedom, t quantiles from scipy.stats);
a match needs its 90% interval inside +-margin (TOST at 5%), a direction its 95% interval on one side of
0, a non-inferiority its 90% interval above -margin. An interval of zero width (no spread on either side:
a ceiling, a floor, or identical runs) has no noise estimate and decides nothing. `power` simulates a rule,
through the same functions, at given seeds and spreads: what the claims print and campaigns/calibrate.py uses.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

from .aggregate import Stat

HOLDS, FAILS, UNSURE = "holds", "does not hold", "cannot tell"
DIFFERENCE_LEVEL = 0.95   # "is X better than Y": the 95% interval excludes 0
EQUIVALENCE_LEVEL = 0.90  # "X matches Y within +-margin": the 90% interval lies inside (TOST at 5%)
WITHIN_NOISE, BETTER, WORSE, TOO_FEW = "within noise", "better", "worse", "cannot tell (n < 2)"
ZERO_WIDTH = "a zero-width interval (no spread on either side): no noise estimate, nothing decided"
POWER_WANTED = 0.80       # the seeds a claim needs: those at which its rule decides with this probability
POWER_DRAWS = 4000        # simulated experiments per power estimate (seeded: the same numbers every time)
MOST_SEEDS = 50           # seeds a side searched for POWER_WANTED


@dataclass(frozen=True)
class Claim:
    claim: str
    verdict: str
    numbers: str


def markdown(claims: list[Claim], scope: str) -> list[str]:
    """The claims as a Markdown table: claim | verdict (column heading `scope`) | numbers."""
    def cell(text: str) -> str:
        return text.replace("|", "\\|")  # a literal | would end the Markdown cell

    return [f"| claim | {scope} | numbers |", "|---|---|---|",
            *(f"| {cell(c.claim)} | **{c.verdict}** | {cell(c.numbers)} |" for c in claims)]


def welch(mean_x, sd_x, n_x, mean_b, sd_b, n_b, level: float) -> tuple[np.ndarray, np.ndarray]:
    """Welch's two-sided `level` interval on mean_x - mean_b, elementwise over arrays (n >= 2 a side); a
    side pair without spread gives the point (lo == hi)."""
    va, vb = np.asarray(sd_x, float) ** 2 / n_x, np.asarray(sd_b, float) ** 2 / n_b
    diff, se = np.asarray(mean_x, float) - mean_b, np.sqrt(va + vb)
    with np.errstate(divide="ignore", invalid="ignore"):
        df = np.where(se > 0, (va + vb) ** 2 / (va ** 2 / (n_x - 1) + vb ** 2 / (n_b - 1)), 1.0)
    half = np.where(se > 0, stats.t.ppf(0.5 + level / 2, df) * se, 0.0)
    return diff - half, diff + half


def difference_interval(x: Stat, base: Stat, level: float) -> tuple[float, float] | None:
    """Welch's two-sided `level` interval on mean_x - mean_base; None unless both have 2+ values."""
    if x.n < 2 or base.n < 2:
        return None
    lo, hi = welch(x.mean, x.std, x.n, base.mean, base.std, base.n, level)
    return float(lo), float(hi)


def difference_verdict(x: Stat, base: Stat, goal: str) -> str:
    """x against base for a metric whose better end is `goal` ("max"/"min"): TOO_FEW unless both have
    2+ values, BETTER or WORSE when the 95% interval of the difference excludes 0, else WITHIN_NOISE."""
    interval = difference_interval(x, base, DIFFERENCE_LEVEL)
    if interval is None:
        return TOO_FEW
    lo, hi = interval
    if lo <= 0 <= hi:
        return WITHIN_NOISE
    return BETTER if (lo > 0) == (goal == "max") else WORSE


# The decisions, on arrays of interval ends (one code path for a claim and for its simulation) --------
def direction_decision(lo, hi, below: bool) -> np.ndarray:
    """HOLDS when the interval lies on the claimed side of 0, FAILS on the other, UNSURE when it holds 0
    or has zero width."""
    lo, hi = np.asarray(lo, float), np.asarray(hi, float)
    claimed, other = (hi < 0, lo > 0) if below else (lo > 0, hi < 0)
    return np.where(lo == hi, UNSURE, np.where(claimed, HOLDS, np.where(other, FAILS, UNSURE)))


def equivalence_decision(lo, hi, margin: float) -> np.ndarray:
    """HOLDS inside (-margin, margin), FAILS entirely outside, UNSURE across an end or at zero width."""
    lo, hi = np.asarray(lo, float), np.asarray(hi, float)
    inside, outside = (-margin < lo) & (hi < margin), (lo > margin) | (hi < -margin)
    return np.where(lo == hi, UNSURE, np.where(inside, HOLDS, np.where(outside, FAILS, UNSURE)))


def non_inferiority_decision(lo, hi, margin: float) -> np.ndarray:
    """HOLDS above -margin, FAILS below it, UNSURE across it or at zero width (higher is better)."""
    lo, hi = np.asarray(lo, float), np.asarray(hi, float)
    return np.where(lo == hi, UNSURE, np.where(lo > -margin, HOLDS, np.where(hi < -margin, FAILS, UNSURE)))


def direction(x: Stat | None, base: Stat | None, below: bool) -> tuple[str, str]:
    """(verdict, reason) of "x's mean is below base's" (above with below=False): Welch's 95% interval of
    mean_x - mean_base by `direction_decision`; UNSURE with fewer than 2 values a side."""
    if x is None or base is None:
        return UNSURE, "no values"
    interval = difference_interval(x, base, DIFFERENCE_LEVEL)
    if interval is None:
        return UNSURE, (f"difference {x.mean - base.mean:+.3g}; {min(x.n, base.n)} seed(s) on one side: an interval "
                        "needs 2+ seeds a side")
    lo, hi = interval
    text = f"difference {x.mean - base.mean:+.3g}, 95% interval [{lo:+.3g}, {hi:+.3g}]"
    if lo == hi:
        return UNSURE, f"{text}: {ZERO_WIDTH}"
    verdict = str(direction_decision(lo, hi, below))
    return verdict, text + (": holds 0" if verdict == UNSURE else ": below 0" if hi < 0 else ": above 0")


def equivalence(x: Stat, base: Stat, margin: float, unit: str = "") -> tuple[str, str]:
    """(verdict, reason) of "x matches base within +-margin": with 2+ values a side, the 90% Welch
    interval of mean_x - mean_base by `equivalence_decision`; UNSURE with fewer than 2 a side."""
    bound = f"+-{margin:g}{unit}"
    interval = difference_interval(x, base, EQUIVALENCE_LEVEL)
    if interval is None:
        return UNSURE, (f"difference {x.mean - base.mean:+.2f}; {min(x.n, base.n)} seed(s) on one side: an interval "
                        f"needs 2+ seeds a side (then compared with {bound})")
    lo, hi = interval
    text = f"difference {x.mean - base.mean:+.2f}, 90% interval [{lo:+.2f}, {hi:+.2f}] vs {bound}"
    if lo == hi:
        return UNSURE, f"{text}: {ZERO_WIDTH}"
    verdict = str(equivalence_decision(lo, hi, margin))
    return verdict, text + {HOLDS: ": inside", FAILS: ": outside", UNSURE: ": across an end"}[verdict]


def non_inferiority(x: Stat, base: Stat, margin: float) -> tuple[str, tuple[float, float] | None]:
    """"x is no worse than base by more than margin" (higher is better): Welch's 90% interval of
    mean_x - mean_base by `non_inferiority_decision`; UNSURE without 2+ values a side (interval None)."""
    interval = difference_interval(x, base, EQUIVALENCE_LEVEL)
    if interval is None:
        return UNSURE, None
    return str(non_inferiority_decision(*interval, margin)), interval


def all_directions(claim: str, pairs: list[tuple[str, Stat, str, Stat]], below: bool, prefix: str = "") -> Claim:
    """One claim over several comparisons (x label, x, base label, base), each by `direction`: holds when
    every one holds, does not hold when any is decided the other way, else cannot tell."""
    verdicts, parts = [], [prefix] if prefix else []
    for x_label, x, base_label, base in pairs:
        verdict, text = direction(x, base, below)
        verdicts.append(verdict)
        parts.append(f"{x_label} {fmt_stat(x, 3)} vs {base_label} {fmt_stat(base, 3)}: {text}")
    verdict = FAILS if FAILS in verdicts else HOLDS if verdicts and all(v == HOLDS for v in verdicts) else UNSURE
    return Claim(claim, verdict, "; ".join(parts))


def fmt_stat(stat: Stat | None, digits: int = 2) -> str:
    if stat is None:
        return "n/a"
    return f"{stat.mean:.{digits}f} ± {stat.std:.{digits}f} (n={stat.n})" if stat.n > 1 else f"{stat.mean:.{digits}f} (n=1)"


# Power: the rule itself on simulated groups of seeds ---------------------------------------------------
RULES = ("match", "direction", "non-inferiority")


def simulate(rule: str, n: int, sd_x: float, sd_base: float, effect: float, margin: float,
             draws: int = POWER_DRAWS, rng: np.random.Generator | None = None, comparisons: int = 1) -> np.ndarray:
    """The verdicts of `rule` ("match": within +-margin; "direction": x below base; "non-inferiority": x
    no worse than base by more than margin) over `draws` simulated experiments of n seeds a side, normal
    seeds with spreads sd_x and sd_base and mean_x - mean_base = effect (for a direction: x below by
    `effect`); `comparisons` > 1 judges x against that many independent bases, all decided (all_directions).
    Each side's mean and sample spread are drawn from their exact sampling distributions."""
    rng = rng if rng is not None else np.random.default_rng(0)

    def side(mean: float, sd: float, shape) -> tuple[np.ndarray, np.ndarray]:
        return (rng.normal(mean, sd / math.sqrt(n), shape),
                sd * np.sqrt(rng.chisquare(n - 1, shape) / (n - 1)))

    if rule == "direction":
        mx, sx = side(-effect, sd_x, (draws, 1))
        mb, sb = side(0.0, sd_base, (draws, comparisons))
        verdicts = direction_decision(*welch(mx, sx, n, mb, sb, n, DIFFERENCE_LEVEL), below=True)
        return np.where((verdicts == FAILS).any(1), FAILS, np.where((verdicts == HOLDS).all(1), HOLDS, UNSURE))
    mx, sx = side(effect, sd_x, draws)
    mb, sb = side(0.0, sd_base, draws)
    lo, hi = welch(mx, sx, n, mb, sb, n, EQUIVALENCE_LEVEL)
    if rule == "match":
        return equivalence_decision(lo, hi, margin)
    if rule == "non-inferiority":
        return non_inferiority_decision(lo, hi, margin)
    raise ValueError(f"unknown rule {rule!r}: one of {', '.join(RULES)}")


def power(rule: str, n: int, sd_x: float, sd_base: float, effect: float = 0.0, margin: float = 1.0,
          draws: int = POWER_DRAWS, comparisons: int = 1) -> float:
    """P(holds) of `rule` at n seeds a side (see `simulate`): for a match or a non-inferiority with no
    difference (effect 0), for a direction with x below base by `effect`. Seeded: 0 below 2 seeds."""
    if n < 2:
        return 0.0
    verdicts = simulate(rule, n, sd_x, sd_base, effect, margin, draws, np.random.default_rng(n), comparisons)
    return float(np.mean(verdicts == HOLDS))


def seeds_for_power(rule: str, sd_x: float, sd_base: float, effect: float = 0.0, margin: float = 1.0,
                    wanted: float = POWER_WANTED, most: int = MOST_SEEDS, comparisons: int = 1) -> int | None:
    """The fewest seeds a side at which `power` reaches `wanted`; None when more than `most`."""
    if power(rule, most, sd_x, sd_base, effect, margin, comparisons=comparisons) < wanted:
        return None
    lo, hi = 2, most  # power grows with n: bisect
    while lo < hi:
        mid = (lo + hi) // 2
        if power(rule, mid, sd_x, sd_base, effect, margin, comparisons=comparisons) >= wanted:
            hi = mid
        else:
            lo = mid + 1
    return lo


def power_note(rule: str, x: Stat, base: Stat, effect: float, margin: float, unit: str = "") -> str:
    """What a reader needs to weigh a verdict: the rule's power at the seeds it ran (the measured spreads,
    the claim true: no difference for a match, `effect` for a direction) and the seeds a side for 80%."""
    if x.n < 2 or base.n < 2:
        return "power: no spread measured (1 seed on a side)"
    n = min(x.n, base.n)
    need = seeds_for_power(rule, x.std, base.std, effect, margin)
    at = "no difference" if rule != "direction" else f"a true difference of {effect:g}{unit}"
    now = power(rule, n, x.std, base.std, effect, margin)
    return (f"power at {n} seeds a side and these spreads ({at}): {now:.0%}; "
            + (f"{need} seeds a side give {POWER_WANTED:.0%}" if need else f"more than {MOST_SEEDS} seeds a side "
               f"would be needed for {POWER_WANTED:.0%}"))


# Figure 3's rule: a trend over p ------------------------------------------------------------------------
def trend(ps, values) -> tuple[np.ndarray, np.ndarray, int]:
    """(fitted change over the range of ps, the half-width of its 90% t interval, residual degrees of freedom)
    of least-squares lines through (ps, each row of values): the noise is the lines' own residuals."""
    x, y = np.asarray(ps, dtype=np.float64), np.atleast_2d(np.asarray(values, dtype=np.float64))
    dx, span, df = x - x.mean(), float(x.max() - x.min()), len(x) - 2
    sxx = float(np.sum(dx ** 2))
    slope = (y - y.mean(axis=1, keepdims=True)) @ dx / sxx
    residuals = y - (y.mean(axis=1, keepdims=True) + slope[:, None] * dx)
    if df < 1:
        return slope * span, np.full(len(y), np.nan), df
    sd = np.sqrt(np.sum(residuals ** 2, axis=1) / df)
    half = stats.t.ppf(0.5 + EQUIVALENCE_LEVEL / 2, df) * sd * span / np.sqrt(sxx)
    return slope * span, half, df


def p_trend(ps: list[float], values: list[float], margin: float) -> tuple[str, float, tuple[float, float] | None, int]:
    """(verdict, fitted change over the range of ps, its 90% interval or None without a noise estimate,
    degrees of freedom) of a least-squares line through pRMSNorm's own runs (p, value) (`trend`): the noise
    is its residuals alone (other norms' seeds have other spreads: 70x apart at the small tier). Holds
    inside (-margin, margin), does not hold entirely outside it (TOST at 5%, as `equivalence`)."""
    change, half, df = trend(ps, values)
    if df < 1:
        return UNSURE, float(change[0]), None, df
    lo, hi = float(change[0] - half[0]), float(change[0] + half[0])
    return str(equivalence_decision(lo, hi, margin)), float(change[0]), (lo, hi), df
