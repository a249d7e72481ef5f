"""The paper's claims, checked against our runs: each gives a verdict and the numbers behind it.

A verdict is "holds", "does not hold" or "cannot tell" (too few runs, or the runs are missing). The
tests are stated in each function's docstring and in the line it returns, so a reader can disagree
with a threshold knowing what it was. Each claim is framed as the paper frames it: a match (`equivalence`),
a direction (`direction`, `all_directions`), a non-inferiority (Figure 4), a trend over p (Figure 3), a count
of divergences (Figure 4's instability); the rules themselves are report/rules.py's, the speed claims
report/speed_claims.py's; campaigns/calibrate.py measures each rule's error rates (docs/verdicts.md). A group
with an incomplete run (diverged, failed, capped) never "holds" on its survivors, and a group at its
metric's bound (BLEU 100, error 0) is not judged.
`judge` gives every claim some runs bear on; `rmsnorm-report claims RUN_OR_DIR...` prints it (`main`).
"""
from __future__ import annotations

import numpy as np
from scipy import stats

from .aggregate import TRAIN_LOSS, TRAINED, Group, Run, Stat, group_runs, resolve_metric
from .paired import Measured
from .rules import (FAILS, HOLDS, UNSURE, Claim, all_directions, direction, equivalence, fmt_stat as _fmt,
                    markdown as _table, non_inferiority, p_trend, power_note)
from .speed_claims import speed_claims, table3_claim

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
# where the paper claims a direction rather than a match: (task, norm) -> "below" or "above" LayerNorm, the
# paper's numbers, and the effect a direction's power is simulated at (the paper's difference)
DIRECTIONS = {("convpool", "rmsnorm"): "below", ("convpool", "batchnorm"): "below", ("convpool", "weightnorm"): "below"}
DIRECTION_SOURCES = {("convpool", "rmsnorm"): (" (Table 10: 8.83% vs 10.49%)", 1.66),
                     ("convpool", "batchnorm"): (" (Table 10: 8.25% vs 10.49%)", 2.24),
                     ("convpool", "weightnorm"): (" (Table 10: 8.28% vs 10.49%)", 2.21)}
NAMES = {"rmsnorm": "RMSNorm", "prmsnorm": "pRMSNorm", "batchnorm": "BatchNorm", "weightnorm": "WeightNorm"}
TASK_ORDER = ("rnnsearch", "transformer", "reader", "retrieval", "convpool")
# each task's quality metric's range: a group at an end (a ceiling or a floor) has no spread to judge by
BOUNDS = {"rnnsearch": (0.0, 100.0), "transformer": (0.0, 100.0), "reader": (0.0, 1.0), "retrieval": (0.0, 600.0),
          "convpool": (0.0, 100.0)}
# below this validation BLEU a translation model has learned nothing worth comparing
LEARNED_BLEU = 1.0
# Table 4's "fails to train": every run diverged, or BLEU decidedly below this fraction of LayerNorm's
FAILS_TO_TRAIN_FRACTION = 0.5
# below this p a one-sided Fisher's exact test calls one norm's divergences more frequent (Figure 4)
DIVERGENCE_LEVEL = 0.05
# the per-claim false verdict rate every rule keeps to (docs/verdicts.md, tests/campaigns/test_calibrate.py)
FALSE_VERDICT_BOUND = 0.10


def markdown(claims: list[Claim], scope: str) -> list[str]:
    """The claims table (rules.markdown), then one line: how many claims the noise rules judged and how
    many false verdicts that many would give by chance."""
    return [*_table(claims, scope), "", tally(claims)]


def tally(claims: list[Claim]) -> str:
    """How many claims were judged by a rule of noise (Table 1's exact rows and Table 3's undecidable one
    aside), their verdicts, and the false verdicts expected by chance at FALSE_VERDICT_BOUND each."""
    ruled = [c for c in claims if not c.claim.startswith(("Table 1,", "Table 3:"))]
    judged = [c for c in ruled if c.verdict in (HOLDS, FAILS, UNSURE)]  # not: a tier's "not judged at ..."
    count = {v: sum(c.verdict == v for c in judged) for v in (HOLDS, FAILS, UNSURE)}
    decided = count[HOLDS] + count[FAILS]
    skipped = f" ({len(ruled) - len(judged)} more not judged here: the reason in each row)" if len(ruled) > len(judged) else ""
    return (f"{len(judged)} claims judged by the noise rules (Table 1's computed rows aside): {count[HOLDS]} hold, "
            f"{count[FAILS]} do not hold, {count[UNSURE]} cannot tell{skipped}. Each rule's false verdict rate is at most "
            f"{FALSE_VERDICT_BOUND:.0%} a claim (docs/verdicts.md), so by chance alone up to "
            f"{FALSE_VERDICT_BOUND * len(judged):.1f} of these verdicts could be false; of the {decided} decided, "
            f"about {FALSE_VERDICT_BOUND * decided:.1f} at worst.")


