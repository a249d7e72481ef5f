"""Reports read run folders and train nothing: the paper's pages beside ours (tables.py, figures.py, claims.py),
`rmsnorm-report compare` (compare.py), the runs as groups (aggregate.py)."""
from .aggregate import Group, Run, Stat, describe_env, group_runs, load_runs, mean_curve, speedup

__all__ = ["Group", "Run", "Stat", "describe_env", "group_runs", "load_runs", "mean_curve", "speedup"]
