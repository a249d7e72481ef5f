"""Reports: the paper's numbers beside ours, as Markdown tables under results/tables/."""
from .aggregate import Group, Run, Stat, describe_env, group_runs, load_runs, mean_curve, speedup

__all__ = ["Group", "Run", "Stat", "describe_env", "group_runs", "load_runs", "mean_curve", "speedup"]