def incomplete(groups: list[Group]) -> list[str]:
    """Every run of these groups that did not finish its steps: diverged, failed, interrupted, or stopped
    by the wall-clock cap (Run.capped): the survivors alone would speak for a group that partly failed."""
    cap = "stopped by the wall-clock cap (train.max_minutes)"
    return [f"{group.label} seed {run.seed} {cap if run.capped else run.status}"
            for group in groups for run in group.runs if run.status != TRAINED or run.capped]


def survivors_only(verdict: str, text: str, groups: list[Group]) -> tuple[str, str]:
    """A verdict from groups with incomplete runs: they are named, and the claim cannot hold on the
    survivors alone (holds becomes cannot tell)."""
    missing = incomplete(groups)
    if not missing:
        return verdict, text
    note = f"incomplete runs, left out of the numbers: {', '.join(missing)}"
    if verdict == HOLDS:
        return UNSURE, f"{text}; {note}: a claim cannot hold on the survivors alone"
    return verdict, f"{text}; {note}"


def at_bound(task: str, stats_by_label: dict[str, Stat]) -> str | None:
    """Why a comparison cannot be judged when a group sits at the metric's bound (all its seeds at the
    ceiling or the floor: BOUNDS), else None."""
    lo, hi = BOUNDS.get(task, (-np.inf, np.inf))
    ends = [f"{label} at {'the ceiling' if s.mean >= hi else 'the floor'} ({s.mean:g})"
            for label, s in stats_by_label.items() if s is not None and (s.mean >= hi or s.mean <= lo)]
    return (f"{'; '.join(ends)}: at the metric's bound its seeds cannot spread, so no interval speaks for it"
            if ends else None)


def _by_norm(groups: list[Group], task: str) -> dict[str, Group]:
    """The first group of each norm of a task (the paper's default p comes first for pRMSNorm)."""
    out: dict[str, Group] = {}
    for group in groups:
        if group.task == task:
            out.setdefault(group.norm, group)
    return out


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
    found = all_directions(claim, [(g.label, s, "Baseline", b) for g, s in zip(normalized, others)], below=True,
                           prefix=_window_text(metric, window, "step"))
    return Claim(claim, *survivors_only(found.verdict, found.numbers, [base, *normalized]))


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
    numbers = (f"{_window_text(metric, steps_window, 'step')}: Baseline {_fmt(bs, 3)}, LayerNorm {_fmt(ls, 3)}; "
               f"{_window_text(metric, seconds_window, 'wall_s')}: Baseline {_fmt(bw, 3)}, LayerNorm {_fmt(lw, 3)}; "
               f"per-step minus per-second loss, LayerNorm against the Baseline: {text}")
    return Claim(claim, *survivors_only(verdict, numbers, [base, ln]))


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
    found = all_directions(claim, [("WeightNorm", w, g.label, s) for g, s in zip(others, rest)], below=False,
                           prefix=_window_text(metric, window, "step"))
    return Claim(claim, *survivors_only(found.verdict, found.numbers, [wn, *others]))


