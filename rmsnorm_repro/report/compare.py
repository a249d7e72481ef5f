"""`rmsnorm-report compare RUN_OR_DIR...`: which runs are better, by how much, and is it noise.

    python -m rmsnorm_repro.report compare results/runs/multirun/rnnsearch/synthetic-mini
    rmsnorm-report compare 'results/runs/rnnsearch/synthetic-mini/*' --baseline norm=layernorm

Takes run folders, sweep folders or globs of them, of one task and one data set. The config keys in
which the runs differ make the groups, seeds pooled within a group; a key whose values follow from
the keys before it (norm.p from norm.name, say) splits nothing and is not named. A group's row holds
the task's headline metrics from summary.json's `final` (unprefixed: the test split; `valid_*`: the
validation split at the selected step), the selected step, steps, the median ms/step with its 95%
interval (aggregate.py), and minutes: mean ± std over its completed seeds, n of them; the best mean
of each column in bold. Against a baseline group (--baseline key=value; by default norm=layernorm
when the runs differ in norm) every difference gets rules.difference_verdict's word. Runs left out
(interrupted, diverged, failed, in progress, unreadable or from a newer record version, a seed
trained twice) are named. Writes compare.md and compare.png (train loss and the validation metric
against step and wall time, a band over seeds per group).
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import re
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..atomic import atomic_write_text, cannot_write
from ..record import ABSENT, metric_goal, printable, splits_groups
from . import figures as figs
from .aggregate import NORM_ORDER, TRAINED, Group, Run, Stat, _flatten, read_runs
from .rules import difference_verdict

# the metrics of a task's row: a `final` key is shown when it is one of these or ends in "_" + one
HEADLINE = {
    "rnnsearch": ("bleu",),  # valid_bleu: the validation decode (greedy); valid_beam_bleu, test*_bleu: beam
    "transformer": ("bleu",),
    "reader": ("accuracy", "error"),
    "retrieval": ("r1", "r5", "r10", "rsum"),
    "convpool": ("error",),
}
HEADLINE_OTHER = ("bleu", "accuracy", "error", "r1", "r5", "r10", "rsum")  # tasks this table does not know
# the keys that name a group first: later keys are kept only where they split the groups further
KEY_ORDER = ("norm.name", "norm.p", "scale.name")
KEY_NAMES = {"norm.name": "norm", "norm.p": "p", "scale.name": "scale"}
# the same for every run compared (refused otherwise) or no setting at all
NEVER_A_GROUP = ("task.name", "data.name")


@dataclass
class Compared(Group):
    """A group named by the values of the keys the runs differ in, and by nothing they share."""

    shown: str = ""

    @property
    def label(self) -> str:
        return self.shown or "all runs"


@dataclass(frozen=True)
class Column:
    header: str
    value: Callable[[Run], float | None]
    goal: str | None  # "max" or "min": which mean is best and which difference is better; None: not ranked
    digits: int | None = None  # None: from the values' size


@dataclass
class Comparison:
    task: str
    data: str
    keys: list[str]              # the keys the groups differ in, in naming order
    groups: list[Compared]
    columns: list[Column]
    baseline: tuple[str, str] | None  # (key, value) naming the baseline groups
    skipped: list[tuple[Path, str]] = field(default_factory=list)  # (run folder, why it was left out)
    unreadable: int = 0  # of them, runs whose record could not be read: the numbers may lack a real run


# Reading -------------------------------------------------------------------------------------------
def expand(inputs: list[str]) -> list[Path]:
    """The folders named by run folders, sweep folders and globs ('runs/*/rmsnorm*')."""
    folders = []
    for text in inputs:
        # a shell expands an unquoted glob itself; a quoted one (or one from Python) is expanded here
        matches = [Path(m) for m in sorted(glob.glob(text))] if glob.has_magic(text) else [Path(text)]
        if not matches:
            raise ValueError(f"{text} matches no folder")
        for path in matches:
            if not path.is_dir():
                raise ValueError(f"{path} is not a folder: pass run folders, sweep folders or globs of them")
            folders.append(path)
    return folders


def _data(run: Run) -> str:
    return str(run.summary.get("data") or run.data)


def refuse_mixed(runs: list[Run]) -> None:
    """One task and one data set: their numbers are not comparable across either."""
    for what, of in (("tasks", lambda r: r.task), ("data sets", _data)):
        counts = Counter(of(run) for run in runs)
        if len(counts) > 1:
            listed = ", ".join(f"{name} ({n} run{'s' if n > 1 else ''})" for name, n in sorted(counts.items()))
            raise ValueError(f"the runs mix {what}: {listed}; compare one task on one data set at a time")


# Grouping ------------------------------------------------------------------------------------------
def settings(run: Run) -> dict[str, str]:
    """A run's flattened config (values as JSON text; load_runs filled in what its config.yaml lacks)."""
    return _flatten(run.config)


