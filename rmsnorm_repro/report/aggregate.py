"""Run directories (a summary.json each; docs/runs.md) read and aggregated over seeds: the library every
page, figure, claim and comparison reads runs through. It knows the file contract, never a task's internals.

    runs = load_runs("results/runs/multirun/rnnsearch/synthetic-mini")
    for group in group_runs(runs):
        print(group.label, group.stat("test_bleu"), group.time())
"""
from __future__ import annotations

import json
import math
import statistics
from collections import Counter
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from ..paths import table_command
from ..record import (CONFIG_SEALED, filled_config, flatten, is_number, lock_holder, read_config, read_metrics,
                      read_summary, splits_groups)

# Rows and curves follow the paper's order of methods.
NORM_ORDER = ("none", "batchnorm", "weightnorm", "l2norm", "layernorm", "rmsnorm", "prmsnorm")
# A status whose numbers are real: completed runs, and diverged runs for their step time only.
TRAINED = "completed"
DIVERGED = "diverged"
# a run whose .lock a process holds now: its summary.json, if any, is of an earlier session
TRAINING = "training"
# a "completed" summary without a step count or final metrics (e.g. hand-written or truncated)
EMPTY = "without numbers"
# the bootstrap of step-time intervals: draws, and a fixed seed so a report is the same every time
BOOTSTRAP_DRAWS = 4000
BOOTSTRAP_SEED = 0
Z95 = 1.959963984540054  # the normal's 97.5% quantile: a 95% interval is median +- Z95 sides


@dataclass(frozen=True)
class Stat:
    """Mean and sample standard deviation (ddof=1; 0 for a single run) of n values."""

    mean: float
    std: float
    n: int

    @classmethod
    def of(cls, values: Iterable[float]) -> "Stat | None":
        values = [float(v) for v in values if v is not None and math.isfinite(float(v))]
        if not values:
            return None
        std = statistics.stdev(values) if len(values) > 1 else 0.0
        return cls(statistics.fmean(values), std, len(values))


@dataclass(frozen=True)
class Interval:
    """A 95% interval [lo, hi] (of a step time, or of a speed-up as a fraction)."""

    lo: float
    hi: float

    @property
    def holds_zero(self) -> bool:
        """The interval contains 0: for a speed-up, no winner can be declared ("within noise")."""
        return self.lo <= 0.0 <= self.hi


@dataclass
class Run:
    path: Path
    summary: dict[str, Any]
    config: dict[str, Any] = field(default_factory=dict)

    @property
    def task(self) -> str:
        return str(self.summary.get("task") or self.config.get("task", {}).get("name", "?"))

    @property
    def norm(self) -> str:
        return str(self.summary.get("norm") or self.config.get("norm", {}).get("name", "?"))

    @property
    def p(self) -> float:
        p = self.summary.get("p", self.config.get("norm", {}).get("p", 1.0))
        return float(p if p is not None else 1.0)

    @property
    def seed(self) -> int | None:
        return self.summary.get("seed", self.config.get("seed"))

    @property
    def capped(self) -> bool:
        """Stopped by train.max_minutes (the wall-clock cap), not by its steps or early stopping."""
        return self.summary.get("stopped_by") == "train.max_minutes"

    @cached_property
    def training(self) -> bool:
        """A process is training this run now (it holds the run's .lock)."""
        return lock_holder(self.path) is not None

    @property
    def status(self) -> str:
        if self.training:
            return TRAINING
        status = str(self.summary.get("status", "unknown"))
        if status == TRAINED and not (is_number(self.summary.get("steps")) and self.summary["steps"] > 0
                                      and isinstance(self.summary.get("final"), dict)):
            return EMPTY
        return status

    @property
    def capped(self) -> bool:
        """Stopped by train.max_minutes (the wall-clock cap), not by its steps or early stopping."""
        return self.summary.get("stopped_by") == "train.max_minutes"

    @property
    def time_ci(self) -> tuple[float, float] | None:
        """summary["s_per_1k_steps_ci95"] as (lo, hi); None when the summary predates it or has none."""
        ci = self.summary.get("s_per_1k_steps_ci95")
        if isinstance(ci, list) and len(ci) == 2 and all(is_number(v) and math.isfinite(v) for v in ci):
            return float(ci[0]), float(ci[1])
        return None

    @property
    def scale(self) -> str:
        return str(self.config.get("scale", {}).get("name", "?"))

    @property
    def data(self) -> str:
        return str(self.config.get("data", {}).get("name", "?"))

    def metric(self, name: str, source: str = "final") -> float | None:
        """summary[source][name] ("final": test metrics, "best": best validation ones), or with
        source="last" the last value metrics.jsonl logged (e.g. the final training loss)."""
        if source == "last":
            points = self.points(name)
            return float(points[-1][2]) if points else None
        value = (self.summary.get(source) or {}).get(name)
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    @cached_property
    def history(self) -> list[dict[str, Any]]:
        """metrics.jsonl's records (record.read_metrics: a line torn by a kill is skipped)."""
        return read_metrics(self.path / "metrics.jsonl")

    def points(self, metric: str, x: str = "step") -> list[tuple[float, float, float]]:
        """(step, x, value) of every metrics.jsonl line that logged `metric` (x: "step" or "wall_s")."""
        keys = ("step", x, metric)
        return [(line["step"], line[x], line[metric]) for line in self.history
                if all(isinstance(line.get(k), (int, float)) and not isinstance(line.get(k), bool) for k in keys)]

    def curve(self, metric: str, x: str = "step") -> tuple[list[float], list[float]]:
        points = self.points(metric, x)
        return [p[1] for p in points], [p[2] for p in points]