def _match(task: str, norm: str, ln: Group | None, other: Group | None, names: tuple[str, ...], claim_of,
           bootstrap: str | None = None) -> Claim:
    """One norm against LayerNorm on the first of `names` both have: a match within the task's margin by
    `equivalence`, or the paper's direction (DIRECTIONS) by `direction`; the bound and survivors rules
    applied, and the rule's power at these seeds and spreads stated. claim_of(metric) words the claim."""
    _, _, margin, unit = QUALITY[task]
    name, directed = NAMES.get(norm, norm), DIRECTIONS.get((task, norm))
    metric = next((m for m in names if ln is not None and other is not None and ln.stat(m) is not None
                   and other.stat(m) is not None), None)
    claim = claim_of(metric)
    if ln is None or other is None:
        return Claim(claim, UNSURE, f"needs {task} runs of layernorm and {norm}")
    if other.fails_to_train:
        return Claim(claim, FAILS, f"every {norm} run diverged")
    if metric is None:
        return Claim(claim, UNSURE, f"no completed runs with {' or '.join(names)} for both")
    a, b = ln.stat(metric), other.stat(metric)
    numbers = f"LayerNorm {_fmt(a)}, {other.label.replace(norm, name, 1)} {_fmt(b)} (`{metric}`)"
    if task in ("rnnsearch", "transformer") and max(a.mean, b.mean) < LEARNED_BLEU:
        return Claim(claim, UNSURE, f"{numbers}; neither reached BLEU {LEARNED_BLEU:g}: nothing learned")
    bound = at_bound(task, {"LayerNorm": a, name: b})
    if bound is not None:
        verdict, text = survivors_only(UNSURE, f"{numbers}; {bound}", [ln, other])
        return Claim(claim, verdict, text)
    if directed:
        verdict, reason = direction(b, a, directed == "below")
        effect = DIRECTION_SOURCES.get((task, norm), ("", margin))[1]
        note = power_note("direction", b, a, effect, margin, unit) if b.n > 1 and a.n > 1 else ""
    else:
        verdict, reason = equivalence(b, a, margin, unit)
        note = power_note("match", b, a, 0.0, margin, unit) if b.n > 1 and a.n > 1 else ""
    text = "; ".join(part for part in (numbers, reason, note, bootstrap) if part)
    return Claim(claim, *survivors_only(verdict, text, [ln, other]))


def match_claims(groups: list[Group], tasks: tuple[str, ...] = TASK_ORDER,
                 metrics: dict[str, tuple[str, ...]] | None = None,
                 bootstrap: dict[tuple[str, str], str] | None = None) -> list[Claim]:
    """RMSNorm's and pRMSNorm's quality each against LayerNorm's as the paper frames it (`_match`): a match
    within the task's margin (QUALITY), or, where the paper claims a direction (DIRECTIONS: CIFAR-10's
    RMSNorm, BatchNorm and WeightNorm, Table 10), a direction. Each claim names the split its metric is
    scored on. metrics: per task, the metric names to try (default QUALITY's); bootstrap: (task, norm) -> a
    paired bootstrap summary. BatchNorm's and WeightNorm's claims appear where they ran."""
    claims = []
    for task in tasks:
        norms = _by_norm(groups, task)
        names, shown, margin, unit = QUALITY[task]
        names = (metrics or {}).get(task, names)
        extra = [n for (t, n) in DIRECTIONS if t == task and n not in ("rmsnorm", "prmsnorm") and n in norms]
        for norm in ("rmsnorm", "prmsnorm", *extra):
            name, directed = NAMES[norm], DIRECTIONS.get((task, norm))

            def claim_of(metric: str | None) -> str:
                if directed:
                    return (f"{task}: {name}'s {_shown(shown, metric)} is {directed} LayerNorm's"
                            f"{DIRECTION_SOURCES.get((task, norm), ('', 0))[0]}")
                return f"{task}: {name}'s {_shown(shown, metric)} matches LayerNorm's (within {margin:g}{unit})"
            claims.append(_match(task, norm, norms.get("layernorm"), norms.get(norm), names, claim_of,
                                 (bootstrap or {}).get((task, norm))))
    return claims


def test17_claims(groups: list[Group], tasks: tuple[str, ...]) -> list[Claim]:
    """Tables 2 and 4's second test set: RMSNorm and pRMSNorm match LayerNorm on newstest2017 too (within
    1 BLEU, by `_match`), where the runs scored one (test17_bleu: paper scale on WMT14)."""
    claims = []
    for task in (t for t in ("rnnsearch", "transformer") if t in tasks):
        norms = _by_norm(groups, task)
        if not any(g.stat("test17_bleu") is not None for g in norms.values()):
            continue
        for norm in ("rmsnorm", "prmsnorm"):
            claims.append(_match(task, norm, norms.get("layernorm"), norms.get(norm), ("test17_bleu",),
                                 lambda _m, norm=norm: f"{task}: {NAMES[norm]}'s Test17 BLEU matches LayerNorm's "
                                                       f"(within {QUALITY[task][2]:g} BLEU)"))
    return claims


