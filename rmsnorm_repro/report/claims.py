"""The paper's claims, checked against our runs: each gives a verdict and the numbers behind it.

A verdict is "holds", "does not hold" or "cannot tell" (too few runs, or the runs are missing). The
tests are stated in each function's docstring and in the line it returns, so a reader can disagree
with a threshold knowing what it was. Each claim is framed as the paper frames it: a match (`equivalence`),
a direction (`direction`, `all_directions`), a non-inferiority (Figure 4), a trend over p (Figure 3), a
paired speed-up (report/paired.py); report/calibrate.py measures each rule's error rates (docs/verdicts.md).
`judge` gives every claim some runs bear on; `rmsnorm-report claims RUN_OR_DIR...` prints it (`main`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

from .paired import Measured, paired_speedup
from .aggregate import TRAIN_LOSS, Group, Run, Stat, group_runs, resolve_metric

HOLDS, FAILS, UNSURE = "holds", "does not hold", "cannot tell"
# the BLEU a translation claim compares, the first both sides have: WMT14's test (paper scale), a test set
# (mini's synthetic one; Multi30k's: the hub's `test` and the raw test_2016_flickr are the same 1,000
# sentences), else the whole valid set with beam search (the claim then says valid)
TRANSLATION_METRICS = ("test14_bleu", "test_bleu", "test_2016_flickr_bleu", "test_2017_flickr_bleu", "valid_beam_bleu")
# quality metric per task: (metric names tried in order, how to print it, the margin within which
# two norms "match", its unit); which way is better: rmsnorm_repro.record.metric_goal. Margins: 1 BLEU
# (the paper's Tables 2 and 4 call norms within ~0.5 BLEU comparable), 1 point of error (Table 6's
# norms differ by more), 3 points of R@K sum (six recalls: 0.5 each), 0.5 point of CIFAR error
QUALITY = {
    "rnnsearch": (TRANSLATION_METRICS, "test BLEU", 1.0, " BLEU"),
    "transformer": (TRANSLATION_METRICS, "test BLEU", 1.0, " BLEU"),
    "reader": (("error",), "test error", 0.01, ""),
    "retrieval": (("rsum", "caption_r1"), "test R@K sum", 3.0, ""),
    "convpool": (("error",), "test error %", 0.5, " points"),
}
# where the paper claims a direction rather than a match: (task, norm) -> "below" or "above" LayerNorm
DIRECTIONS = {("convpool", "rmsnorm"): "below"}
DIRECTION_SOURCES = {("convpool", "rmsnorm"): " (Table 10: 8.83% vs 10.49%)"}
TASK_ORDER = ("rnnsearch", "transformer", "reader", "retrieval", "convpool")
# below this validation BLEU a translation model has learned nothing worth comparing
LEARNED_BLEU = 1.0


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


def _by_norm(groups: list[Group], task: str) -> dict[str, Group]:
    """The first group of each norm of a task (the paper's default p comes first for pRMSNorm)."""
    out: dict[str, Group] = {}
    for group in groups:
        if group.task == task:
            out.setdefault(group.norm, group)
    return out


def _fmt(stat: Stat | None, digits: int = 2) -> str:
    if stat is None:
        return "n/a"
    return f"{stat.mean:.{digits}f} ± {stat.std:.{digits}f} (n={stat.n})" if stat.n > 1 else f"{stat.mean:.{digits}f} (n=1)"


def table1_claims() -> list[Claim]:
    """Each method's row of Table 1, computed by norms/table1.py, cell by cell against the paper."""
    from ..norms import table1

    changes, paper = table1.compute(), table1.read_paper()
    claims = []
    for method in table1.METHODS:
        cells = [(t.title, table1.verdict(changes[method][t.key]), paper[method][t.key]) for t in table1.TRANSFORMATIONS]
        wrong = [f"{title}: ours {ours}, paper {theirs}" for title, ours, theirs in cells if ours != theirs]
        claims.append(Claim(f"Table 1, {method}: invariances as published", FAILS if wrong else HOLDS,
                            "; ".join(wrong) if wrong else f"{len(cells)}/{len(cells)} cells match the paper"))
    return claims


# One rule for every comparison of two groups of seeds ----------------------------------------------
# A difference of means gets a Welch interval (each side's own variance; degrees of freedom by
# Welch-Satterthwaite; t quantiles from scipy.stats).
DIFFERENCE_LEVEL = 0.95   # "is X better than Y": the 95% interval excludes 0
EQUIVALENCE_LEVEL = 0.90  # "X matches Y within +-margin": the 90% interval lies inside (TOST at 5%)
WITHIN_NOISE, BETTER, WORSE, TOO_FEW = "within noise", "better", "worse", "cannot tell (n < 2)"


def difference_interval(x: Stat, base: Stat, level: float) -> tuple[float, float] | None:
    """Welch's two-sided `level` interval on mean_x - mean_base; None unless both have 2+ values."""
    if x.n < 2 or base.n < 2:
        return None
    va, vb = x.std ** 2 / x.n, base.std ** 2 / base.n
    diff, se = x.mean - base.mean, math.sqrt(va + vb)
    if se == 0:
        return diff, diff
    df = (va + vb) ** 2 / (va ** 2 / (x.n - 1) + vb ** 2 / (base.n - 1))
    half = float(stats.t.ppf(0.5 + level / 2, df)) * se
    return diff - half, diff + half


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


def direction(x: Stat | None, base: Stat | None, below: bool) -> tuple[str, str]:
    """(verdict, reason) of "x's mean is below base's" (above with below=False): Welch's 95% interval of
    mean_x - mean_base; HOLDS when it lies on the claimed side of 0, FAILS on the other side, UNSURE when
    it holds 0 or a side has fewer than 2 values."""
    if x is None or base is None:
        return UNSURE, "no values"
    interval = difference_interval(x, base, DIFFERENCE_LEVEL)
    if interval is None:
        return UNSURE, (f"difference {x.mean - base.mean:+.3g}; {min(x.n, base.n)} seed(s) on one side: an interval "
                        "needs 2+ seeds a side")
    lo, hi = interval
    text = f"difference {x.mean - base.mean:+.3g}, 95% interval [{lo:+.3g}, {hi:+.3g}]"
    if lo <= 0 <= hi:
        return UNSURE, text + ": holds 0"
    return (HOLDS if (hi < 0) == below else FAILS), text + (": below 0" if hi < 0 else ": above 0")


def all_directions(claim: str, pairs: list[tuple[str, Stat, str, Stat]], below: bool, prefix: str = "") -> Claim:
    """One claim over several comparisons (x label, x, base label, base), each by `direction`: holds when
    every one holds, does not hold when any is decided the other way, else cannot tell."""
    verdicts, parts = [], [prefix] if prefix else []
    for x_label, x, base_label, base in pairs:
        verdict, text = direction(x, base, below)
        verdicts.append(verdict)
        parts.append(f"{x_label} {_fmt(x, 3)} vs {base_label} {_fmt(base, 3)}: {text}")
    verdict = FAILS if FAILS in verdicts else HOLDS if verdicts and all(v == HOLDS for v in verdicts) else UNSURE
    return Claim(claim, verdict, "; ".join(parts))


def seeds_to_decide(x: Stat, base: Stat, margin: float, most: int = 50) -> int | None:
    """Seeds a side at which the equivalence interval would decide (inside or outside +-margin), if
    the means and spreads stayed as measured; None when more than `most` (or no spread is known)."""
    if x.n < 2 or base.n < 2:
        return None
    for n in range(max(x.n, base.n) + 1, most + 1):
        lo, hi = difference_interval(Stat(x.mean, x.std, n), Stat(base.mean, base.std, n), EQUIVALENCE_LEVEL)
        if -margin < lo and hi < margin or lo > margin or hi < -margin:
            return n
    return None


def equivalence(x: Stat, base: Stat, margin: float, unit: str = "") -> tuple[str, str]:
    """(verdict, reason) of "x matches base within +-margin": with 2+ values a side, the 90% Welch
    interval of mean_x - mean_base; HOLDS inside (-margin, margin), FAILS entirely outside it,
    UNSURE otherwise, with the seeds a side that would decide; UNSURE with fewer than 2 a side."""
    bound = f"+-{margin:g}{unit}"
    interval = difference_interval(x, base, EQUIVALENCE_LEVEL)
    if interval is None:
        return UNSURE, (f"difference {x.mean - base.mean:+.2f}; {min(x.n, base.n)} seed(s) on one side: an interval "
                        f"needs 2+ seeds a side (then compared with {bound})")
    lo, hi = interval
    text = f"difference {x.mean - base.mean:+.2f}, 90% interval [{lo:+.2f}, {hi:+.2f}] vs {bound}"
    if -margin < lo and hi < margin:
        return HOLDS, text + ": inside"
    if lo > margin or hi < -margin:
        return FAILS, text + ": outside"
    n = seeds_to_decide(x, base, margin)
    return UNSURE, text + (f"; about {n} seeds a side would decide, if means and spreads stay" if n
                           else "; more than 50 seeds a side would be needed at this spread")


def split_of(metric: str) -> str:
    """The split a metric is scored on, as a claim names it: test, valid (beam or greedy), or dev."""
    return next((split for split in ("test", "valid", "dev") if metric.startswith(split)), "test")


def _shown(shown: str, metric: str | None) -> str:
    """QUALITY's description with the split the claim's metric was actually scored on."""
    return shown if metric is None else shown.replace("test", split_of(metric), 1)


# Convergence: a run's mean training loss over a common window of steps (or seconds) --------------
CURVE_POINTS = 50  # grid points a curve is read at (linear interpolation between logged points)


def _window(runs: list[Run], metric: str, x: str) -> tuple[float, float] | None:
    """The x range every run logged `metric` over (the latest first point to the earliest last)."""
    curves = [run.curve(metric, x)[0] for run in runs]
    if not curves or any(len(c) < 2 for c in curves):
        return None
    lo, hi = max(c[0] for c in curves), min(c[-1] for c in curves)
    return (lo, hi) if hi > lo else None


def mean_loss(run: Run, metric: str, x: str, window: tuple[float, float]) -> float:
    """The run's loss averaged over the window (x: "step" or "wall_s"): the area under its curve divided
    by the window's width; lower is faster convergence over that window."""
    xs, ys = run.curve(metric, x)
    return float(np.mean(np.interp(np.linspace(*window, CURVE_POINTS), xs, ys)))


def loss_stats(groups: list[Group], x: str = "step") -> tuple[str, tuple[float, float], list[Stat]] | None:
    """(metric, window, each group's Stat of its completed runs' mean_loss) over the window every one of
    those runs covers; None when a group has no completed run or the runs share no window."""
    runs = [run for group in groups for run in group.completed]
    if not runs or any(not group.completed for group in groups):
        return None
    metric = resolve_metric(TRAIN_LOSS, runs)
    window = _window(runs, metric, x)
    if window is None:
        return None
    return metric, window, [Stat.of(mean_loss(run, metric, x, window) for run in g.completed) for g in groups]


def _window_text(metric: str, window: tuple[float, float], x: str) -> str:
    unit = "steps" if x == "step" else "s of the runs' own clocks"
    return f"mean `{metric}` over {window[0]:g}-{window[1]:g} {unit}"


def convergence_claim(groups: list[Group]) -> Claim:
    """Fig. 1 (per step): normalized RNNSearch's training loss falls faster than the Baseline's.

    Each run's mean training loss over the steps every run covers (`mean_loss`); LayerNorm's, RMSNorm's
    and pRMSNorm's (those that ran) each against the Baseline's by `all_directions`.
    """
    claim = "Fig. 1 (per step): normalized RNNSearch's training loss falls faster than the Baseline's"
    norms = _by_norm(groups, "rnnsearch")
    base = norms.get("none")
    normalized = [norms[n] for n in ("layernorm", "rmsnorm", "prmsnorm") if n in norms]
    found = loss_stats([base, *normalized]) if base is not None and normalized else None
    if found is None:
        return Claim(claim, UNSURE, "needs completed rnnsearch runs of none and at least one norm, logging a common "
                                    "stretch of training loss")
    metric, window, (b, *others) = found
    return all_directions(claim, [(g.label, s, "Baseline", b) for g, s in zip(normalized, others)], below=True,
                          prefix=_window_text(metric, window, "step"))


def wallclock_claim(groups: list[Group]) -> Claim:
    """Fig. 1 (per second): LayerNorm's lead over the Baseline is smaller per second than per step.

    Per run, its mean loss over the common window of steps minus that over the common window of seconds
    (the runs' own clocks: runs that shared a machine at different times blur this); the lead shrinks
    per second when LayerNorm's difference is below the Baseline's, by `direction`.
    """
    claim = "Fig. 1 (per second): LayerNorm's lead over the Baseline is smaller per second than per step"
    norms = _by_norm(groups, "rnnsearch")
    base, ln = norms.get("none"), norms.get("layernorm")
    per_step = loss_stats([base, ln]) if base is not None and ln is not None else None
    per_second = loss_stats([base, ln], "wall_s") if per_step is not None else None
    if per_second is None:
        return Claim(claim, UNSURE, "needs completed rnnsearch runs of none and layernorm logging loss against steps "
                                    "and seconds")
    (metric, steps_window, (bs, ls)), (_, seconds_window, (bw, lw)) = per_step, per_second

    def shrink(group: Group) -> Stat:
        return Stat.of(mean_loss(r, metric, "step", steps_window) - mean_loss(r, metric, "wall_s", seconds_window)
                       for r in group.completed)

    verdict, text = direction(shrink(ln), shrink(base), below=True)
    return Claim(claim, verdict, f"{_window_text(metric, steps_window, 'step')}: Baseline {_fmt(bs, 3)}, LayerNorm "
                                 f"{_fmt(ls, 3)}; {_window_text(metric, seconds_window, 'wall_s')}: Baseline "
                                 f"{_fmt(bw, 3)}, LayerNorm {_fmt(lw, 3)}; per-step minus per-second loss, LayerNorm "
                                 f"against the Baseline: {text}")


def weightnorm_claim(groups: list[Group]) -> Claim:
    """Fig. 7: WeightNorm's RNNSearch converges more slowly (per step) than LayerNorm's and RMSNorm's.

    Mean training loss over the common steps (`mean_loss`), WeightNorm's against each by `all_directions`."""
    claim = "Fig. 7: WeightNorm's RNNSearch training loss falls more slowly than LayerNorm's and RMSNorm's"
    norms = _by_norm(groups, "rnnsearch")
    wn, others = norms.get("weightnorm"), [norms[n] for n in ("layernorm", "rmsnorm") if n in norms]
    found = loss_stats([wn, *others]) if wn is not None and others else None
    if found is None:
        return Claim(claim, UNSURE, "needs completed rnnsearch runs of weightnorm and layernorm or rmsnorm, logging a "
                                    "common stretch of training loss")
    metric, window, (w, *rest) = found
    return all_directions(claim, [("WeightNorm", w, g.label, s) for g, s in zip(others, rest)], below=False,
                          prefix=_window_text(metric, window, "step"))


def match_claims(groups: list[Group], tasks: tuple[str, ...] = TASK_ORDER,
                 metrics: dict[str, tuple[str, ...]] | None = None,
                 bootstrap: dict[tuple[str, str], str] | None = None) -> list[Claim]:
    """RMSNorm's and pRMSNorm's quality each against LayerNorm's as the paper frames it: a match within the
    task's margin (QUALITY) by `equivalence`, or, where the paper claims a direction (DIRECTIONS: CIFAR-10's
    RMSNorm), by `direction`. Each claim names the split its metric is scored on. metrics: per task, the
    metric names to try (default QUALITY's); bootstrap: (task, norm) -> a paired bootstrap summary."""
    claims = []
    for task in tasks:
        norms = _by_norm(groups, task)
        names, shown, margin, unit = QUALITY[task]
        names = (metrics or {}).get(task, names)
        for norm, name in (("rmsnorm", "RMSNorm"), ("prmsnorm", "pRMSNorm")):
            ln, other = norms.get("layernorm"), norms.get(norm)
            metric = next((m for m in names if ln is not None and other is not None and ln.stat(m) is not None
                           and other.stat(m) is not None), None)
            directed = DIRECTIONS.get((task, norm))
            claim = (f"{task}: {name}'s {_shown(shown, metric)} is {'below' if directed == 'below' else 'above'} "
                     f"LayerNorm's{DIRECTION_SOURCES.get((task, norm), '')}" if directed else
                     f"{task}: {name}'s {_shown(shown, metric)} matches LayerNorm's (within {margin:g}{unit})")
            if ln is None or other is None:
                claims.append(Claim(claim, UNSURE, f"needs {task} runs of layernorm and {norm}"))
                continue
            if other.fails_to_train:
                claims.append(Claim(claim, FAILS, f"every {norm} run diverged"))
                continue
            if metric is None:
                claims.append(Claim(claim, UNSURE, f"no completed runs with {' or '.join(names)} for both"))
                continue
            a, b = ln.stat(metric), other.stat(metric)
            numbers = f"LayerNorm {_fmt(a)}, {other.label.replace(norm, name, 1)} {_fmt(b)} (`{metric}`)"
            if task in ("rnnsearch", "transformer") and max(a.mean, b.mean) < LEARNED_BLEU:
                claims.append(Claim(claim, UNSURE, f"{numbers}; neither reached BLEU {LEARNED_BLEU:g}: nothing learned"))
                continue
            verdict, reason = direction(b, a, directed == "below") if directed else equivalence(b, a, margin, unit)
            extra = (bootstrap or {}).get((task, norm))
            claims.append(Claim(claim, verdict, f"{numbers}; {reason}" + (f"; {extra}" if extra else "")))
    return claims


def l2norm_claim(groups: list[Group], metrics: tuple[str, ...] = QUALITY["rnnsearch"][0]) -> Claim:
    """Table 2: L2-Norm's BLEU is below the other models' (Baseline, LayerNorm, RMSNorm, pRMSNorm: those
    that ran), each comparison by `all_directions` on the first of `metrics` both sides have."""
    norms = _by_norm(groups, "rnnsearch")
    l2, others = norms.get("l2norm"), [norms[n] for n in ("none", "layernorm", "rmsnorm", "prmsnorm") if n in norms]
    metric = next((m for m in metrics if l2 is not None and l2.stat(m) is not None
                   and any(g.stat(m) is not None for g in others)), None)
    claim = f"Table 2: L2-Norm's RNNSearch {split_of(metric or metrics[0])} BLEU is below the other models'"
    if metric is None:
        return Claim(claim, UNSURE, "needs rnnsearch runs of l2norm and of another norm with " + " or ".join(metrics))
    pairs = [("L2-Norm", l2.stat(metric), g.label, g.stat(metric)) for g in others if g.stat(metric) is not None]
    return all_directions(claim, pairs, below=True, prefix=f"`{metric}`")


def transformer_baseline_claim(groups: list[Group], metrics: tuple[str, ...] = QUALITY["transformer"][0]) -> Claim:
    """Table 4: the Transformer without normalization fails to train.

    Fails: every run diverged, or its BLEU (the first of `metrics` both it and LayerNorm have) is below
    half of LayerNorm's; "cannot tell" while LayerNorm is below LEARNED_BLEU (nothing to measure against).
    """
    claim = "Table 4: the Transformer without normalization fails to train"
    norms = _by_norm(groups, "transformer")
    base, ln = norms.get("none"), norms.get("layernorm")
    if base is None:
        return Claim(claim, UNSURE, "no transformer runs with norm=none")
    if base.fails_to_train:
        return Claim(claim, HOLDS, f"all {len(base.runs)} Baseline runs diverged")
    metric = next((m for m in metrics if ln is not None and base.stat(m) is not None and ln.stat(m) is not None), None)
    if metric is None:
        return Claim(claim, UNSURE, f"Baseline runs: {base.status_note()}; no BLEU to compare with LayerNorm")
    b, l = base.stat(metric), ln.stat(metric)
    if l.mean < LEARNED_BLEU:
        return Claim(claim, UNSURE, f"LayerNorm's BLEU {_fmt(l)} (`{metric}`) is below {LEARNED_BLEU:g}: it learned "
                                    "nothing to measure the Baseline against")
    return Claim(claim, HOLDS if b.mean < 0.5 * l.mean else FAILS,
                 f"Baseline {base.status_note()} runs, BLEU {_fmt(b)} vs LayerNorm {_fmt(l)} (`{metric}`; fails: "
                 "all diverged or below half of LayerNorm's)")


def _fmt_time(group: Group) -> str:
    text = _fmt(group.time(), 1)
    interval = group.time_interval()
    return text + (f" [{interval.lo:.1f}, {interval.hi:.1f}]" if interval is not None else "")


def speed_claims(groups: list[Group], measured: dict[str, Measured] | None = None,
                 tasks: tuple[str, ...] = TASK_ORDER) -> list[Claim]:
    """RMSNorm (and pRMSNorm, where it ran) take less time per training step than LayerNorm, per task.

    Judged only from step times measured side by side in one process (`measured`: paired.read_speed
    of a speed.json: the norms in balanced order on the same batches): holds when the paired speed-up's
    95% interval (paired.paired_speedup, rounds as blocks) lies above 0, does not hold below it,
    "cannot tell" when it holds 0 or the times come from the old fixed-order design. The smallest speed-up
    the measurement could decide is stated. The runs' own step times are shown, never judged: runs train
    at different times, beside other jobs.
    """
    claims = []
    for task in tasks:
        norms = _by_norm(groups, task)
        ln = norms.get("layernorm")
        for name in ("rmsnorm", "prmsnorm"):
            group = norms.get(name)
            if ln is None or group is None:
                if name == "rmsnorm":
                    claims.append(Claim(f"{task}: rmsnorm is faster per step than LayerNorm", UNSURE,
                                        f"needs {task} runs of layernorm and rmsnorm"))
                continue
            shown = (f"the runs' own s / 1k steps (shown, not judged): LayerNorm {_fmt_time(ln)}, "
                     f"{group.label} {_fmt_time(group)}")
            claim = f"{task}: {group.label} is faster per step than LayerNorm"
            m = (measured or {}).get(task)
            if m is None or name not in m.times_ms or "layernorm" not in m.times_ms:
                claims.append(Claim(claim, UNSURE, "not measured side by side (`python -m rmsnorm_repro.bench --steps`); "
                                    + shown))
                continue
            if m.steps_per_round is None:
                claims.append(Claim(claim, UNSURE, "measured in a fixed order, unpaired (a version-1 speed.json): "
                                    "measure again to judge; " + shown))
                continue
            sp = paired_speedup(m.times_ms[name], m.times_ms["layernorm"], m.steps_per_round)
            verdict = UNSURE if sp.lo <= 0 <= sp.hi else HOLDS if sp.lo > 0 else FAILS
            claims.append(Claim(claim, verdict, (
                f"side by side{m.how}: speed-up (T_LN - T_X) / T_LN = {sp.gain:.1%}, 95% interval [{sp.lo:.1%}, "
                f"{sp.hi:.1%}] from {sp.rounds} rounds of {sp.steps} paired steps; the smallest speed-up it decides "
                f"(80% of the time): {sp.resolution:.1%}" + ("; within noise" if verdict == UNSURE else "") + f"; {shown}")))
    return claims


def table5_claim(groups: list[Group]) -> Claim:
    """Table 5: normalization shrinks the decoder's hidden-to-hidden summed inputs.

    Holds when LayerNorm's and RMSNorm's |mean| and std over all positions are both below the Baseline's.
    """
    claim = "Table 5: LayerNorm and RMSNorm keep the decoder's summed inputs smaller (|M| and S) than the Baseline"
    norms = _by_norm(groups, "rnnsearch")
    stats = {n: (norms[n].stat("table5_mean_all"), norms[n].stat("table5_std_all")) for n in ("none", "layernorm", "rmsnorm")
             if n in norms}
    if len(stats) < 3 or any(m is None or s is None for m, s in stats.values()):
        return Claim(claim, UNSURE, "needs table5_mean_all / table5_std_all of none, layernorm and rmsnorm runs")
    (bm, bs) = stats["none"]
    ok = all(abs(m.mean) < abs(bm.mean) and s.mean < bs.mean for n, (m, s) in stats.items() if n != "none")
    return Claim(claim, HOLDS if ok else FAILS,
                 "; ".join(f"{n}: M {m.mean:.2f}, S {s.mean:.2f}" for n, (m, s) in stats.items()))


def p_claim(p_groups: list[Group], noise_groups: list[Group], margin: float = QUALITY["rnnsearch"][2]) -> Claim:
    """Fig. 3: p has little effect: the change of best valid BLEU across the swept p is within +-margin.

    A least-squares line through every completed run's (p, best valid BLEU); its change over the swept
    range (slope x (max p - min p)) gets a 90% t interval, the noise pooled from the line's residuals and
    the seeds of `noise_groups` (Table 2's groups, runs of one recipe). Holds inside (-margin, margin),
    does not hold entirely outside it, cannot tell otherwise (TOST at 5%, as `equivalence`). A linear
    trend: a p that helps only in the middle of the range is not what this rule looks for.
    """
    claim = f"Fig. 3: pRMSNorm's best valid BLEU changes by less than {margin:g} BLEU across p"
    points = [(g.p, v) for g in p_groups for run in g.completed if (v := run.metric("bleu", "best")) is not None]
    ps = sorted({p for p, _ in points})
    if len(ps) < 2:
        return Claim(claim, UNSURE, "needs runs at two or more values of p")
    means = ", ".join(f"p={p:g}: {np.mean([v for q, v in points if q == p]):.2f}" for p in ps)
    if max(v for _, v in points) < LEARNED_BLEU:
        return Claim(claim, UNSURE, f"{means}; no run reached BLEU {LEARNED_BLEU:g}: nothing learned to compare at "
                                    "this step count")
    noise = [[v for run in g.completed if (v := run.metric("bleu", "best")) is not None] for g in noise_groups]
    verdict, change, interval, df = p_trend([p for p, _ in points], [v for _, v in points], noise, margin)
    if interval is None:
        return Claim(claim, UNSURE, f"{means}; change {change:+.2f}; no noise estimate (needs more runs than values of "
                                    "p, or Table 2 groups with 2+ seeds)")
    text = (f"{means}; the fitted change over p={min(ps):g}-{max(ps):g}: {change:+.2f}, 90% interval "
            f"[{interval[0]:+.2f}, {interval[1]:+.2f}] ({df} df) vs +-{margin:g}")
    return Claim(claim, verdict, text + {HOLDS: ": inside", FAILS: ": outside", UNSURE: ": more runs would decide"}[verdict])


def p_trend(ps: list[float], values: list[float], noise: list[list[float]], margin: float
            ) -> tuple[str, float, tuple[float, float] | None, int]:
    """Figure 3's rule on numbers: (verdict, fitted change over the range of ps, its 90% interval or None
    without a noise estimate, degrees of freedom). The residual variance of the least-squares line is
    pooled with each `noise` group's seed variance (same recipe, so the same noise)."""
    x, y = np.asarray(ps, dtype=np.float64), np.asarray(values, dtype=np.float64)
    slope, intercept = np.polyfit(x, y, 1)
    ss, df = float(np.sum((y - (slope * x + intercept)) ** 2)), len(x) - 2
    for group in noise:
        if len(group) > 1:
            ss, df = ss + float(np.var(group)) * len(group), df + len(group) - 1
    span = float(x.max() - x.min())
    change = float(slope) * span
    if df < 1:
        return UNSURE, change, None, df
    half = float(stats.t.ppf(0.5 + EQUIVALENCE_LEVEL / 2, df)) * math.sqrt(ss / df) * span / math.sqrt(
        float(np.sum((x - x.mean()) ** 2)))
    lo, hi = change - half, change + half
    verdict = HOLDS if -margin < lo and hi < margin else FAILS if lo > margin or hi < -margin else UNSURE
    return verdict, change, (lo, hi), df


def init_centre_claim(groups: list[Group], margin: float = QUALITY["rnnsearch"][2]) -> Claim:
    """Fig. 4: with the init centre at 0.2, RMSNorm trains at least as well as LayerNorm.

    Non-inferiority on best valid BLEU by the one interval rule (Welch's 90% interval of RMSNorm minus
    LayerNorm, 2+ seeds a side): holds when it lies above -margin, does not hold when it lies below,
    cannot tell otherwise. Holds outright when every LayerNorm run diverged and RMSNorm's did not.
    """
    claim = (f"Fig. 4: with init centre 0.2, RMSNorm's best valid BLEU is no worse than LayerNorm's (by more than "
             f"{margin:g})")
    norms = _by_norm(groups, "rnnsearch")
    ln, rms = norms.get("layernorm"), norms.get("rmsnorm")
    if ln is None or rms is None:
        return Claim(claim, UNSURE, "needs fig4 runs of layernorm and rmsnorm")
    a, b = ln.stat("bleu", "best"), rms.stat("bleu", "best")
    numbers = f"LayerNorm {_fmt(a)} ({ln.status_note()} runs), RMSNorm {_fmt(b)} ({rms.status_note()} runs)"
    if rms.fails_to_train:
        return Claim(claim, FAILS, numbers + "; every RMSNorm run diverged")
    if ln.fails_to_train:
        return Claim(claim, HOLDS, numbers + "; every LayerNorm run diverged")
    if a is None or b is None:
        return Claim(claim, UNSURE, numbers)
    if max(a.mean, b.mean) < LEARNED_BLEU:
        return Claim(claim, UNSURE, numbers + f"; neither reached BLEU {LEARNED_BLEU:g} at this step count")
    verdict, interval = non_inferiority(b, a, margin)
    if interval is None:
        return Claim(claim, UNSURE, numbers + "; an interval needs 2+ seeds a side")
    return Claim(claim, verdict, f"{numbers}; difference {b.mean - a.mean:+.2f}, 90% interval [{interval[0]:+.2f}, "
                                 f"{interval[1]:+.2f}] vs -{margin:g}")


def non_inferiority(x: Stat, base: Stat, margin: float) -> tuple[str, tuple[float, float] | None]:
    """"x is no worse than base by more than margin" (higher is better): the one interval rule, Welch's 90%
    interval of mean_x - mean_base; HOLDS above -margin, FAILS below it, UNSURE across it or without 2+
    values a side (interval None)."""
    interval = difference_interval(x, base, EQUIVALENCE_LEVEL)
    if interval is None:
        return UNSURE, None
    lo, hi = interval
    return (HOLDS if lo > -margin else FAILS if hi < -margin else UNSURE), interval


def init_centre(run: Run) -> float:
    """The run's weight-init centre (task.model.init_center; 0 where the task has none): Figure 4's runs
    shift it to 0.2."""
    value = (run.config.get("task", {}).get("model") or {}).get("init_center", 0.0)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


def judge(runs: list[Run], measured: dict[str, Measured] | None = None,
          bootstrap: dict[tuple[str, str], str] | None = None, table1: bool = False) -> list[Claim]:
    """Every claim of the paper that these runs bear on (runs of one scale, any scale), each with its
    verdict and numbers: the claims of the tasks the runs trained, Figure 4's from runs with a shifted
    init centre, Figure 3's from the RNNSearch pRMSNorm runs at every p (noise pooled with the other
    RNNSearch groups); `table1` adds Table 1's rows (computed, not trained). What the mini and small
    reports and `rmsnorm-report claims` print. Table 3's runs (codebase=theano|pytorch: the authors' two
    implementations' norm settings) have their page; the claims are judged on the suite's own recipe."""
    runs = [run for run in runs if not run.config.get("codebase")]
    shifted = [run for run in runs if init_centre(run) != 0.0]
    plain = [run for run in runs if init_centre(run) == 0.0]
    groups, tasks = group_runs(plain), {run.task for run in runs}
    rnnsearch = [g for g in groups if g.task == "rnnsearch"]
    claims = [*table1_claims()] if table1 else []
    if "rnnsearch" in tasks:
        claims += [convergence_claim(groups), wallclock_claim(groups)]
    claims += match_claims(groups, tuple(t for t in TASK_ORDER if t in tasks), bootstrap=bootstrap)
    if "rnnsearch" in tasks:
        claims += [l2norm_claim(groups), weightnorm_claim(groups)]
    if "transformer" in tasks:
        claims.append(transformer_baseline_claim(groups))
    claims += speed_claims(groups, measured, tuple(t for t in TASK_ORDER if t in tasks))
    if "rnnsearch" in tasks:
        claims += [table5_claim(groups),
                   p_claim(group_runs([r for r in plain if r.task == "rnnsearch" and r.norm == "prmsnorm"]),
                           [g for g in rnnsearch if g.norm != "prmsnorm"]),
                   init_centre_claim(group_runs(shifted))]
    return claims


def main(argv: list[str] | None = None) -> int:
    """rmsnorm-report claims RUN_OR_DIR... [--speed speed.json] [--out claims.md]"""
    import argparse
    import sys
    from pathlib import Path

    from ..atomic import atomic_write_text, cannot_write
    from ..record import printable
    from .aggregate import TRAINING, read_runs
    from .figures import unique_runs
    from .paired import SpeedUnreadable, read_speed

    parser = argparse.ArgumentParser(prog="rmsnorm-report claims", description=(
        "Judge the paper's claims on any runs (one scale: mini, small or paper) and print the claims table, "
        "each verdict with its numbers (the rules: docs/verdicts.md)."))
    parser.add_argument("runs", nargs="+", type=Path, help="run directories or folders of runs (searched recursively)")
    parser.add_argument("--speed", type=Path, default=None,
                        help="a speed.json of steps timed side by side (what the speed claims are judged on)")
    parser.add_argument("--out", type=Path, default=None, help="also write the table here (Markdown)")
    parser.add_argument("--table1", action="store_true", help="add Table 1's rows (computed here, no runs needed)")
    args = parser.parse_args(argv)
    for path in args.runs:
        if not path.exists():
            print(f"rmsnorm-report claims: {path} does not exist: give run directories or folders of runs", file=sys.stderr)
            return 2
    try:
        found, left_out, damaged = read_runs(args.runs)  # the runs, and those left out (damaged, unfinished), named
    except ValueError as err:  # a file given as the folder
        print(f"rmsnorm-report claims: {err}", file=sys.stderr)
        return 2
    runs = unique_runs(found)
    left_out += [(run.path, TRAINING) for run in runs if run.status == TRAINING]  # its summary is an old session's
    if not runs:
        print(f"rmsnorm-report claims: no runs (summary.json files) under {', '.join(map(str, args.runs))}"
              + "".join(f"; {path} ({why})" for path, why in left_out), file=sys.stderr)
        return 2
    scales = sorted({f"{run.scale} on {run.data}" for run in runs})
    if len(scales) > 1:
        print(f"rmsnorm-report claims: runs of several scales or data sets ({'; '.join(scales)}): their verdicts "
              "would mix them; judge each separately", file=sys.stderr)
        return 2
    measured = None
    if args.speed is not None:
        try:
            measured = read_speed(args.speed)
        except SpeedUnreadable as err:
            measured = {}
            print(f"rmsnorm-report claims: {args.speed} cannot be read as a speed.json ({err})", file=sys.stderr)
        if not measured:
            print(f"rmsnorm-report claims: {args.speed} holds no readable side-by-side timing: give a speed.json "
                  "that `make demo` or `make small` wrote (python -m rmsnorm_repro.campaigns.demo --report-only --speed)",
                  file=sys.stderr)
            return 2
    text = "\n".join(markdown(judge(runs, measured, table1=args.table1), scales[0])) + "\n"
    if left_out:  # named on the page too, by their folder under the path given (no folder of this machine)
        def shown(path: Path) -> str:
            root = next(Path(r) for r in args.runs if path == Path(r) or Path(r) in path.parents)
            return printable(path.relative_to(root).as_posix() if path != root else root.name)
        text += "\nLeft out of these verdicts: " + "; ".join(
            f"`{shown(path)}` ({why.replace(str(path), '').lstrip(':/ ') or why})" for path, why in left_out) + ".\n"
    print(text, end="")
    if left_out:
        print("rmsnorm-report claims: left out of these verdicts: " +
              ", ".join(f"{path} ({why})" for path, why in left_out), file=sys.stderr)
    if args.out is not None:
        try:
            atomic_write_text(args.out, text)
        except OSError as err:
            print(f"rmsnorm-report claims: {cannot_write(err, 'choose a file you can write with --out')}",
                  file=sys.stderr)
            return 2
        print(f"wrote {args.out}", file=sys.stderr)
    if damaged:  # never exit 0 on verdicts a damaged record may have changed
        print(f"rmsnorm-report claims: {damaged} run(s) could not be read and are not in these verdicts: repair or "
              "delete them (named above)", file=sys.stderr)
        return 1
    return 0