class Runs(list):
    """The finished runs (a list of Run), plus `in_progress`: runs without a summary.json yet."""

    def __init__(self, runs: Iterable[Run] = (), in_progress: Iterable[Run] = (), root: Path | None = None):
        super().__init__(runs)
        self.in_progress: list[Run] = list(in_progress)
        self.root = root  # the directory they were read from


def load_runs(root: str | Path, unreadable: list[tuple[Path, str]] | None = None) -> Runs:
    """Every run under root (searched recursively), in path order; `.in_progress` lists the directories
    that hold a run's metrics.jsonl or config.yaml but no summary.json (still running, or killed).

    A run whose files cannot be read (a newer record version, a damaged file) raises ValueError, or,
    when `unreadable` is given, is appended to it as (run directory, why) and left out."""
    root = Path(root)
    if root.exists() and not root.is_dir():
        raise ValueError(f"{root} is a file, not a folder of runs: give the folder the runs are in")
    if not root.is_dir():
        raise FileNotFoundError(f"runs directory {root} does not exist: run the sweep first (e.g. {table_command('table2')})")
    runs, failed = [], set()
    for summary_path in sorted(root.rglob("summary.json")):
        if _skipped(summary_path, root):
            continue
        run_dir = summary_path.parent
        try:
            summary = read_summary(summary_path)
            config = read_config(run_dir / "config.yaml", seal_required=summary.get(CONFIG_SEALED) is True)
            try:
                run = Run(run_dir, summary, filled_config(config, summary))
            except ValueError as err:
                raise ValueError(f"{run_dir / 'config.yaml'}: {err}") from None
            run.history  # read now: a damaged metrics.jsonl leaves its run out here, not a whole report later
            runs.append(run)
        except ValueError as err:
            if unreadable is None:
                raise
            unreadable.append((run_dir, str(err)))
            failed.add(run_dir)
    finished = {run.path for run in runs} | failed
    started = {path.parent for name in ("metrics.jsonl", "config.yaml") for path in root.rglob(name)
               if not _skipped(path, root)}
    in_progress = [Run(run_dir, {}, _config_or_nothing(run_dir / "config.yaml")) for run_dir in sorted(started - finished)]
    return Runs(runs, in_progress, root)


def _config_or_nothing(path: Path) -> dict[str, Any]:
    """A run in progress is named by its folder: a config.yaml being damaged does not stop a report."""
    try:
        return read_config(path)
    except ValueError:
        return {}


def read_runs(folders: Iterable[Path]) -> tuple[list[Run], list[tuple[Path, str]], int]:
    """The runs under the folders (each once), the folders of runs left out with why (no readable summary:
    damaged, of a newer version, still training or killed), and how many of those are unreadable rather
    than unfinished. What compare and `rmsnorm-report claims` read; ValueError for a file given as a folder."""
    runs, skipped, seen, damaged = [], [], set(), 0
    for folder in folders:
        unreadable: list[tuple[Path, str]] = []
        found = load_runs(folder, unreadable)
        in_progress = [(run.path, TRAINING if run.training else
                        "no summary.json and no process here holds its .lock: killed, or training on another machine")
                       for run in found.in_progress]
        for path, why in unreadable + in_progress:
            if path.resolve() not in seen:
                seen.add(path.resolve())
                skipped.append((path, why))
                damaged += (path, why) in unreadable
        for run in found:
            if run.path.resolve() not in seen:
                seen.add(run.path.resolve())
                runs.append(run)
    return runs, skipped, damaged


def _skipped(path: Path, root: Path) -> bool:
    """Files of Hydra (.hydra/config.yaml) and wandb (wandb/.../config.yaml) are not run files."""
    parts = path.relative_to(root).parts[:-1]
    return any(part == ".hydra" or part == "wandb" for part in parts)


def _flatten(tree: Any) -> dict[str, str]:
    """dotted key -> its value as JSON text (comparable and hashable, lists included)."""
    return {key: json.dumps(value, sort_keys=True) for key, value in flatten(tree).items()}


