"""Hydra launchers of the suite's own: `launcher=slurm` (slurm.py)."""
