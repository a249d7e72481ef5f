"""A full disk and a read-only folder under a real run: one line on stderr, exit 2, nothing lost.

The file systems are real (tmpfs mounts), so these run where the tests may mount (root, as in CI)
and skip elsewhere.
"""
from __future__ import annotations

import contextlib
import subprocess
import time
from pathlib import Path

import pytest

from rmsnorm_repro.runner import checkpoint
from runner_fixtures.helpers import REPO, cli, cli_args, cli_env, read_summary

pytestmark = pytest.mark.slow  # every test here trains real runs


@contextlib.contextmanager
def tmpfs(where: Path, options: str):
    where.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({mounted.stderr.decode().strip() or 'not root'})")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def _error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]


def test_a_disk_that_fills_while_saving_a_checkpoint_is_one_line_and_the_last_checkpoint_survives(tmp_path):
    with tmpfs(tmp_path / "disk", "size=512k") as disk:
        run_dir = disk / "run"
        args = cli_args("task=tiny", "train.steps=60", "task.sleep_ms=20", "train.checkpoint_every=10",
                        "train.eval_every=1000", f"hydra.run.dir={run_dir}", f"paths.runs_dir={disk}")
        proc = subprocess.Popen(args, env=cli_env(), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        last = run_dir / "checkpoints" / "last.pt"
        deadline = time.monotonic() + 120
        while not last.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.02)
        saved = checkpoint.load(last)["step"]
        with contextlib.suppress(OSError), open(disk / "filler", "wb", buffering=0) as filler:
            while True:  # the disk is full once this fails
                filler.write(b"\0" * 4096)
        _, stderr = proc.communicate(timeout=120)
        assert proc.returncode == 2, stderr[-3000:]
        assert "Traceback" not in stderr
        [line] = _error_lines(stderr)
        assert line.startswith("error: no space left on the device while writing") and "previous checkpoint is intact" in line
        assert checkpoint.load(last)["step"] >= saved  # the old last.pt still loads
        # space again: the same command resumes from it and completes
        (disk / "filler").unlink()
        proc = cli(*args[args.index("task=tiny"):], timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert read_summary(run_dir)["status"] == "completed" and read_summary(run_dir)["steps"] == 60


def test_a_read_only_runs_folder_is_one_line(tmp_path):
    with tmpfs(tmp_path / "ro", "ro,size=64k") as folder:
        proc = cli("task=tiny", "train.steps=3", f"paths.runs_dir={folder}", f"hydra.run.dir={folder / 'run'}")
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    [line] = _error_lines(proc.stderr)
    assert "read-only" in line and "paths.runs_dir" in line, line
