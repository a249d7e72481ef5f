"""The paper's figures from our runs (matplotlib, PNG).

Curves are the mean over the completed seeds of a group with a band of +- one std; a diverged run is
drawn on its own, dashed, with an x where it stopped, so instability stays visible. A curve of few
points carries markers (a one-point curve is a dot, not nothing). Each norm keeps its colour on
every figure; several groups of one norm (a p sweep) get shades of it. Two runs of the same group
and seed (the same run trained twice, in two directories) count once (`unique_runs`). Figures are
built with matplotlib.figure.Figure, not pyplot, so drawing needs no display and leaves the backend
of a notebook that imports this module alone.
"""
from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Callable

from matplotlib.colors import to_rgb
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from ..atomic import atomic_path
from . import authors_reader_log
from .aggregate import DIVERGED, TRAIN_LOSS, TRAINED, Group, Run, group_runs, mean_curve, resolve_metric

NORM_COLORS = {"none": "tab:gray", "layernorm": "tab:blue", "rmsnorm": "tab:red", "prmsnorm": "tab:orange",
               "l2norm": "tab:green", "weightnorm": "tab:purple", "batchnorm": "tab:brown"}
MARKERS_UP_TO = 30  # points per curve drawn with markers
PNG_METADATA = {"Software": None}  # no matplotlib version in the file: regenerated PNGs stay identical


def unique_runs(runs: list[Run]) -> list[Run]:
    """The runs with one run per (group, seed): the same seed of the same settings trained twice (a
    single run and a sweep's job, or a copy) counts once. Kept: a completed run over any other, then
    the one with more steps, then the newer summary.json."""
    def rank(run: Run) -> tuple:
        summary = run.path / "summary.json"
        return (run.status == TRAINED, run.summary.get("steps") or 0, summary.stat().st_mtime if summary.exists() else 0)

    kept: set[int] = set()
    for group in group_runs(runs):
        by_seed: dict[object, Run] = {}
        for run in group.runs:
            if run.seed is None:
                kept.add(id(run))
            elif run.seed not in by_seed or rank(run) > rank(by_seed[run.seed]):
                by_seed[run.seed] = run
        kept.update(id(run) for run in by_seed.values())
    unique = copy.copy(runs)  # the same kind of list: load_runs' carries the runs still in progress
    unique[:] = [run for run in runs if id(run) in kept]
    return unique


def group_colors(groups: list[Group]) -> list[tuple[float, float, float]]:
    """One colour per group: its norm's (NORM_COLORS), shaded darker to lighter when a norm has several groups."""
    colors = []
    norms = list(dict.fromkeys(g.norm for g in groups))
    for group in groups:
        base = to_rgb(NORM_COLORS.get(group.norm, f"C{norms.index(group.norm) % 10}"))
        same = [g for g in groups if g.norm == group.norm]
        if len(same) > 1:
            t = -0.45 + 0.9 * same.index(group) / (len(same) - 1)  # < 0 darker, > 0 lighter
            base = tuple(c * (1 + t) if t < 0 else c + (1 - c) * t for c in base)
        colors.append(base)
    return colors


def metric_label(metric: str, runs: list[Run]) -> str:
    """An axis label that says what was measured: which training loss, and for the eval-step BLEU the
    split (dev held out from train, or valid) and the search (greedy or beam k) it was decoded with."""
    metric = resolve_metric(metric, runs)
    if metric == "window_loss":
        return "training loss per unit (target token), window mean"
    if metric == "loss":
        return "training loss (each logged step's)"
    if metric == "bleu" and runs:
        beams = {(run.config.get("task", {}).get("decode") or {}).get("valid_beam") for run in runs}
        search = ", ".join("greedy" if b == 1 else f"beam {b}" if b else "?" for b in sorted(beams, key=str))
        dev = {str((run.summary.get("data_info") or {}).get("selection", "valid")).startswith("dev") for run in runs}
        return f"{'dev' if dev == {True} else 'valid'} BLEU ({search})"
    return metric


def plot_curves(ax, groups: list[Group], metric: str, x: str = "step") -> bool:
    """Draw one curve per group; False when no run logged `metric` (TRAIN_LOSS: see aggregate)."""
    metric = resolve_metric(metric, [run for group in groups for run in group.runs])
    drawn = False
    for group, color in zip(groups, group_colors(groups)):
        xs, mean, std = mean_curve(group.completed, metric, x)
        if xs:
            marker = "o" if len(xs) <= MARKERS_UP_TO else None
            ax.plot(xs, mean, color=color, marker=marker, markersize=4 if len(xs) > 1 else 6,
                    label=f"{group.label} (n={len(group.completed)})")
            if len(group.completed) > 1:
                ax.fill_between(xs, [m - s for m, s in zip(mean, std)], [m + s for m, s in zip(mean, std)],
                                color=color, alpha=0.2, linewidth=0)
            drawn = True
        for run in group.runs:
            if run.status != DIVERGED:
                continue
            rx, ry = run.curve(metric, x)
            if rx:
                ax.plot(rx, ry, color=color, linestyle="--", linewidth=1,
                        marker="." if len(rx) <= MARKERS_UP_TO else None,
                        label=f"{group.label} seed {run.seed} (diverged)")
                ax.plot(rx[-1:], ry[-1:], marker="x", color=color, markersize=8)
                drawn = True
    if drawn:
        ax.set_xlabel({"step": "training step", "wall_s": "wall-clock seconds"}.get(x, x))
        ax.set_ylabel(metric_label(metric, [run for group in groups for run in group.runs]), fontsize=8)
        if x == "step":
            ax.xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))  # no step 1.975 by a lone point
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    return drawn


