"""The GPU check's smoke stage (bench/gpu_smoke.py): its watchdog (the stage's checks themselves run in
tests/bench/test_gpu_check.py's whole-path test)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _run(script: str, timeout: int = 300) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "PYTHONPATH")}
    return subprocess.run([sys.executable, "-c", script], cwd=REPO, env={**env, "PYTHONPATH": str(REPO)},
                          capture_output=True, text=True, timeout=timeout)


def test_the_smoke_watchdog_writes_what_was_done_and_ends_the_process(tmp_path):
    """A smoke check that hangs: past the limit the record names it, keeps the checks done, and the process
    ends with exit code 3 while the check still runs."""
    script = f"""
import time
from pathlib import Path
from rmsnorm_repro.bench import gpu_smoke
from rmsnorm_repro.bench.gpu_record import Log, process_age_s
gpu_smoke.checks = lambda device, tasks, fraction: [
    ("first", lambda: {{"check": "first", "ok": True, "value": "fine"}}),
    ("hangs", lambda: time.sleep(600))]
gpu_smoke.run("cpu", [], Path({str(tmp_path / 'smoke.json')!r}), Log(Path({str(tmp_path / 'log')!r})),
              limit_s=process_age_s() + 2)
"""
    start = time.monotonic()
    out = _run(script)
    assert out.returncode == 3 and time.monotonic() - start < 120, out.stderr[-2000:]
    smoke = json.loads((tmp_path / "smoke.json").read_text())
    assert smoke["passed"] is False and smoke["running"] == "hangs"
    assert [c["check"] for c in smoke["checks"]] == ["first"] and "hangs: overran" in smoke["failed"][0]
    assert "still in 'hangs'" in (tmp_path / "log").read_text()
