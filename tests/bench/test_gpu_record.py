"""What the GPU check keeps when cut off (bench/gpu_record.py): its clock, its log, no path of the machine."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from rmsnorm_repro.bench.gpu_record import Log, portable

REPO = Path(__file__).resolve().parents[2]


def _run(script: str, timeout: int = 300) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "PYTHONPATH")}
    return subprocess.run([sys.executable, "-c", script], cwd=REPO, env={**env, "PYTHONPATH": str(REPO)},
                          capture_output=True, text=True, timeout=timeout)


def test_the_deadline_counts_from_the_process_start():
    out = _run("import time; time.sleep(1.5)\nfrom rmsnorm_repro.bench.gpu_record import process_age_s\n"
               "print(process_age_s())")
    assert 1.5 <= float(out.stdout) < 60, out.stderr


def test_the_log_and_its_errors_name_no_path_of_this_machine(tmp_path):
    log = Log(tmp_path / "check.log")
    try:
        raise FileNotFoundError(f"{tmp_path / 'x.pt'} and {REPO / 'rmsnorm_repro'}")
    except FileNotFoundError:
        line = log.exception("a block")
    log.close()
    assert line == "FileNotFoundError: <out>/x.pt and <checkout>/rmsnorm_repro"
    text = (tmp_path / "check.log").read_text()
    assert "Traceback" in text and str(tmp_path) not in text and str(REPO) not in text
    assert portable(f"{sys.prefix}/lib") == "<python>/lib"
