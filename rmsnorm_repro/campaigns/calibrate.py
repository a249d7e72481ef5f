"""python -m rmsnorm_repro.campaigns.calibrate: each verdict rule's error rates and power, simulated, for the tiers
as their campaigns run them, into docs/verdicts.md.

The tiers are read from what runs: the mini tier from campaigns/demo.py's SWEEPS (each sweep's preset
narrowed by its overrides: tasks, norms, seeds, Figure 3's values of p), the small tier from
campaigns/small.py (TASKS, NORMS, DEFAULT_SEEDS), the paper tier from the presets (configs/experiment/).
Every statistical rule (report/rules.py, report/paired.py, Figure 4's divergence count) is run, as it is,
on simulated numbers for each claim's seeds: under no effect and at the margin, with the two groups'
spreads equal and 2x and 3x apart. A rule's false verdict rate is the larger of P(does not hold | the claim
is true) and P(holds | the claim is false: an effect at the margin; for a direction: no effect); its power
is P(holds | true) at a spread of half the margin. Then each claim's power at its tier's seeds with the
spreads its groups showed (small: results/small/runs; mini: results/mini/spreads.json) and the seeds a
side that give 80%. Seeded: the same numbers every time (tests/campaigns/test_calibrate.py checks the page).
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from omegaconf import OmegaConf

from ..atomic import atomic_write_text
from ..paths import configs_dir, repo_dir
from ..report import paired
from ..report.aggregate import group_runs, load_runs
from ..report.claims import DIRECTION_SOURCES, DIRECTIONS, QUALITY, divergence_verdict
from ..report.rules import FAILS, HOLDS, UNSURE, equivalence_decision, power, seeds_for_power, simulate, trend
from . import demo, small

DRAWS = 4000
SPEED_DRAWS = 300  # the speed simulation times rounds one by one (slow): fewer draws, rates to about +-2%
SEED = 0
NOISE = 0.5        # the less noisy group's seed standard deviation, in margins
SPREADS = (1, 2, 3)  # the noisier group's standard deviation, in multiples of the other's
# log step-time spreads of a side-by-side measurement: of one step (batch to batch, machine jitter), and
# of one norm's stretch of a round (its own place in the machine's state; what pairing cannot remove)
SPEED_NOISE = {"step": 0.10, "round": 0.04}
SPEED_STEPS = 8    # paired steps a round (bench.steps.side_by_side's default, every tier)
# Figure 4's divergence counts: a per-run divergence probability shared by both norms (no effect), and
# LayerNorm's against RMSNorm's when the paper is right
DIVERGE_NULL, DIVERGE_EFFECT = 0.3, (0.9, 0.0)
# where the mini tier's measured spreads come from (the demo's calibration runs)
MINI_SPREADS = Path("results") / "mini" / "spreads.json"


@dataclass(frozen=True)
class Tier:
    name: str
    tasks: dict[str, tuple[tuple[str, ...], int]]  # task -> (norms, seeds a side)
    fig3_ps: tuple[float, ...] = ()                 # Figure 3's values of p, one run each
    fig3_seeds: int = 1
    fig4_seeds: int = 0
    table3: bool = False
    spreads: dict[str, dict[str, dict]] = field(default_factory=dict)  # measured: task -> norm -> stat
    spreads_from: str = ""


def _sweep_params(experiment: str, overrides: tuple[str, ...] = ()) -> tuple[str, dict[str, str]]:
    """(task, sweep params) of a preset (configs/experiment/<experiment>.yaml) narrowed by overrides."""
    preset = OmegaConf.load(configs_dir() / "experiment" / f"{experiment}.yaml")
    params = {str(k): str(v) for k, v in OmegaConf.select(preset, "hydra.sweeper.params", default={}).items()}
    params.update(line.split("=", 1) for line in overrides)
    task = next((str(d["override /task"]) for d in preset.get("defaults", []) if "override /task" in d), "rnnsearch")
    return task, params


def _tier(name: str, sweeps: list[tuple[str, tuple[str, ...]]]) -> Tier:
    """A tier from (experiment, overrides) sweeps: table presets give tasks x norms x seeds, table3 its
    codebase runs, fig3 its values of p, fig4 its seeds."""
    tasks: dict[str, tuple[tuple[str, ...], int]] = {}
    fig3, fig3_seeds, fig4, table3 = (), 1, 0, False
    for experiment, overrides in sweeps:
        task, params = _sweep_params(experiment, overrides)
        seeds = len(params.get("seed", "1").split(","))
        if "codebase" in params:
            table3 = True
        elif "norm.p" in params:
            fig3, fig3_seeds = tuple(float(p) for p in params["norm.p"].split(",")), seeds
        elif experiment == "fig4":
            fig4 = seeds
        elif task not in tasks:
            tasks[task] = (tuple(params["norm"].split(",")), seeds)
    return Tier(name, tasks, fig3, fig3_seeds, fig4, table3)


def tiers() -> tuple[Tier, ...]:
    """The three tiers, read from the campaigns and presets, with the spreads their runs measured."""
    mini = _tier("mini (make demo)", [(s.experiment, s.overrides) for s in demo.SWEEPS])
    seeds = len(small.DEFAULT_SEEDS.split(","))
    small_tier = Tier("small (make small)", {task: (small.NORMS, seeds) for task in small.TASKS})
    paper = _tier("paper (the presets)", [(e, ()) for e in ("table2", "table3", "table4", "table6", "table7", "table9",
                                                           "fig3", "fig4")])
    mini_spreads, mini_from = mini_measured()
    small_spreads, small_from = small_measured()
    return (Tier(**{**mini.__dict__, "spreads": mini_spreads, "spreads_from": mini_from}),
            Tier(**{**small_tier.__dict__, "spreads": small_spreads, "spreads_from": small_from}), paper)


def mini_measured() -> tuple[dict, str]:
    """The mini tier's spreads: results/mini/spreads.json ({sweep: {norm: {metric, sd, n, mean}}}), saying where
    they come from (none where it is absent)."""
    repo = repo_dir()
    path = repo / MINI_SPREADS if repo is not None else None
    if path is not None and path.exists():
        return json.loads(path.read_text(encoding="utf-8")), f"{MINI_SPREADS.as_posix()}"
    return {}, f"{MINI_SPREADS.as_posix()} is absent"


def small_measured() -> tuple[dict, str]:
    """The small tier's spreads: each group of results/small/runs on the metric its match claim compares."""
    repo = repo_dir()
    root = repo / "results" / "small" / "runs" if repo is not None else None
    if root is None or not root.is_dir():
        return {}, "results/small/runs is absent"
    out: dict[str, dict] = {}
    for group in group_runs(load_runs(root)):
        found = group.first_metric(QUALITY[group.task][0]) if group.task in QUALITY else None
        if found is not None and group.norm not in out.get(group.task, {}):
            metric, stat = found
            out.setdefault(group.task, {})[group.norm] = {"metric": metric, "sd": stat.std, "n": stat.n,
                                                          "mean": stat.mean}
    return out, "results/small/runs"


