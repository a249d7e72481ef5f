"""The command line's errors as one line each (through the real command: tests/runner/test_train_cli.py,
test_disk.py, tests/launchers/test_slurm.py)."""
import errno
import shutil

import pytest

from rmsnorm_repro.cli_errors import disk_error_line, launcher_unusable, one_line, slurm_error


def test_hydra_option_lists_are_joined_and_the_search_path_dropped():
    message = ("In 'train': Could not load 'norm/rmsnrm'.\nAvailable options in 'norm':\n\tlayernorm\n\trmsnorm\n"
               "Config search path:\n\tprovider=hydra")
    assert one_line(message) == "Could not load 'norm/rmsnrm'.; Available options in 'norm': layernorm, rmsnorm"


def test_a_full_and_a_read_only_disk_say_what_to_do():
    full = disk_error_line(OSError(errno.ENOSPC, "No space left on device", "r/checkpoints/last.pt"))
    assert full.startswith("no space left on the device while writing r/checkpoints/last.pt (the previous "
                           "checkpoint is intact)") and "rerun the same command" in full
    assert "the file system is read-only" in disk_error_line(OSError(errno.EROFS, "Read-only", "r/summary.json"))


def test_an_error_that_is_not_submitits_keeps_its_traceback():
    assert slurm_error(RuntimeError("something else")) is None


# issue 54: the launcher's settings as Hydra reads them, not as typed (cli_errors matched exact text)
@pytest.mark.parametrize("arg", ["hydra.launcher.n_jobs=00", "hydra.launcher.n_jobs=0.0", "hydra.launcher.n_jobs= 0",
                                 "hydra.launcher.n_jobs=0"])
def test_no_jobs_at_a_time_in_any_spelling_is_one_line(arg):
    line = launcher_unusable(["-m", "launcher=joblib", arg])
    assert line is not None and "runs nothing" in line
    assert launcher_unusable(["-m", "launcher=joblib", "hydra.launcher.n_jobs=10"]) is None


@pytest.mark.parametrize("arg", ["hydra/launcher=submitit_slurm", "+launcher=slurm", "launcher='slurm'"])
def test_slurm_chosen_in_any_spelling_without_slurm_is_one_line(arg, monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert "there is no SLURM here" in launcher_unusable(["-m", "task=tiny", arg])
    assert "takes effect only with -m" in launcher_unusable(["task=tiny", arg])


@pytest.mark.skipif(shutil.which("sbatch") is not None, reason="SLURM is here: the sweep would be submitted")
def test_submitit_slurm_without_slurm_is_one_line_from_the_command(tmp_path):
    from runner_fixtures.helpers import cli

    proc = cli("-m", "task=tiny", "seed=1,2", "hydra/launcher=submitit_slurm",
               f"hydra.sweep.dir={tmp_path / 'sweep'}", f"paths.runs_dir={tmp_path}")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and "no SLURM here" in proc.stderr