def swept_keys(runs: list[Run]) -> list[str]:
    """Config keys whose value differs between runs of the same (task, norm, p): what else was swept."""
    buckets: dict[tuple, list[dict[str, Any]]] = {}
    for run in runs:
        buckets.setdefault((run.task, run.norm, run.p), []).append(_flatten(run.config))
    keys: set[str] = set()
    for configs in buckets.values():
        for key in set().union(*configs):
            if not splits_groups(key) or key in ("norm.p", "norm.name", "task.name"):
                continue
            if len({c[key] for c in configs if key in c}) > 1:  # a key a run lacks differs from nothing
                keys.add(key)
    return sorted(keys)


@dataclass
class Group:
    """The runs of one (task, norm, p, swept values) cell: the seeds the paper averages over."""

    task: str
    norm: str
    p: float
    swept: tuple[tuple[str, Any], ...]
    runs: list[Run]

    @property
    def label(self) -> str:
        parts = [self.norm]
        if self.p != 1.0:
            parts.append(f"p={self.p:g}")
        parts += [f"{key.rsplit('.', 1)[-1]}={json.loads(value)}" for key, value in self.swept]
        return " ".join(parts)

    @property
    def statuses(self) -> Counter:
        return Counter(run.status for run in self.runs)

    @property
    def completed(self) -> list[Run]:
        return [run for run in self.runs if run.status == TRAINED]

    @property
    def fails_to_train(self) -> bool:
        """Every run diverged: the paper's "fails to train"."""
        return bool(self.runs) and all(run.status == DIVERGED for run in self.runs)

    def stat(self, metric: str, source: str = "final") -> Stat | None:
        """Over completed runs only: a diverged or interrupted run has no meaningful quality."""
        return Stat.of(run.metric(metric, source) for run in self.completed)

    def first_metric(self, names: Iterable[str], source: str = "final") -> tuple[str, Stat] | None:
        """The first of `names` any completed run reports, with its statistics."""
        for name in names:
            stat = self.stat(name, source)
            if stat is not None:
                return name, stat
        return None

    def timed(self) -> list[Run]:
        """Completed and diverged runs with a step time (the paper timed its failing baseline too)."""
        return [run for run in self.runs if run.status in (TRAINED, DIVERGED) and run.summary.get("steps")
                and is_number(run.summary.get("s_per_1k_steps")) and math.isfinite(run.summary["s_per_1k_steps"])]

    def time(self) -> Stat | None:
        """Seconds per 1k steps (each run's median; older summaries: mean), mean and std over the timed runs."""
        return Stat.of(run.summary["s_per_1k_steps"] for run in self.timed())

    def time_interval(self) -> Interval | None:
        """95% interval of time().mean: a single run's own interval of its median, else a two-level
        bootstrap (_time_draws: runs drawn with replacement, each drawn run's median from its own interval);
        None unless every timed run has an interval (older summaries have none)."""
        timed = self.timed()
        if not timed or any(run.time_ci is None for run in timed):
            return None
        if len(timed) == 1:
            return Interval(*timed[0].time_ci)
        draws = _time_draws(timed, np.random.default_rng(BOOTSTRAP_SEED))
        return Interval(*map(float, np.percentile(draws, [2.5, 97.5])))

    def status_note(self) -> str:
        """"3" when every run completed, else e.g. "2 of 3 (1 diverged)"."""
        counts = self.statuses
        done = counts.get(TRAINED, 0)
        if done == len(self.runs):
            return str(done)
        others = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()) if status != TRAINED)
        return f"{done} of {len(self.runs)} ({others})"


def group_runs(runs: list[Run]) -> list[Group]:
    """Groups in the paper's order: by task, then norm (NORM_ORDER), p and every swept key (one whose value
    differs between runs of the same task, norm and p), so seeds are all a group averages over. A key a run's
    config.yaml lacks is filled as the run trained (record.filled_config); one still absent differs from
    nothing, as a resume treats it."""
    keys = swept_keys(runs)
    groups: dict[tuple, Group] = {}
    for run in runs:
        flat = _flatten(run.config)
        swept = tuple((key, flat[key]) for key in keys if key in flat)
        ident = (run.task, run.norm, run.p, swept)
        if ident not in groups:
            groups[ident] = Group(run.task, run.norm, run.p, swept, [])
        groups[ident].runs.append(run)

    def order(group: Group) -> tuple:
        rank = NORM_ORDER.index(group.norm) if group.norm in NORM_ORDER else len(NORM_ORDER)
        return group.task, rank, group.norm, group.p, group.swept

    return sorted(groups.values(), key=order)