# The rules under simulation ---------------------------------------------------------------------------
def _rates(verdicts) -> dict[str, float]:
    verdicts = np.asarray(verdicts)
    return {v: float(np.mean(verdicts == v)) for v in (HOLDS, FAILS)}


def seeds_rule(rule: str, n: int, ratio: float, comparisons: int = 1, draws: int = DRAWS) -> dict[str, float]:
    """A rule of two groups of n seeds (rules.simulate), margins as units, the first group's spread `ratio`
    times the second's (NOISE): no effect, and an effect of one margin (against the claim for a match or a
    non-inferiority, for it for a direction)."""
    if n < 2:
        return {"false": 0.0, "power": 0.0, "note": f"{n} seed a side: always cannot tell"}
    rng = np.random.default_rng(SEED + n)
    sd_x, sd_b = NOISE * ratio, NOISE
    null = _rates(simulate(rule, n, sd_x, sd_b, 0.0, 1.0, draws, rng, comparisons))
    if rule == "direction":
        effect = _rates(simulate(rule, n, sd_x, sd_b, 1.0, 1.0, draws, rng, comparisons))
        return {"false": max(null[FAILS], null[HOLDS]), "power": effect[HOLDS]}
    edge = _rates(simulate(rule, n, sd_x, sd_b, 1.0 if rule == "match" else -1.0, 1.0, draws, rng))
    return {"false": max(null[FAILS], edge[HOLDS]), "power": null[HOLDS]}