def l2norm_claim(groups: list[Group], metrics: tuple[str, ...] = QUALITY["rnnsearch"][0]) -> Claim:
    """Table 2: L2-Norm's BLEU is below the other models' (Baseline, LayerNorm, RMSNorm, pRMSNorm: those
    that ran), each comparison by `all_directions` on the first of `metrics` both sides have; a group at
    BLEU's bound, or with incomplete runs, keeps it from holding."""
    norms = _by_norm(groups, "rnnsearch")
    l2, others = norms.get("l2norm"), [norms[n] for n in ("none", "layernorm", "rmsnorm", "prmsnorm") if n in norms]
    metric = next((m for m in metrics if l2 is not None and l2.stat(m) is not None
                   and any(g.stat(m) is not None for g in others)), None)
    claim = f"Table 2: L2-Norm's RNNSearch {split_of(metric or metrics[0])} BLEU is below the other models'"
    if metric is None:
        return Claim(claim, UNSURE, "needs rnnsearch runs of l2norm and of another norm with " + " or ".join(metrics))
    judged = [g for g in others if g.stat(metric) is not None]
    pairs = [("L2-Norm", l2.stat(metric), g.label, g.stat(metric)) for g in judged]
    found = all_directions(claim, pairs, below=True, prefix=f"`{metric}`")
    verdict, text = found.verdict, found.numbers
    bound = at_bound("rnnsearch", {"L2-Norm": l2.stat(metric), **{g.label: g.stat(metric) for g in judged}})
    if bound is not None and verdict != UNSURE:
        verdict, text = UNSURE, f"{text}; {bound}"
    return Claim(claim, *survivors_only(verdict, text, [l2, *judged]))


def transformer_baseline_claim(groups: list[Group], metrics: tuple[str, ...] = QUALITY["transformer"][0]) -> Claim:
    """Table 4: the Transformer without normalization fails to train.

    Holds when every Baseline run diverged, or every completed one (2+) scored BLEU 0, or the 95% Welch
    interval of its BLEU minus FAILS_TO_TRAIN_FRACTION x LayerNorm's lies below 0; does not hold when that
    interval lies above 0; cannot tell otherwise, or while LayerNorm is below LEARNED_BLEU (nothing to
    measure against). Diverged runs are named.
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
    numbers = (f"Baseline {base.status_note()} runs, BLEU {_fmt(b)} vs LayerNorm {_fmt(l)} (`{metric}`); fails "
               f"to train: every run diverged, or BLEU decidedly below {FAILS_TO_TRAIN_FRACTION:g} x LayerNorm's")
    missing = incomplete([base])
    named = f"; incomplete Baseline runs: {', '.join(missing)}" if missing else ""
    if b.n > 1 and b.mean == 0.0:
        return Claim(claim, HOLDS, f"{numbers}; every completed Baseline run scored BLEU 0{named}")
    threshold = Stat(FAILS_TO_TRAIN_FRACTION * l.mean, FAILS_TO_TRAIN_FRACTION * l.std, l.n)
    verdict, reason = direction(b, threshold, below=True)
    return Claim(claim, verdict, f"{numbers}; Baseline minus {FAILS_TO_TRAIN_FRACTION:g} x LayerNorm: {reason}{named}")


def table5_claim(groups: list[Group]) -> Claim:
    """Table 5: normalization shrinks the decoder's hidden-to-hidden summed inputs.

    Per run |mean| and std over all positions (table5_mean_all, table5_std_all); LayerNorm's and RMSNorm's
    each below the Baseline's by `all_directions` (Welch 95% intervals, 2+ seeds a side)."""
    claim = "Table 5: LayerNorm and RMSNorm keep the decoder's summed inputs smaller (|M| and S) than the Baseline"
    norms = _by_norm(groups, "rnnsearch")

    def per_run(group: Group, key: str, fold=float) -> Stat | None:
        return Stat.of(fold(v) for run in group.completed if (v := run.metric(key)) is not None)
    found = {n: (per_run(norms[n], "table5_mean_all", abs), per_run(norms[n], "table5_std_all"))
             for n in ("none", "layernorm", "rmsnorm") if n in norms}
    if len(found) < 3 or any(m is None or s is None for m, s in found.values()):
        return Claim(claim, UNSURE, "needs table5_mean_all / table5_std_all of none, layernorm and rmsnorm runs")
    bm, bs = found["none"]
    pairs = [(f"{n} {what}", x, f"Baseline {what}", base) for n in ("layernorm", "rmsnorm")
             for what, x, base in (("|M|", found[n][0], bm), ("S", found[n][1], bs))]
    found_claim = all_directions(claim, pairs, below=True)
    return Claim(claim, *survivors_only(found_claim.verdict, found_claim.numbers,
                                        [norms[n] for n in ("none", "layernorm", "rmsnorm")]))


