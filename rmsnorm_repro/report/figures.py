"""The paper's figures from our runs (matplotlib, PNG).

Curves are the mean over the completed seeds of a group with a band of +- one std; a diverged run is
drawn on its own, dashed, with an x where it stopped, so instability stays visible. Figures are
built with matplotlib.figure.Figure, not pyplot, so drawing needs no display and leaves the backend
of a notebook that imports this module alone.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from matplotlib.figure import Figure

from .aggregate import DIVERGED, Group, Run, group_runs, mean_curve

NORM_COLORS = {"none": "tab:gray", "layernorm": "tab:blue", "rmsnorm": "tab:red", "prmsnorm": "tab:orange",
               "l2norm": "tab:green", "weightnorm": "tab:purple", "batchnorm": "tab:brown"}


def _color(group: Group, index: int) -> str:
    return NORM_COLORS.get(group.norm, f"C{index % 10}")


def plot_curves(ax, groups: list[Group], metric: str, x: str = "step") -> bool:
    """Draw one curve per group; False when no run logged `metric`."""
    drawn = False
    for i, group in enumerate(groups):
        color = _color(group, i) if len({g.norm for g in groups}) == len(groups) else f"C{i % 10}"
        xs, mean, std = mean_curve(group.completed, metric, x)
        if xs:
            ax.plot(xs, mean, color=color, label=f"{group.label} (n={len(group.completed)})")
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
                        label=f"{group.label} seed {run.seed} (diverged)")
                ax.plot(rx[-1:], ry[-1:], marker="x", color=color, markersize=8)
                drawn = True
    if drawn:
        ax.set_xlabel({"step": "training step", "wall_s": "wall-clock seconds"}.get(x, x))
        ax.set_ylabel(metric)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    return drawn


def _curves_figure(title: str, panels: list[tuple[str, str, str]]) -> Callable[[list[Group], Path], bool]:
    """A figure of side-by-side panels, each (metric, x, panel title)."""
    def draw(groups: list[Group], path: Path) -> bool:
        fig = Figure(figsize=(6 * len(panels), 4.2))
        axes = fig.subplots(1, len(panels), squeeze=False)
        drawn = False
        for ax, (metric, x, panel_title) in zip(axes[0], panels):
            ax.set_title(panel_title, fontsize=10)
            drawn |= plot_curves(ax, groups, metric, x)
        fig.suptitle(title)
        fig.tight_layout()
        if drawn:
            fig.savefig(path, dpi=110)
        return drawn
    return draw


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
                ax.errorbar([p for p, _ in points], [s.mean for _, s in points], yerr=[s.std for _, s in points],
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
        fig.savefig(path, dpi=110)
    return drawn


# figure name -> (task whose runs it reads, drawing function)
FIGURES: dict[str, tuple[str, Callable[[list[Group], Path], bool]]] = {
    "fig1": ("rnnsearch", _curves_figure("Figure 1: RNNSearch training loss",
                                         [("loss", "step", "against steps"), ("loss", "wall_s", "against wall-clock")])),
    "fig2": ("rnnsearch", _curves_figure("Figure 2: RNNSearch validation BLEU", [("bleu", "step", "valid BLEU")])),
    "fig3": ("rnnsearch", _quality_vs_p),
    "fig4": ("rnnsearch", _curves_figure("Figure 4: init centre shifted (task.model.init_center)",
                                         [("loss", "step", "training loss"), ("bleu", "step", "valid BLEU")])),
    "fig5": ("reader", _curves_figure("Figure 5: attentive reader validation error", [("error", "step", "valid error")])),
    "fig6": ("retrieval", _curves_figure("Figure 6: order embeddings validation R@K sum", [("rsum", "step", "valid R@K sum")])),
    "table9": ("convpool", _curves_figure("Table 9: ConvPool-CNN-C training error",
                                          [("train_error", "step", "training error %"), ("error", "step", "test error %")])),
}


def draw(name: str, runs: list[Run], path: Path) -> Path | None:
    """Draw figure `name` from the runs of its task into path; None when those runs have no such data."""
    if name not in FIGURES:
        raise ValueError(f"unknown figure {name!r}; choose one of: {', '.join(FIGURES)}")
    task, drawer = FIGURES[name]
    groups = group_runs([run for run in runs if run.task == task])
    if not groups:
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    return path if drawer(groups, path) else None