def fig3_rule(tier: Tier, ratio: float, draws: int = DRAWS) -> dict[str, float]:
    """p_trend on Table 2's pRMSNorm seeds at p = 0.0625 plus the tier's Figure 3 runs (their spread `ratio`
    times the seeds'): no effect, and a change of one margin across the range of p."""
    seeds = tier.tasks.get("rnnsearch", ((), 0))[1] if "prmsnorm" in tier.tasks.get("rnnsearch", ((), 0))[0] else 0
    ps = [0.0625] * seeds + [p for p in tier.fig3_ps for _ in range(tier.fig3_seeds)]
    if len(set(ps)) < 2:
        return {"false": 0.0, "power": 0.0, "note": "no p sweep: always cannot tell"}
    x = np.array(ps)
    sd = np.where(x == 0.0625, NOISE, NOISE * ratio)
    rng = np.random.default_rng(SEED)

    def verdicts(change: float) -> np.ndarray:  # rules.p_trend's decision, on `draws` rows at once
        found, half, _ = trend(x, rng.normal(0.0, sd, (draws, len(x))) + change * (x - x.min()) / (x.max() - x.min()))
        return equivalence_decision(found - half, found + half, 1.0)
    null, edge = _rates(verdicts(0.0)), _rates(verdicts(1.0))
    return {"false": max(null[FAILS], edge[HOLDS]), "power": null[HOLDS],
            "note": f"{len(ps)} runs: {seeds} seed(s) at p=0.0625, {tier.fig3_seeds} at each other p"}


def divergence_rule(n: int, draws: int = DRAWS) -> dict[str, float]:
    """Figure 4's instability: diverged counts of n runs a side by claims.divergence_verdict: both norms
    diverging with DIVERGE_NULL (no effect), and LayerNorm's and RMSNorm's at DIVERGE_EFFECT."""
    if n < 1:
        return {"false": 0.0, "power": 0.0, "note": "no Figure 4 runs: always cannot tell"}
    rng = np.random.default_rng(SEED)
    table = {(a, b): divergence_verdict(a, b, n, n)[0] for a in range(n + 1) for b in range(n + 1)}

    def verdicts(p_x: float, p_b: float) -> list[str]:
        return [table[int(a), int(b)] for a, b in zip(rng.binomial(n, p_x, draws), rng.binomial(n, p_b, draws))]
    null = _rates(verdicts(DIVERGE_NULL, DIVERGE_NULL))
    return {"false": max(null[HOLDS], null[FAILS]), "power": _rates(verdicts(*DIVERGE_EFFECT))[HOLDS]}


def speed_rule(ratio: float, steps: int = SPEED_STEPS, draws: int = SPEED_DRAWS) -> dict[str, float]:
    """report.paired on simulated paired step times, rounds added as bench.steps adds them (6 to 24, two at a
    time, until a 5% speed-up is decidable), the norm's own round spread `ratio` times LayerNorm's: no
    effect, and a 5% speed-up. The size claim is the same interval against another threshold."""
    rng = np.random.default_rng(SEED)

    def verdict(gain: float) -> tuple[str, int]:
        rounds, ln, x = 0, [], []
        while rounds < 6 or (rounds < 24 and (rounds % 2 or not paired.decides({"layernorm": ln, "x": x}, steps))):
            base = rng.normal(0.0, 0.3)  # the round's machine state, shared by both norms
            for times, shift, spread in ((ln, 0.0, 1.0), (x, np.log(1 - gain), ratio)):
                own = rng.normal(0.0, SPEED_NOISE["round"] * spread)
                times += list(np.exp(base + shift + own + rng.normal(0.0, SPEED_NOISE["step"], steps)) * 100.0)
            rounds += 1
        sp = paired.paired_speedup(x, ln, steps)
        return (UNSURE if sp.lo <= 0 <= sp.hi else HOLDS if sp.lo > 0 else FAILS), rounds
    null = [verdict(0.0) for _ in range(draws)]
    effect = [verdict(paired.DECIDE) for _ in range(draws)]
    return {"false": 1.0 - [v for v, _ in null].count(UNSURE) / draws,
            "power": [v for v, _ in effect].count(HOLDS) / draws,
            "note": f"{np.mean([r for _, r in null + effect]):.1f} rounds on average"}


