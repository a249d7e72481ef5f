"""The authors' training log of their RMSNorm attentive reader, `stats_lstm_s1.npz.pkl` (bzhangGo/rmsnorm
README.md:160, http://data.statmt.org/bzhang/neurips19_rmsnorm/attentive_reader/stats_lstm_s1.npz.pkl),
read so Figure 5's page can draw their validation error beside ours.

Its format is Cooijmans' attentive_reader.py (branch bn): `stats = defaultdict(list)` (:178), one value
appended to each key at every validation (:520-534; `valid_errs` is the mean validation error, a
fraction), pickled with Python 2's cPickle (:489, protocol 0). Validations happen when the update
counter, incremented before the checks (:420), is a multiple of --validFreq (:494): 1000 in the
authors' command (README.md:154), so the i-th value (from 0) is at update (i + 1) * 1000.
"""
from __future__ import annotations

import pickle
from collections import defaultdict
from pathlib import Path

import numpy as np

FILE_NAME = "stats_lstm_s1.npz.pkl"
VALID_EVERY = 1000  # the authors' --validFreq

# What a Python 2 pickle of a defaultdict(list) of numpy floats names; nothing else is loaded. numpy's
# scalar reconstructor is numpy.core.multiarray.scalar in 1.x (what the authors' pickle names) and
# numpy._core.multiarray.scalar in 2.x: both names map to the one this numpy has.
_NUMPY_SCALAR = np.float64(0.0).__reduce__()[0]
_ALLOWED = {("collections", "defaultdict"): defaultdict, ("__builtin__", "list"): list, ("builtins", "list"): list,
            ("numpy", "dtype"): np.dtype, ("numpy.core.multiarray", "scalar"): _NUMPY_SCALAR,
            ("numpy._core.multiarray", "scalar"): _NUMPY_SCALAR}


class _StatsUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        if (module, name) not in _ALLOWED:
            raise pickle.UnpicklingError(f"refusing to load {module}.{name}: the authors' log holds lists of numbers only")
        return _ALLOWED[(module, name)]


def read_valid_errors(path: str | Path, valid_every: int = VALID_EVERY) -> list[tuple[int, float]]:
    """[(update, validation error)] from the authors' stats pickle; ValueError (one line) if it is not one."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            stats = _StatsUnpickler(f, encoding="latin1").load()
        errors = [float(v) for v in stats["valid_errs"]]
    except (OSError, pickle.UnpicklingError, EOFError, ValueError, TypeError, KeyError, AttributeError) as e:
        raise ValueError(f"{path} is not the authors' reader log (a pickled dict with a valid_errs list: "
                         f"{type(e).__name__}: {e})") from None
    return [((i + 1) * valid_every, err) for i, err in enumerate(errors)]
