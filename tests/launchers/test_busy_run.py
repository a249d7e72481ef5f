"""A second process on a folder another process trains in is refused before Hydra writes into it."""
from __future__ import annotations

import fcntl

from runner_fixtures.helpers import cli


def test_a_refused_second_process_leaves_the_first_runs_hydra_files_alone(tmp_path):
    run_dir = tmp_path / "run"
    (run_dir / ".hydra").mkdir(parents=True)
    first = "- task=tiny\n- seed=1\n"
    (run_dir / ".hydra" / "overrides.yaml").write_text(first)
    with open(run_dir / ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the first run, training
        proc = cli("task=tiny", "seed=2", f"hydra.run.dir={run_dir}")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr[-2000:]
    assert "another process" in proc.stderr and "is running in" in proc.stderr
    assert (run_dir / ".hydra" / "overrides.yaml").read_text() == first
    assert not (run_dir / "train.log").exists()


def test_a_sweep_into_a_folder_where_a_job_trains_is_refused_before_hydra_writes(tmp_path):
    """Audit case 31 for sweeps: a second sweep into the same sweep folder, while one of its jobs trains."""
    sweep_dir = tmp_path / "sweep"
    job_dir = sweep_dir / "seed=1"
    (job_dir / ".hydra").mkdir(parents=True)
    first = "- task=tiny\n- seed=1\n"
    (job_dir / ".hydra" / "overrides.yaml").write_text(first)
    with open(job_dir / ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the first sweep's job, training
        proc = cli("-m", "task=tiny", "seed=1,2", f"hydra.sweep.dir={sweep_dir}")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr[-2000:]
    assert "is running in" in proc.stderr and "hydra.sweep.dir" in proc.stderr
    assert (job_dir / ".hydra" / "overrides.yaml").read_text() == first
    assert not (job_dir / "train.log").exists() and not (sweep_dir / "seed=2").exists()


def test_of_two_runs_started_at_once_in_one_folder_the_winner_keeps_its_own_hydra_files(tmp_path):
    """Audit f15a5c5 case 6: both asked whether the folder was busy before either took its lock (at the
    run's start, runner/setup), both wrote .hydra/, and whichever wrote last named the folder's command
    whoever won the lock. The first run's start is slowed (TINY_TASK_IMPORT_S) so the second comes in
    between: it took the lock, and the first, refused, had written .hydra/ already. Now the first holds
    the lock before Hydra writes, and the second is refused before it writes."""
    import subprocess
    import time

    from runner_fixtures.helpers import REPO, cli_args, cli_env

    run_dir = tmp_path / "run"
    common = ("task=tiny", "train.steps=2", "train.eval_every=2", f"hydra.run.dir={run_dir}")
    first = subprocess.Popen(cli_args(*common, "seed=1"), env=cli_env(TINY_TASK_IMPORT_S="6"), cwd=REPO,
                             stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not (run_dir / ".hydra" / "overrides.yaml").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    second = cli(*common, "seed=2")
    assert first.wait(timeout=120) == 0, first.stderr.read()[-2000:]
    assert second.returncode == 2 and "another process" in second.stderr and second.stderr.count("\n") == 1
    assert "seed=1" in (run_dir / ".hydra" / "overrides.yaml").read_text()
    assert "seed=2" not in (run_dir / ".hydra" / "overrides.yaml").read_text()
    assert "seed: 1" in (run_dir / ".hydra" / "config.yaml").read_text()