def tier_claims(tier: Tier) -> list[tuple[str, str, str, int, int]]:
    """(claims, rule text, rule, seeds a side, comparisons) of every seeds rule the tier's runs judge."""
    rows = []
    for task, (norms, n) in tier.tasks.items():
        ours = [norm for norm in ("rmsnorm", "prmsnorm") if norm in norms and "layernorm" in norms]
        matched = [norm for norm in ours if (task, norm) not in DIRECTIONS]
        directed = [norm for norm in (*ours, "batchnorm", "weightnorm") if (task, norm) in DIRECTIONS and norm in norms]
        if matched:
            rows.append((f"{task}: {', '.join(matched)} match LayerNorm", "match: Welch 90% inside +-margin", "match",
                         n, 1))
        if directed:
            rows.append((f"{task}: {', '.join(directed)} below LayerNorm (Table 10)", "direction: Welch 95% on one "
                         "side of 0", "direction", n, 1))
    rnn = tier.tasks.get("rnnsearch", ((), 0))
    if "none" in rnn[0]:
        normalized = sum(norm in rnn[0] for norm in ("layernorm", "rmsnorm", "prmsnorm"))
        rows.append(("Fig. 1 per step (normalized below the Baseline)", f"direction against {normalized} groups",
                     "direction", rnn[1], normalized))
        rows.append(("Fig. 1 per second", "direction: Welch 95% on one side of 0", "direction", rnn[1], 1))
    if "l2norm" in rnn[0]:
        others = sum(norm in rnn[0] for norm in ("none", "layernorm", "rmsnorm", "prmsnorm"))
        rows.append(("Table 2: L2-Norm below the others", f"direction against {others} groups", "direction", rnn[1],
                     others))
    if "weightnorm" in rnn[0]:
        rows.append(("Fig. 7: WeightNorm slower", "direction against 2 groups", "direction", rnn[1], 2))
    if "none" in rnn[0]:
        rows.append(("Table 5: LayerNorm's and RMSNorm's absolute M and S below the Baseline's", "direction against 4 "
                     "comparisons", "direction", rnn[1], 4))
    if "none" in tier.tasks.get("transformer", ((), 0))[0]:
        rows.append(("Table 4: the Baseline fails to train (BLEU below 0.5 x LayerNorm's)", "direction: Welch 95% "
                     "below 0", "direction", tier.tasks["transformer"][1], 1))
    if tier.fig4_seeds:
        rows.append(("Fig. 4: RMSNorm no worse than LayerNorm", "non-inferiority: Welch 90% above -margin",
                     "non-inferiority", tier.fig4_seeds, 1))
    return rows


def calibrate(draws: int = DRAWS, speed_draws: int = SPEED_DRAWS) -> dict:
    """{"tiers": the tiers, "rules": (tier, claims, rule text, seeds, {ratio: rates}) rows, "speed": {ratio:
    rates}, "power": (tier, claim, metric, seeds, power, seeds for 80%) rows at the measured spreads}."""
    found = tiers()
    rules = []
    for tier in found:
        for claims, text, rule, n, comparisons in tier_claims(tier):
            rules.append((tier.name, claims, text, n, {r: seeds_rule(rule, n, r, comparisons, draws) for r in SPREADS}))
        if tier.fig3_ps:
            rules.append((tier.name, "Fig. 3: p has little effect", "trend over p: 90% interval of the fitted change "
                          "inside +-margin, pRMSNorm's own residuals", len(tier.fig3_ps) * tier.fig3_seeds,
                          {r: fig3_rule(tier, r, draws) for r in SPREADS}))
        if tier.fig4_seeds:
            rules.append((tier.name, "Fig. 4: LayerNorm unstable", "divergences: one-sided Fisher's exact test at 5%",
                          tier.fig4_seeds, {r: divergence_rule(tier.fig4_seeds, draws) for r in (1,)}))
    speed = {r: speed_rule(r, draws=speed_draws) for r in SPREADS}
    return {"tiers": found, "rules": rules, "speed": speed, "power": measured_power(found)}


def measured_power(found: tuple[Tier, ...]) -> list[tuple[str, str, str, int, float, int | None]]:
    """Per tier with measured spreads, per match or direction claim: its power at the tier's seeds with the
    spreads its groups showed (the claim true) and the seeds a side for 80%."""
    rows = []
    for tier in found:
        for task, norms in tier.spreads.items():
            ln = norms.get("layernorm")
            seeds = tier.tasks.get(task, ((), 0))[1]
            if ln is None or task not in QUALITY:
                continue
            margin = QUALITY[task][2]
            for norm, other in norms.items():
                if norm == "layernorm" or (norm not in ("rmsnorm", "prmsnorm") and (task, norm) not in DIRECTIONS):
                    continue
                rule = "direction" if (task, norm) in DIRECTIONS else "match"
                effect = DIRECTION_SOURCES.get((task, norm), ("", margin))[1] if rule == "direction" else 0.0
                sds = (other["sd"], ln["sd"])
                if min(other["n"], ln["n"]) < 2:
                    rows.append((tier.name, f"{task}: {norm} vs LayerNorm ({rule})", ln["metric"], seeds, None, None))
                    continue
                rows.append((tier.name, f"{task}: {norm} vs LayerNorm ({rule})", ln["metric"], seeds,
                             power(rule, seeds, *sds, effect, margin), seeds_for_power(rule, *sds, effect, margin)))
    return rows