def differing_keys(runs: list[Run]) -> list[str]:
    """The config keys that split the runs into groups: those whose values differ, in KEY_ORDER then
    alphabetical order, each kept only when it splits the groups of the keys kept before it."""
    flat = [settings(run) for run in runs]
    keys = {key for config in flat for key in config
            if splits_groups(key) and key not in NEVER_A_GROUP}
    ordered = sorted(keys, key=lambda k: (KEY_ORDER.index(k) if k in KEY_ORDER else len(KEY_ORDER), k))
    kept: list[str] = []
    for key in ordered:
        # among the runs that have the key: one that lacks it (recorded before it existed, and not in
        # record.ADDED_KEYS) differs from nothing, as a resume treats it
        having = [config for config in flat if key in config]
        before = len({tuple(config.get(k, ABSENT) for k in kept) for config in having})
        if len({tuple(config.get(k, ABSENT) for k in (*kept, key)) for config in having}) > before:
            kept.append(key)
    return kept


def key_names(keys: list[str]) -> dict[str, str]:
    """How a key reads in a label: its last part ("optim.lr" -> "lr") unless two keys share it."""
    short = {key: KEY_NAMES.get(key, key.rsplit(".", 1)[-1]) for key in keys}
    counts = Counter(short.values())
    return {key: name if counts[name] == 1 else key for key, name in short.items()}


def shown_value(raw: str) -> str:
    """A flattened config value (JSON text) as a label shows it: 0.5, layernorm, absent."""
    if raw == ABSENT:
        return "absent"
    value = json.loads(raw)
    return f"{value:g}" if isinstance(value, float) else str(value)


def _sort_key(raw: str) -> tuple:
    value = None if raw == ABSENT else json.loads(raw)
    return (0, value, "") if isinstance(value, (int, float)) and not isinstance(value, bool) else (1, 0, str(value))


def make_groups(runs: list[Run], keys: list[str]) -> list[Compared]:
    """One group per combination of the keys' values, in the paper's order of norms, then by value."""
    names = key_names(keys)
    groups: dict[tuple, Compared] = {}
    for run in runs:
        flat = settings(run)
        values = tuple((key, flat.get(key, ABSENT)) for key in keys)
        if values not in groups:
            shown = " ".join(f"{names[key]}={shown_value(raw)}" for key, raw in values)
            groups[values] = Compared(run.task, run.norm, run.p, values, [], shown=shown)
        groups[values].runs.append(run)

    def order(group: Compared) -> tuple:
        rank = NORM_ORDER.index(group.norm) if group.norm in NORM_ORDER else len(NORM_ORDER)
        return (rank, group.norm, *(_sort_key(raw) for _, raw in group.swept))

    return sorted(groups.values(), key=order)


