"""The run's files: metrics.jsonl (one line per logged step) and atomic JSON (summary.json)."""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from ..atomic import atomic_write_text
from ..record import read_metrics


def finite_or_none(value: Any) -> Any:
    """NaN/inf become null, so every file stays strict JSON (a diverged run's loss is null)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite_or_none(v) for k, v in value.items()}
    return value


def write_json(path: Path, obj: dict[str, Any]) -> None:
    """Atomic: readers (the report, a sweep monitor) never see half a file."""
    atomic_write_text(path, json.dumps(finite_or_none(obj), indent=2, allow_nan=False) + "\n")


class MetricsFile:
    """metrics.jsonl: one JSON object per logged step, flushed as it is written."""

    def __init__(self, path: Path, resume_step: int):
        self.path = path
        self._truncate(resume_step)
        self.file = open(path, "a", encoding="utf-8")

    def _truncate(self, step: int) -> None:
        """Keep lines up to the checkpoint's step: steps after it are replayed by the resumed run.

        A line cut short by a kill does not parse and goes too (record.read_metrics' rule).
        """
        kept = [record for record in read_metrics(self.path) if record.get("step", math.inf) <= step] if step > 0 else []
        atomic_write_text(self.path, "".join(json.dumps(finite_or_none(record), allow_nan=False) + "\n" for record in kept))

    def log(self, record: dict[str, Any]) -> None:
        self.file.write(json.dumps(finite_or_none(record), allow_nan=False) + "\n")
        self.file.flush()

    def close(self) -> None:
        self.file.close()
