"""The paper's claims, checked against our runs: each gives a verdict and the numbers behind it.

A verdict is "holds", "does not hold" or "cannot tell" (too few runs, or the runs are missing). The
tests are stated in each function's docstring and in the line it returns, so a reader can disagree
with a threshold knowing what it was.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from .aggregate import Group, Run, Stat, group_runs, mean_curve, speedup, speedup_interval

HOLDS, FAILS, UNSURE = "holds", "does not hold", "cannot tell"
# quality metric per task: (metric names tried in order, how to print it); which way is better:
# rmsnorm_repro.record.metric_goal
QUALITY = {
    "rnnsearch": (("test14_bleu", "test_bleu"), "test BLEU"),
    "transformer": (("test14_bleu", "test_bleu"), "test BLEU"),
    "reader": (("error",), "test error"),
    "retrieval": (("rsum", "caption_r1"), "test R@K sum"),
    "convpool": (("error",), "test error %"),
}
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
    """Each method's row of Table 1, computed by report/table1.py, cell by cell against the paper."""
    from . import table1

    changes, paper = table1.compute(), table1.read_paper()
    claims = []
    for method in table1.METHODS:
        cells = [(t.title, table1.verdict(changes[method][t.key]), paper[method][t.key]) for t in table1.TRANSFORMATIONS]
        wrong = [f"{title}: ours {ours}, paper {theirs}" for title, ours, theirs in cells if ours != theirs]
        claims.append(Claim(f"Table 1, {method}: invariances as published", FAILS if wrong else HOLDS,
                            "; ".join(wrong) if wrong else f"{len(cells)}/{len(cells)} cells match the paper"))
    return claims


def _steps_to_reach(xs: list[float], ys: list[float], target: float) -> float | None:
    """First step at which the 3-point running mean of the curve is at or below target."""
    for i in range(len(ys)):
        window = ys[max(0, i - 2): i + 1]
        if sum(window) / len(window) <= target:
            return xs[i]
    return None


def convergence_claim(groups: list[Group]) -> Claim:
    """Fig. 1: normalized RNNSearch reaches the Baseline's final training loss in fewer steps.

    Target: the Baseline's loss averaged over its last three logged points (mean over seeds); each
    norm's step is where its own seed-averaged, 3-point smoothed loss first reaches that target.
    """
    claim = "Fig. 1: normalized RNNSearch converges in fewer steps than the Baseline"
    norms = _by_norm(groups, "rnnsearch")
    base = norms.get("none")
    normalized = [norms[n] for n in ("layernorm", "rmsnorm", "prmsnorm") if n in norms]
    if base is None or not base.completed or not normalized:
        return Claim(claim, UNSURE, "needs completed rnnsearch runs of none and at least one norm")
    bx, by, _ = mean_curve(base.completed, "loss")
    if len(by) < 3:
        return Claim(claim, UNSURE, "the Baseline logged fewer than 3 loss points")
    target = sum(by[-3:]) / 3
    parts, faster = [f"Baseline's final loss {target:.3f} at step {bx[-1]:g}"], []
    for group in normalized:
        xs, ys, _ = mean_curve(group.completed, "loss")
        step = _steps_to_reach(xs, ys, target)
        faster.append(step is not None and step < bx[-1])
        parts.append(f"{group.label} reaches it at step {step:g}" if step is not None else f"{group.label} never does")
    return Claim(claim, HOLDS if all(faster) else FAILS, "; ".join(parts))


# A difference's verdict (compare.py's tables; within_noise_claims asks the same question)
WITHIN_NOISE, BETTER, WORSE, TOO_FEW = "within noise", "better", "worse", "cannot tell (n < 2)"


def noise_bound(a: Stat, b: Stat) -> float:
    """Two standard errors of the difference of two means: 2 * sqrt(s_a^2 / n_a + s_b^2 / n_b)."""
    return 2 * math.sqrt(a.std ** 2 / a.n + b.std ** 2 / b.n)


def difference_verdict(x: Stat, base: Stat, goal: str) -> str:
    """x against base for a metric whose better end is `goal` ("max"/"min"): TOO_FEW unless both have
    2+ values, WITHIN_NOISE when |mean_x - mean_base| <= noise_bound, else BETTER or WORSE."""
    if x.n < 2 or base.n < 2:
        return TOO_FEW
    diff = x.mean - base.mean
    if abs(diff) <= noise_bound(x, base):
        return WITHIN_NOISE
    return BETTER if (diff > 0) == (goal == "max") else WORSE


def within_noise_claims(groups: list[Group]) -> list[Claim]:
    """RMSNorm's and pRMSNorm's quality are each within seed noise of LayerNorm's, per task.

    Within noise: |mean_X - mean_LN| <= 2 * sqrt(s_X^2 / n_X + s_LN^2 / n_LN) (two standard errors of
    the difference); needs at least 2 completed seeds of each.
    """
    claims = []
    for task in TASK_ORDER:
        norms = _by_norm(groups, task)
        names, shown = QUALITY[task]
        for norm, name in (("rmsnorm", "RMSNorm"), ("prmsnorm", "pRMSNorm")):
            claim = f"{task}: {name}'s {shown} is within seed noise of LayerNorm's"
            if "layernorm" not in norms or norm not in norms:
                claims.append(Claim(claim, UNSURE, f"needs {task} runs of layernorm and {norm}"))
                continue
            ln, other = norms["layernorm"], norms[norm]
            metric = next((m for m in names if ln.stat(m) is not None and other.stat(m) is not None), None)
            if metric is None:
                claims.append(Claim(claim, UNSURE, f"no completed runs with {' or '.join(names)} for both"))
                continue
            a, b = ln.stat(metric), other.stat(metric)
            numbers = f"LayerNorm {_fmt(a)}, {other.label.replace(norm, name, 1)} {_fmt(b)} (`{metric}`)"
            if a.n < 2 or b.n < 2:
                claims.append(Claim(claim, UNSURE, numbers + "; needs 2+ seeds of each for a noise estimate"))
                continue
            bound, diff = noise_bound(a, b), abs(a.mean - b.mean)
            claims.append(Claim(claim, HOLDS if difference_verdict(b, a, "max") == WITHIN_NOISE else FAILS,
                                f"{numbers}; |difference| {diff:.2f} vs 2 standard errors {bound:.2f}"))
    return claims


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