# Columns -------------------------------------------------------------------------------------------
def _number(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def headline_keys(task: str, runs: list[Run]) -> list[str]:
    """The `final` keys of the task's headline metrics, in the order the runs report them."""
    names = HEADLINE.get(task, HEADLINE_OTHER)
    keys: dict[str, None] = {}
    for run in runs:
        for key, value in (run.summary.get("final") or {}).items():
            if _number(value) is not None and any(key == n or key.endswith("_" + n) for n in names):
                keys[key] = None
    return list(keys)


def _minutes(run: Run) -> float | None:
    wall = _number(run.summary.get("wall_s"))
    return None if wall is None else wall / 60.0


def columns(task: str, runs: list[Run]) -> list[Column]:
    metrics = [Column(key, lambda run, key=key: run.metric(key), metric_goal(key)) for key in headline_keys(task, runs)]
    return [
        *metrics,
        Column("selected step", lambda run: _number(run.summary.get("selected_step")), None, digits=0),
        Column("steps", lambda run: _number(run.summary.get("steps")), None, digits=0),
        # s_per_1k_steps: each run's median step time; seconds per 1000 steps are milliseconds per step
        Column("ms/step", lambda run: _number(run.summary.get("s_per_1k_steps")), "min"),
        Column("minutes", _minutes, "min"),
    ]


def stat(group: Group, column: Column) -> Stat | None:
    return Stat.of(column.value(run) for run in group.runs)


def digits_for(stats: list[Stat | None], column: Column) -> int:
    """Decimals for a column: fixed for step counts, else by the size of its largest mean."""
    if column.digits is not None:
        return column.digits
    largest = max((abs(s.mean) for s in stats if s is not None), default=0.0)
    return 1 if largest >= 100 else 2 if largest >= 1 else 4


# Building ------------------------------------------------------------------------------------------
def parse_baseline(spec: str, keys: list[str], groups: list[Compared]) -> tuple[str, str]:
    """--baseline key=value as (config key, value); the key by its full name or as labels show it."""
    name, sep, value = spec.partition("=")
    names = key_names(keys)
    key = next((k for k in keys if name in (k, names[k])), None) if sep else None
    if key is None:
        differ = ", ".join(names[k] for k in keys) or "nothing"
        raise ValueError(f"--baseline {spec}: give key=value with a key the runs differ in ({differ})")
    if not any(_matches(dict(g.swept)[key], value) for g in groups):
        have = ", ".join(sorted({shown_value(dict(g.swept)[key]) for g in groups}))
        raise ValueError(f"--baseline {spec}: no group has {names[key]}={value} (they have {have})")
    return key, value


def _matches(raw: str, value: str) -> bool:
    shown = shown_value(raw)
    if shown == value:
        return True
    try:
        return float(shown) == float(value)
    except ValueError:
        return False


def baseline_of(comparison: Comparison, group: Compared) -> Compared | None:
    """The baseline group with the same values as `group` in every other differing key."""
    if comparison.baseline is None:
        return None
    key, value = comparison.baseline
    others = {k: v for k, v in group.swept if k != key}
    return next((b for b in comparison.groups if _matches(dict(b.swept)[key], value)
                 and {k: v for k, v in b.swept if k != key} == others), None)


def compare(inputs: list[str], baseline: str | None = None) -> Comparison:
    """The comparison of the completed runs under `inputs`; ValueError (one line) for a set it refuses."""
    runs, skipped, damaged = read_runs(expand(inputs))
    if not runs:
        raise ValueError(f"no runs (summary.json files) under {', '.join(inputs)}")
    refuse_mixed(runs)
    completed = [run for run in runs if run.status == TRAINED]
    skipped += [(run.path, run.status) for run in runs if run.status != TRAINED]
    unique = figs.unique_runs(completed)  # the same seed of the same settings trained twice counts once
    skipped += [(run.path, "the same seed as another run of its group") for run in completed if run not in unique]
    if not unique:
        raise ValueError(f"none of the {len(runs)} runs completed: " + ", ".join(f"{p} ({why})" for p, why in skipped))
    keys = differing_keys(unique)
    groups = make_groups(unique, keys)
    chosen = None
    if baseline is not None:
        chosen = parse_baseline(baseline, keys, groups)
    elif "norm.name" in keys and any(g.norm == "layernorm" for g in groups):
        chosen = ("norm.name", "layernorm")
    task = unique[0].task
    return Comparison(task, _data(unique[0]), keys, groups, columns(task, unique), chosen, skipped, damaged)


# Rendering -----------------------------------------------------------------------------------------
def fmt(s: Stat | None, digits: int) -> str:
    if s is None:
        return "-"
    return f"{s.mean:.{digits}f}" if s.n == 1 else f"{s.mean:.{digits}f} ± {s.std:.{digits}f}"


def _best(stats: list[Stat | None], goal: str | None) -> float | None:
    """The best mean of a column, or None when fewer than two groups have one (nothing to rank)."""
    means = [s.mean for s in stats if s is not None]
    if goal is None or len(means) < 2:
        return None
    return max(means) if goal == "max" else min(means)


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + ["| " + " | ".join(r) + " |" for r in rows]


def groups_table(c: Comparison) -> list[str]:
    cells = [[g.label, str(len(g.runs))] for g in c.groups]
    for column in c.columns:
        stats = [stat(g, column) for g in c.groups]
        digits, best = digits_for(stats, column), _best(stats, column.goal)
        for row, group, s in zip(cells, c.groups, stats):
            cell = fmt(s, digits)
            if column.header == "ms/step" and (interval := group.time_interval()) is not None:
                cell += f" [{interval.lo:.{digits}f}, {interval.hi:.{digits}f}]"
            if s is not None and s.n < len(group.runs):  # runs without a (finite) value are not in its mean
                cell += f" (n={s.n})"
            row.append(f"**{cell}**" if best is not None and s is not None and s.mean == best else cell)
    return _table(["group", "n", *(col.header for col in c.columns)], cells)


def differences_table(c: Comparison) -> list[str]:
    """Each group minus its baseline group, per ranked column, with the verdict."""
    ranked = [col for col in c.columns if col.goal is not None]
    rows = []
    for group in c.groups:
        base = baseline_of(c, group)
        if base is None or base is group:
            continue
        row = [group.label, base.label]
        for column in ranked:
            x, b = stat(group, column), stat(base, column)
            if x is None or b is None:
                row.append("-")
                continue
            digits = digits_for([x, b], column)
            row.append(f"{x.mean - b.mean:+.{digits}f} ({difference_verdict(x, b, column.goal)})")
        rows.append(row)
    return _table(["group", "against", *(col.header for col in ranked)], rows) if rows else []


def shown_path(path: Path, md_dir: Path) -> str:
    """A run folder relative to the page (never the machine's absolute path)."""
    return printable(Path(os.path.relpath(path.resolve(), md_dir.resolve())).as_posix())


def render(c: Comparison, md_dir: Path, figure: Path | None = None) -> str:
    """The comparison as a Markdown page whose paths are relative to md_dir."""
    n_runs = sum(len(g.runs) for g in c.groups)
    names = key_names(c.keys)
    by = ", ".join(f"`{k}` ({names[k]})" if names[k] != k else f"`{k}`" for k in c.keys) or "nothing (one group)"
    lines = [f"# Compare: {c.task} on {c.data}", "",
             f"{n_runs} completed run{'s' if n_runs != 1 else ''} in {len(c.groups)} group"
             f"{'s' if len(c.groups) != 1 else ''}, grouped by the config keys they differ in: {by}; seeds pooled.  ",
             "Cells: mean ± sample std over a group's runs (one run: its value); n: the group's completed runs "
             "(listed under Runs); (n=k): the cell's mean is over k of the group's runs, the others have no value; "
             "**bold**: the best mean of a column. Metrics: summary.json `final` (unprefixed: "
             "the test split; `valid_*`: the validation split at the selected step). ms/step: each run's median "
             "step time, [lo, hi] a 95% interval of the group's mean.", "",
             *groups_table(c)]
    if c.baseline is not None:
        key, value = c.baseline
        lines += ["", f"## Against {names[key]}={value}", "",
                  "Difference: the group's mean minus the baseline's (the group with the same other keys). "
                  "Verdict (report/claims.py, the rule every report uses): better or worse when Welch's 95% interval "
                  "of the difference excludes 0 (by which way the metric is better), else within noise; cannot tell "
                  "with n < 2.", "",
                  *(differences_table(c) or ["No group has a baseline with the same other keys."])]
    if figure is not None:
        lines += ["", f"![curves]({Path(os.path.relpath(figure.resolve(), md_dir.resolve())).as_posix()})"]
    lines += ["", "## Runs", ""]
    lines += [f"- {g.label} (n={len(g.runs)}): " + ", ".join(f"`{shown_path(r.path, md_dir)}`" for r in g.runs)
              for g in c.groups]
    if c.skipped:
        lines += ["", f"Left out ({len(c.skipped)}): " +
                  ", ".join(f"`{shown_path(path, md_dir)}` ({why})" for path, why in c.skipped) + "."]
    return "\n".join(lines) + "\n"


def validation_metric(groups: list[Compared]) -> str | None:
    """The metric that selected the tested weights (summary "selection": "best valid bleu (max)"), else
    the first headline metric the runs logged."""
    runs = [run for g in groups for run in g.runs]
    for run in runs:
        found = re.match(r"best valid (\S+) \(", str(run.summary.get("selection") or ""))
        if found:
            return found.group(1)
    names = HEADLINE.get(runs[0].task, HEADLINE_OTHER) if runs else ()
    return next((n for n in names if any(run.points(n) for run in runs)), None)


def draw(c: Comparison, path: Path) -> Path | None:
    """Train loss and the validation metric against step and wall time; None when no run logged them."""
    panels = [("loss", "step", "train loss"), ("loss", "wall_s", "train loss against wall time")]
    metric = validation_metric(c.groups)
    if metric is not None:
        panels += [(metric, "step", f"valid {metric}"), (metric, "wall_s", f"valid {metric} against wall time")]
    path.parent.mkdir(parents=True, exist_ok=True)
    return path if figs._curves_figure(f"{c.task} on {c.data}", panels)(c.groups, path) else None


def default_out(inputs: list[str]) -> Path:
    """<the inputs' common folder>/compare: beside the runs, as the report's pages are."""
    folders = [p.parent if (p / "summary.json").exists() else p for p in expand(inputs)]
    return Path(os.path.commonpath([str(p.resolve()) for p in folders])) / "compare"


def write(c: Comparison, out: Path) -> tuple[Path, str]:
    """compare.md (and compare.png) under `out`; returns the page's path and text."""
    out.mkdir(parents=True, exist_ok=True)
    figure = draw(c, out / "compare.png")
    text = render(c, out, figure)
    path = out / "compare.md"
    try:
        atomic_write_text(path, text)
    except OSError:
        if figure is not None:
            figure.unlink(missing_ok=True)  # never a figure without the page that names its runs
        raise
    return path, text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rmsnorm-report compare", description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="run folders, sweep folders or globs of them (one task, one data set)")
    parser.add_argument("--baseline", default=None,
                        help="key=value naming the baseline group, e.g. norm=layernorm (the default when present)")
    parser.add_argument("--out", type=Path, default=None,
                        help="folder for compare.md and compare.png (default: <the inputs' common folder>/compare)")
    args = parser.parse_args(argv)
    try:
        comparison = compare(args.runs, args.baseline)
        out = args.out if args.out is not None else default_out(args.runs)
    except (ValueError, FileNotFoundError) as err:
        print(f"rmsnorm-report compare: {err}", file=sys.stderr)
        return 2
    try:
        path, text = write(comparison, out)
    except OSError as err:  # the table is shown anyway: reading needed no write
        print(render(comparison, out, None))
        print(f"rmsnorm-report compare: {cannot_write(err, 'choose a folder you can write to with --out')}",
              file=sys.stderr)
        return 2
    print(text)
    if comparison.skipped:
        print(f"left out {len(comparison.skipped)} run(s): " +
              ", ".join(f"{p} ({why})" for p, why in comparison.skipped), file=sys.stderr)
    print(f"wrote {path}", file=sys.stderr)
    if comparison.unreadable:  # never exit 0 on verdicts a damaged record may have changed
        print(f"rmsnorm-report compare: {comparison.unreadable} run(s) could not be read and are not in these "
              "numbers: repair or delete them (named above)", file=sys.stderr)
        return 1
    return 0