def panel_grid(n: int, columns: int = 3, width: float = 5.0, height: float = 3.6) -> tuple[int, int, tuple[float, float]]:
    """(rows, columns, figsize) for n panels wrapped at `columns` per row, each width x height inches:
    readable at the size a page or a notebook shows them (one row of five panels is not)."""
    cols = max(1, min(n, columns))
    rows = math.ceil(n / cols)
    return rows, cols, (width * cols, height * rows)


def _curves_figure(title: str, panels: list[tuple[str, str, str]],
                   beside: Callable[[object, list[Group]], bool] | None = None) -> Callable[[list[Group], Path], bool]:
    """A figure of side-by-side panels, each (metric, x, panel title); `beside` draws a reference curve
    (the authors' own) into the first panel when it has one."""
    def draw(groups: list[Group], path: Path) -> bool:
        rows, cols, size = panel_grid(len(panels), columns=2, width=6.0, height=4.2)
        fig = Figure(figsize=size)
        axes = fig.subplots(rows, cols, squeeze=False).flatten()
        drawn = False
        for ax, (metric, x, panel_title) in zip(axes, panels):
            ax.set_title(panel_title, fontsize=10)
            drawn |= plot_curves(ax, groups, metric, x)
        if drawn and beside is not None and beside(axes[0], groups):
            axes[0].legend(fontsize=7)
        for ax in axes[len(panels):]:
            ax.set_visible(False)
        fig.suptitle(title)
        fig.tight_layout()
        if drawn:
            save(fig, path)
        return drawn
    return draw


def save(fig: Figure, path: Path) -> None:
    """A PNG written atomically, as every result file is."""
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110, metadata=PNG_METADATA)


def _quality_vs_p(groups: list[Group], path: Path) -> bool:
    """Figure 3: best validation BLEU (solid) and test BLEU (dashed) against p, one line per norm."""
    fig = Figure(figsize=(6, 4.2))
    ax = fig.subplots()
    drawn = False
    norms = list(dict.fromkeys(g.norm for g in groups))
    for i, norm in enumerate(norms):
        color = NORM_COLORS.get(norm, f"C{i % 10}")
        for metric, source, style in (("bleu", "best", "-o"), ("test_bleu", "final", "--s"), ("test14_bleu", "final", ":^")):
            points = sorted(((g.p, g.stat(metric, source)) for g in groups if g.norm == norm), key=lambda pt: pt[0])
            points = [(p, stat) for p, stat in points if stat is not None]
            if points:
                ax.errorbar([p for p, _ in points], [s.mean for _, s in points],
                            yerr=[s.std if s.n > 1 else 0.0 for _, s in points],
                            fmt=style, color=color, capsize=3, label=f"{norm}: {source} {metric}")
                drawn = True
    if drawn:
        ax.set_xlabel("p (fraction of units in the RMS statistic)")
        ax.set_ylabel("BLEU")
        ax.set_xlim(0, 1.05)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        ax.set_title("Figure 3: BLEU against p")
        fig.tight_layout()
        save(fig, path)
    return drawn


def _authors_reader_log(ax, groups: list[Group]) -> bool:
    """Figure 5: the authors' RMSNorm reader's validation error (their training log), when it lies in the
    CNN folder our runs read (data.root/stats_lstm_s1.npz.pkl)."""
    roots = {str(run.config.get("data", {}).get("root")) for group in groups for run in group.runs
             if run.config.get("data", {}).get("name") == "cnn"}
    logs = [Path(root) / authors_reader_log.FILE_NAME for root in sorted(roots)
            if (Path(root) / authors_reader_log.FILE_NAME).is_file()]
    if not logs:
        return False
    points = authors_reader_log.read_valid_errors(logs[0])
    ax.plot([u for u, _ in points], [e for _, e in points], color="black", linestyle=":", linewidth=1.2,
            label="authors' RMSNorm (their log, Theano; updates of 64)")
    return True


# figure name -> (task whose runs it reads, drawing function)
FIGURES: dict[str, tuple[str, Callable[[list[Group], Path], bool]]] = {
    "fig1": ("rnnsearch", _curves_figure("Figure 1: RNNSearch training loss",
                                         [(TRAIN_LOSS, "step", "against steps"), (TRAIN_LOSS, "wall_s", "against wall-clock")])),
    "fig2": ("rnnsearch", _curves_figure("Figure 2: RNNSearch validation BLEU", [("bleu", "step", "valid BLEU")])),
    "fig3": ("rnnsearch", _quality_vs_p),
    "fig4": ("rnnsearch", _curves_figure("Figure 4: init centre shifted (task.model.init_center)",
                                         [(TRAIN_LOSS, "step", "training loss"), ("bleu", "step", "valid BLEU")])),
    "fig5": ("reader", _curves_figure("Figure 5: attentive reader validation error", [("error", "step", "valid error")],
                                      beside=_authors_reader_log)),
    "fig6": ("retrieval", _curves_figure("Figure 6: order embeddings validation R@K sum", [("rsum", "step", "valid R@K sum")])),
    "table9": ("convpool", _curves_figure("Table 9: ConvPool-CNN-C training error",
                                          [("train_batch_error", "step", "training-batch error % (dropout on: the authors')"),
                                           ("train_error", "step", "training error % (eval mode)"),
                                           ("error", "step", "test error %")])),
}


def draw(name: str, runs: list[Run], path: Path) -> Path | None:
    """Draw figure `name` from the runs of its task into path; None when those runs have no such data."""
    if name not in FIGURES:
        raise ValueError(f"unknown figure {name!r}; choose one of: {', '.join(FIGURES)}")
    task, drawer = FIGURES[name]
    groups = group_runs(unique_runs([run for run in runs if run.task == task]))
    if not groups:
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    return path if drawer(groups, path) else None