def speed_claims(groups: list[Group]) -> list[Claim]:
    """RMSNorm (and pRMSNorm, where it ran) take less time per training step than LayerNorm, per task.

    With step-time intervals (aggregate.speedup_interval): holds when the speed-up's 95% interval lies
    above 0, does not hold when it lies below, and "cannot tell" (within noise) when it holds 0.
    Runs without intervals (older summaries) fall back to the sign of the speed-up.
    """
    claims = []
    for task in TASK_ORDER:
        norms = _by_norm(groups, task)
        ln = norms.get("layernorm")
        for name in ("rmsnorm", "prmsnorm"):
            group = norms.get(name)
            if ln is None or ln.time() is None or group is None or group.time() is None:
                if name == "rmsnorm":
                    claims.append(Claim(f"{task}: rmsnorm is faster per step than LayerNorm", UNSURE,
                                        f"needs timed {task} runs of layernorm and rmsnorm"))
                continue
            gain = speedup(group.time(), ln.time())
            interval = speedup_interval(group, ln)
            numbers = (f"s / 1k steps: LayerNorm {_fmt_time(ln)}, {group.label} {_fmt_time(group)}; "
                       f"speed-up (T_LN - T_X) / T_LN = {gain:.1%}")
            if interval is None:
                verdict = HOLDS if gain > 0 else FAILS
                numbers += " (no interval: the runs did not record one)"
            else:
                verdict = UNSURE if interval.holds_zero else HOLDS if interval.lo > 0 else FAILS
                numbers += f", 95% interval [{interval.lo:.1%}, {interval.hi:.1%}]"
                numbers += "; within noise" if interval.holds_zero else ""
            claims.append(Claim(f"{task}: {group.label} is faster per step than LayerNorm", verdict, numbers))
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


def p_claim(p_groups: list[Group], noise_groups: list[Group]) -> Claim:
    """Fig. 3: p has little effect: the range of best valid BLEU over p is within 3 seed stds.

    The seed std is pooled over the Table 2 groups that have 2+ seeds (for a handful of draws from
    one distribution the expected range is about 2 stds).
    """
    claim = "Fig. 3: pRMSNorm's BLEU changes little with p"
    points = sorted((g.p, g.stat("bleu", "best")) for g in p_groups if g.stat("bleu", "best") is not None)
    if len(points) < 2:
        return Claim(claim, UNSURE, "needs runs at two or more values of p")
    values = [s.mean for _, s in points]
    if max(values) < LEARNED_BLEU:
        return Claim(claim, UNSURE, ", ".join(f"p={p:g}: {s.mean:.2f}" for p, s in points) +
                     f"; no run reached BLEU {LEARNED_BLEU:g}: nothing learned to compare at this step count")
    spread = max(values) - min(values)
    stds = [s.std for g in noise_groups if (s := g.stat("bleu", "best")) is not None and s.n > 1]
    numbers = ", ".join(f"p={p:g}: {s.mean:.2f}" for p, s in points) + f"; range {spread:.2f}"
    if not stds:
        return Claim(claim, UNSURE, numbers + "; no seed noise estimate (Table 2 groups need 2+ seeds)")
    noise = math.sqrt(sum(s * s for s in stds) / len(stds))
    return Claim(claim, HOLDS if spread <= 3 * noise else FAILS, numbers + f" vs 3 x seed std {3 * noise:.2f}")


def init_centre_claim(groups: list[Group]) -> Claim:
    """Fig. 4: with the init centre at 0.2, RMSNorm trains at least as well as LayerNorm.

    Holds when RMSNorm completed and its best valid BLEU is at least LayerNorm's (or LayerNorm diverged).
    """
    claim = "Fig. 4: with init centre 0.2, RMSNorm stays robust where LayerNorm is less stable"
    norms = _by_norm(groups, "rnnsearch")
    ln, rms = norms.get("layernorm"), norms.get("rmsnorm")
    if ln is None or rms is None:
        return Claim(claim, UNSURE, "needs fig4 runs of layernorm and rmsnorm")
    a, b = ln.stat("bleu", "best"), rms.stat("bleu", "best")
    numbers = f"best valid BLEU: LayerNorm {_fmt(a)} ({ln.status_note()} runs), RMSNorm {_fmt(b)} ({rms.status_note()} runs)"
    if b is None:
        return Claim(claim, FAILS, numbers)
    if (a is None or a.mean < LEARNED_BLEU) and b.mean < LEARNED_BLEU:
        return Claim(claim, UNSURE, numbers + f"; neither reached BLEU {LEARNED_BLEU:g} at this step count")
    return Claim(claim, HOLDS if a is None or b.mean >= a.mean else FAILS, numbers)


def all_claims(main_runs: list[Run], p_runs: list[Run], init_runs: list[Run]) -> list[Claim]:
    groups = group_runs(main_runs)
    return [
        *table1_claims(),
        convergence_claim(groups),
        *within_noise_claims(groups),
        transformer_baseline_claim(groups),
        *speed_claims(groups),
        table5_claim(groups),
        p_claim(group_runs(p_runs), [g for g in groups if g.task == "rnnsearch"]),
        init_centre_claim(group_runs(init_runs)),
    ]