def markdown(result: dict, draws: int = DRAWS, speed_draws: int = SPEED_DRAWS) -> str:
    found = result["tiers"]
    lines = ["# Verdicts: each rule's error rates and power", "",
             "Written by `python -m rmsnorm_repro.campaigns.calibrate` (seeded simulation; "
             f"{draws} draws a scenario, {speed_draws} for speed). A claim's verdict is \"holds\", \"does not hold\" "
             "or \"cannot tell\" (report/rules.py, report/claims.py, report/speed_claims.py). **False verdict**: the "
             "larger of P(does not hold) when the claim is true (no effect) and P(holds) when it is false (an effect "
             "of one margin; for a direction: no effect). **Power**: P(holds) when the claim is true (no effect for a "
             "match, a trend over p or a non-inferiority; an effect of one margin in the claimed direction for a "
             f"direction; a {paired.DECIDE:.0%} speed-up for speed), at a seed spread of half the margin. Each rule "
             f"runs with the two groups' spreads equal, {SPREADS[1]}x and {SPREADS[2]}x apart (Figure 3: its p runs "
             "that much noisier than Table 2's pRMSNorm seeds; speed: one norm's round spread). Every false verdict "
             "rate is at most 10% (tests/campaigns/test_calibrate.py checks it, and that this page is what the "
             "campaigns run today). A group with an incomplete run (diverged, failed, capped), a zero-width "
             "interval or a group at its metric's bound is \"cannot tell\" before any rule runs.", "",
             "## The tiers, as their campaigns run them", ""]
    for tier in found:
        tasks = "; ".join(f"{task}: {', '.join(norms)} x {n} seed(s)" for task, (norms, n) in tier.tasks.items())
        extra = []
        if tier.fig3_ps:
            extra.append(f"Figure 3 at p = {', '.join(f'{p:g}' for p in tier.fig3_ps)} ({tier.fig3_seeds} seed each)")
        if tier.fig4_seeds:
            extra.append(f"Figure 4: {tier.fig4_seeds} seed(s) a side")
        if tier.table3:
            extra.append("Table 3's codebase runs (its claim is never decided: both columns run in PyTorch)")
        lines.append(f"- **{tier.name}**: {tasks}" + (f"; {'; '.join(extra)}" if extra else "") + ".")
    lines += ["", "## Each rule at each tier's seeds", "",
              "| tier | claims | rule | seeds a side | false verdict (1x / 2x / 3x spreads) | power | note |",
              "|---|---|---|---:|---|---:|---|"]
    for tier, claims, rule, n, rates in result["rules"]:
        false = " / ".join(f"{r['false']:.1%}" for r in rates.values())
        first = next(iter(rates.values()))
        lines.append(f"| {tier} | {claims} | {rule} | {n} | {false} | {first['power']:.1%} | {first.get('note', '')} |")
    speed = result["speed"]
    false = " / ".join(f"{r['false']:.1%}" for r in speed.values())
    lines.append(f"| every tier | faster per step (and the size claim's interval) | speed: paired log ratios, rounds "
                 f"as blocks, {SPEED_STEPS} steps a round | - | {false} | {speed[1]['power']:.1%} | "
                 f"{speed[1]['note']} |")
    lines += ["", "The speed rule's rate is above its nominal 5% because the timing adds rounds until a 5% speed-up "
              "is decidable, a stop that depends on the spread measured so far (at most 24 rounds). Figure 4's "
              f"divergence rule: both norms diverging with probability {DIVERGE_NULL:g} (no effect), power at "
              f"LayerNorm {DIVERGE_EFFECT[0]:g} against RMSNorm {DIVERGE_EFFECT[1]:g}. Not simulated, being no "
              "tests of noise: Table 1 (computed exactly) and Table 3 (never decided).", "",
              "## Each claim's power at the spreads its runs showed", "",
              "The claim true (no difference for a match; the paper's difference for a direction), each side's seed "
              "spread as measured, the rule itself simulated (rules.power): the power at the seeds the tier runs and "
              "the seeds a side that give 80%. Spreads: " + "; ".join(f"{t.name}: {t.spreads_from}" for t in found
                                                                    if t.spreads_from) + ".", "",
              "| tier | claim | metric | seeds a side | power | seeds a side for 80% |", "|---|---|---|---:|---:|---:|"]
    for tier, claim, metric, n, pw, need in result["power"]:
        lines.append(f"| {tier} | {claim} | {metric} | {n} | {'-' if pw is None else f'{pw:.0%}'} | "
                     f"{'no spread measured (1 seed)' if pw is None else need if need else 'more than 50'} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rmsnorm_repro.campaigns.calibrate", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("docs") / "verdicts.md", help="where the page goes")
    args = parser.parse_args(argv)
    text = markdown(calibrate())
    atomic_write_text(args.out, text)
    print(text, end="")
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
