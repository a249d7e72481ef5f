"""A multirun says what it is about to run: the count of a sweep's runs (a real sweep's lines:
tests/report/test_compare.py); training loads no plotting for it."""
from __future__ import annotations

import subprocess
import sys

from rmsnorm_repro.launchers import sweep


def test_job_count_multiplies_the_swept_values():
    assert sweep.job_count({"norm": "layernorm,rmsnorm", "seed": "range(3)", "optim.lr": "0.1"}) == (6, ["norm", "seed"])
    assert sweep.job_count({"seed": "1"}) == (1, [])


def test_training_imports_the_sweep_callback_without_plotting():
    """The callback is wired into every multirun (configs/train.yaml): it loads the compare page only at the end."""
    code = "import sys, rmsnorm_repro.launchers.sweep; print(any(m.startswith('matplotlib') for m in sys.modules))"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "False\n"
