"""Hydra launchers and callbacks of the suite's own: `launcher=slurm` (slurm.py), the multirun progress
and compare table (sweep.py)."""