def speedup(time_x: Stat | None, time_ln: Stat | None) -> float | None:
    """The paper's speed-up over LayerNorm, (T_LN - T_X) / T_LN, from the groups' step times."""
    if time_x is None or time_ln is None or time_ln.mean <= 0:
        return None
    return (time_ln.mean - time_x.mean) / time_ln.mean


def _time_draws(runs: list[Run], rng: np.random.Generator) -> np.ndarray:
    """BOOTSTRAP_DRAWS draws of the mean step time of `runs` (each with a time_ci): runs drawn with
    replacement, each drawn run's median from a split normal whose 2.5% and 97.5% points are its
    interval's ends (one run: only the second level)."""
    values = np.array([(run.summary["s_per_1k_steps"], *run.time_ci) for run in runs], dtype=np.float64)
    n = len(values)
    pick = rng.integers(n, size=(BOOTSTRAP_DRAWS, n)) if n > 1 else np.zeros((BOOTSTRAP_DRAWS, 1), dtype=np.int64)
    median, lo, hi = values[pick, 0], values[pick, 1], values[pick, 2]
    z = rng.standard_normal(pick.shape)
    side = np.where(z >= 0, np.maximum(hi - median, 0.0), np.maximum(median - lo, 0.0)) / Z95
    return np.maximum(median + z * side, 1e-12).mean(1)  # a step time is positive


def speedup_interval(x: Group, ln: Group) -> Interval | None:
    """95% interval of the speed-up (T_LN - T_X) / T_LN: the percentiles of (1 - T_X* / T_LN*) over joint
    bootstrap draws of both groups' mean step times (_time_draws). None unless every timed run of
    both groups has an interval (summaries from before the runner recorded one)."""
    if x.time_interval() is None or ln.time_interval() is None:
        return None
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    t_ln = _time_draws(ln.timed(), rng)
    t_x = _time_draws(x.timed(), rng)
    return Interval(*map(float, np.percentile(1.0 - t_x / t_ln, [2.5, 97.5])))


# "train_loss" names the training-loss curve a figure or claim reads: window_loss (per unit, e.g. target
# token, averaged over each logging window: Nematus' display and the paper's Figure 1) where the runs
# logged it, else loss (each logged step's own, as runs written before window_loss have it)
TRAIN_LOSS = "train_loss"


def resolve_metric(metric: str, runs: list[Run]) -> str:
    """TRAIN_LOSS -> "window_loss" when every run logged it, else "loss"; any other metric as it is."""
    if metric != TRAIN_LOSS:
        return metric
    return "window_loss" if runs and all(run.points("window_loss") for run in runs) else "loss"


def mean_curve(runs: list[Run], metric: str, x: str = "step") -> tuple[list[float], list[float], list[float]]:
    """(x, mean, std) of a metric over runs, at the steps every run logged it.

    With x="wall_s" the x value is the mean wall-clock time of those steps. Runs that stopped early
    (diverged) end the curve where they end: averaging a survivor with nothing would be a lie.
    """
    metric = resolve_metric(metric, runs)
    per_run = [{step: (xv, y) for step, xv, y in run.points(metric, x)} for run in runs]
    if not per_run:
        return [], [], []
    common = sorted(set.intersection(*(set(points) for points in per_run)))
    xs, means, stds = [], [], []
    for step in common:
        values = [points[step][1] for points in per_run]
        stat = Stat.of(values)
        if stat is None or len(values) != stat.n:  # a NaN/inf value: the curve stops here
            break
        xs.append(statistics.fmean(points[step][0] for points in per_run))
        means.append(stat.mean)
        stds.append(stat.std)
    return xs, means, stds


def describe_env(runs: list[Run]) -> str:
    """What the runs' summaries say about the machine and software, e.g. "torch=2.14.1, device=cpu, ...",
    then the norm implementation each norm ran with. Values that differ between runs are joined with
    " | ": a table that mixes machines says so.
    """
    values: dict[str, list[str]] = {}
    impls: dict[str, list[str]] = {}
    for run in runs:
        env = run.summary.get("env") or {}
        for key, value in env.items():
            if key in ("norm", "impl"):  # per norm, shown below
                continue
            if str(value) not in values.setdefault(key, []):
                values[key].append(str(value))
        described = env.get("norm") if isinstance(env.get("norm"), dict) else {}
        impl = described.get("impl_used") or described.get("impl")
        if impl and str(impl) not in impls.setdefault(run.norm, []):
            impls[run.norm].append(str(impl))
    text = ", ".join(f"{key}={' | '.join(vals)}" for key, vals in values.items()) or "not recorded"
    if any(impls.values()):
        ordered = sorted(impls, key=lambda n: NORM_ORDER.index(n) if n in NORM_ORDER else len(NORM_ORDER))
        text += "; norm impl: " + ", ".join(f"{norm}={' | '.join(impls[norm])}" for norm in ordered if impls[norm])
    return text
