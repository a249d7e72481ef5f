"""Read run directories (DESIGN.md "Outputs of one run") and aggregate them over seeds.

    runs = load_runs("results/runs/multirun/rnnsearch/synthetic-mini")
    for group in group_runs(runs):
        print(group.label, group.stat("test_bleu"), group.time())

A run is any directory holding a summary.json; its config.yaml and metrics.jsonl are read when
present. Runs are grouped by (task, norm, p) plus every config key that was swept (a key whose value
differs between runs that share task, norm and p, such as task.model.init_center), so seeds are
the only thing a group averages over. Nothing here knows a task's internals: only the file contract.
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

import yaml

# Config keys that never define a group: where outputs go, how they are logged, and the seed.
NOT_SWEPT = ("seed", "paths.", "logger.", "hydra.", "device", "train.max_minutes", "train.checkpoint_every",
             "train.log_every")
# Rows and curves follow the paper's order of methods.
NORM_ORDER = ("none", "batchnorm", "weightnorm", "l2norm", "layernorm", "rmsnorm", "prmsnorm")
# A status whose numbers are real: completed runs, and diverged runs for their step time only.
TRAINED = "completed"
DIVERGED = "diverged"


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
    def status(self) -> str:
        return str(self.summary.get("status", "unknown"))

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
        """metrics.jsonl; a run killed mid-write may leave a torn last line, which is skipped."""
        path = self.path / "metrics.jsonl"
        if not path.exists():
            return []
        lines = []
        for line in path.read_text().splitlines():
            try:
                lines.append(json.loads(line))
            except json.JSONDecodeError:
                continue
        return lines

    def points(self, metric: str, x: str = "step") -> list[tuple[float, float, float]]:
        """(step, x, value) of every metrics.jsonl line that logged `metric` (x: "step" or "wall_s")."""
        keys = ("step", x, metric)
        return [(line["step"], line[x], line[metric]) for line in self.history
                if all(isinstance(line.get(k), (int, float)) and not isinstance(line.get(k), bool) for k in keys)]

    def curve(self, metric: str, x: str = "step") -> tuple[list[float], list[float]]:
        points = self.points(metric, x)
        return [p[1] for p in points], [p[2] for p in points]


def load_runs(root: str | Path) -> list[Run]:
    """Every run under root (searched recursively), in path order."""
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"runs directory {root} does not exist: run the sweep first (e.g. make table2)")
    runs = []
    for summary_path in sorted(root.rglob("summary.json")):
        run_dir = summary_path.parent
        try:
            summary = json.loads(summary_path.read_text())
        except json.JSONDecodeError as err:
            raise ValueError(f"{summary_path} is not valid JSON ({err}); delete that run or rerun it") from err
        config_path = run_dir / "config.yaml"
        config = (yaml.safe_load(config_path.read_text()) or {}) if config_path.exists() else {}
        runs.append(Run(run_dir, summary, config))
    return runs


def _flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(tree, dict):
        out: dict[str, Any] = {}
        for key, value in tree.items():
            out.update(_flatten(value, f"{prefix}{key}."))
        return out
    return {prefix[:-1]: json.dumps(tree, sort_keys=True)}


def swept_keys(runs: list[Run]) -> list[str]:
    """Config keys whose value differs between runs of the same (task, norm, p): what else was swept."""
    buckets: dict[tuple, list[dict[str, Any]]] = {}
    for run in runs:
        buckets.setdefault((run.task, run.norm, run.p), []).append(_flatten(run.config))
    keys: set[str] = set()
    for configs in buckets.values():
        for key in set().union(*configs):
            if key.startswith(NOT_SWEPT) or key in ("norm.p", "norm.name", "task.name"):
                continue
            if len({c.get(key) for c in configs}) > 1:
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

    def time(self) -> Stat | None:
        """Seconds per 1k steps over completed and diverged runs (the paper timed its failing baseline)."""
        return Stat.of(run.summary.get("s_per_1k_steps") for run in self.runs
                       if run.status in (TRAINED, DIVERGED) and run.summary.get("steps"))

    def status_note(self) -> str:
        """"3" when every run completed, else e.g. "2 of 3 (1 diverged)"."""
        counts = self.statuses
        done = counts.get(TRAINED, 0)
        if done == len(self.runs):
            return str(done)
        others = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()) if status != TRAINED)
        return f"{done} of {len(self.runs)} ({others})"


def group_runs(runs: list[Run]) -> list[Group]:
    """Groups in the paper's order: by task, then norm (NORM_ORDER), p and swept values."""
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
    """The paper's speed-up over LayerNorm, (T_LN - T_X) / T_LN, from mean step times."""
    if time_x is None or time_ln is None or time_ln.mean <= 0:
        return None
    return (time_ln.mean - time_x.mean) / time_ln.mean


def mean_curve(runs: list[Run], metric: str, x: str = "step") -> tuple[list[float], list[float], list[float]]:
    """(x, mean, std) of a metric over runs, at the steps every run logged it.

    With x="wall_s" the x value is the mean wall-clock time of those steps. Runs that stopped early
    (diverged) end the curve where they end: averaging a survivor with nothing would be a lie.
    """
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