def p_claim(p_groups: list[Group], margin: float = QUALITY["rnnsearch"][2]) -> Claim:
    """Fig. 3: p has little effect: the change of best valid BLEU across the swept p is within +-margin.

    A least-squares line through every completed pRMSNorm run's (p, best valid BLEU); its change over the
    swept range (slope x (max p - min p)) gets a 90% t interval from the line's own residuals (rules.p_trend:
    pRMSNorm's own noise, never other norms'). Holds inside (-margin, margin), does not hold entirely
    outside it, cannot tell otherwise (TOST at 5%). A linear trend: a p that helps only in the middle of the
    range is not what this rule looks for.
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
    at_ceiling = [p for p in ps if all(v >= 100.0 for q, v in points if q == p)]
    verdict, change, interval, df = p_trend([p for p, _ in points], [v for _, v in points], margin)
    if interval is None:
        return Claim(claim, UNSURE, f"{means}; change {change:+.2f}; no noise estimate: pRMSNorm's own runs need more "
                                    "points than a line has parameters (3+ runs over 2+ values of p)")
    text = (f"{means}; the fitted change over p={min(ps):g}-{max(ps):g}: {change:+.2f}, 90% interval "
            f"[{interval[0]:+.2f}, {interval[1]:+.2f}] ({df} df, pRMSNorm's own residuals) vs +-{margin:g}")
    text += {HOLDS: ": inside", FAILS: ": outside", UNSURE: ": more runs would decide"}[verdict]
    if at_ceiling:
        verdict, text = UNSURE, text + (f"; p={', '.join(f'{p:g}' for p in at_ceiling)} at BLEU's ceiling (100): no "
                                        "spread there to judge by")
    return Claim(claim, *survivors_only(verdict, text, p_groups))


def init_centre_claim(groups: list[Group], margin: float = QUALITY["rnnsearch"][2]) -> Claim:
    """Fig. 4: with the init centre at 0.2, RMSNorm trains at least as well as LayerNorm.

    Non-inferiority on best valid BLEU by the one interval rule (Welch's 90% interval of RMSNorm minus
    LayerNorm, 2+ seeds a side): holds when it lies above -margin, does not hold when it lies below,
    cannot tell otherwise. Holds outright when every LayerNorm run diverged and RMSNorm's did not; any
    other incomplete run is named and keeps it from holding.
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
        return Claim(claim, *survivors_only(HOLDS, numbers + "; every LayerNorm run diverged", [rms]))
    if a is None or b is None:
        return Claim(claim, UNSURE, numbers)
    if max(a.mean, b.mean) < LEARNED_BLEU:
        return Claim(claim, UNSURE, numbers + f"; neither reached BLEU {LEARNED_BLEU:g} at this step count")
    verdict, interval = non_inferiority(b, a, margin)
    if interval is None:
        return Claim(claim, UNSURE, numbers + "; an interval needs 2+ seeds a side")
    text = (f"{numbers}; difference {b.mean - a.mean:+.2f}, 90% interval [{interval[0]:+.2f}, {interval[1]:+.2f}] "
            f"vs -{margin:g}" + ("; a zero-width interval decides nothing" if interval[0] == interval[1] else "")
            + f"; {power_note('non-inferiority', b, a, 0.0, margin)}")
    return Claim(claim, *survivors_only(verdict, text, [ln, rms]))


def instability_claim(groups: list[Group]) -> Claim:
    """Fig. 4: with the init centre at 0.2, LayerNorm is unstable (its runs diverge) where RMSNorm's are not.

    Counts of diverged runs, LayerNorm's against RMSNorm's, by a one-sided Fisher's exact test
    (scipy.stats.fisher_exact): holds when LayerNorm diverges more often at p < DIVERGENCE_LEVEL, does not
    hold when RMSNorm does, cannot tell otherwise (with 2 seeds a side the smallest p is 1/6: never decided)."""
    claim = "Fig. 4: with init centre 0.2, LayerNorm is unstable (diverges more often than RMSNorm)"
    norms = _by_norm(groups, "rnnsearch")
    ln, rms = norms.get("layernorm"), norms.get("rmsnorm")
    if ln is None or rms is None:
        return Claim(claim, UNSURE, "needs fig4 runs of layernorm and rmsnorm")
    verdict, text = divergence_verdict(*(sum(r.status == "diverged" for r in g.runs) for g in (ln, rms)),
                                       len(ln.runs), len(rms.runs))
    return Claim(claim, verdict, f"diverged: LayerNorm {ln.statuses.get('diverged', 0)} of {len(ln.runs)}, RMSNorm "
                                 f"{rms.statuses.get('diverged', 0)} of {len(rms.runs)}; {text}")


def divergence_verdict(diverged_x: int, diverged_base: int, n_x: int, n_base: int) -> tuple[str, str]:
    """(verdict, reason) of "x diverges more often than base": one-sided Fisher's exact tests both ways."""
    table = [[diverged_x, n_x - diverged_x], [diverged_base, n_base - diverged_base]]
    more = stats.fisher_exact(table, alternative="greater").pvalue
    less = stats.fisher_exact(table, alternative="less").pvalue
    text = f"one-sided Fisher's exact p = {more:.3g} (more often), {less:.3g} (less often) vs {DIVERGENCE_LEVEL:g}"
    return (HOLDS if more < DIVERGENCE_LEVEL else FAILS if less < DIVERGENCE_LEVEL else UNSURE), text


def init_centre(run: Run) -> float:
    """The run's weight-init centre (task.model.init_center; 0 where the task has none): Figure 4's runs
    shift it to 0.2."""
    value = (run.config.get("task", {}).get("model") or {}).get("init_center", 0.0)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


def judge(runs: list[Run], measured: dict[str, Measured] | None = None,
          bootstrap: dict[tuple[str, str], str] | None = None, table1: bool = False) -> list[Claim]:
    """Every claim of the paper that these runs bear on (runs of one scale, any scale), each with its
    verdict and numbers: the claims of the tasks the runs trained, Figure 4's from runs with a shifted
    init centre, Figure 3's from the RNNSearch pRMSNorm runs at every p (their own noise); `table1` adds
    Table 1's rows (computed, not trained). What the mini and small reports and `rmsnorm-report claims`
    print. Table 3's runs (codebase=theano|pytorch: the authors' two implementations' norm settings) give
    Table 3's claim only; the other claims are judged on the suite's own recipe."""
    codebase = [run for run in runs if run.config.get("codebase")]
    runs = [run for run in runs if not run.config.get("codebase")]
    shifted = [run for run in runs if init_centre(run) != 0.0]
    plain = [run for run in runs if init_centre(run) == 0.0]
    groups, tasks = group_runs(plain), {run.task for run in runs}
    ordered = tuple(t for t in TASK_ORDER if t in tasks)
    scale = next((run.scale for run in runs), "?")
    device = "cuda" if any(str((run.summary.get("env") or {}).get("device", "")).startswith("cuda") for run in runs) \
        else "cpu"
    claims = [*table1_claims()] if table1 else []
    if "rnnsearch" in tasks:
        claims += [convergence_claim(groups), wallclock_claim(groups)]
    claims += match_claims(groups, ordered, bootstrap=bootstrap) + test17_claims(groups, ordered)
    if "rnnsearch" in tasks:
        claims += [l2norm_claim(groups), weightnorm_claim(groups)]
    if "transformer" in tasks:
        claims.append(transformer_baseline_claim(groups))
    claims += speed_claims(groups, measured, ordered, scale, device)
    if codebase:
        by_codebase: dict[str, list[Run]] = {}
        for run in codebase:
            by_codebase.setdefault(str(run.config["codebase"]), []).append(run)
        claims.append(table3_claim({name: group_runs(r) for name, r in by_codebase.items()}))
    if "rnnsearch" in tasks:
        fig4 = group_runs(shifted)
        claims += [table5_claim(groups),
                   p_claim(group_runs([r for r in plain if r.task == "rnnsearch" and r.norm == "prmsnorm"])),
                   init_centre_claim(fig4), instability_claim(fig4)]
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
