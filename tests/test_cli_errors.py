"""The command line's errors as one line each (through the real command: tests/runner/test_train_cli.py,
test_disk.py, tests/launchers/test_slurm.py)."""
import errno

from rmsnorm_repro.cli_errors import disk_error_line, one_line, slurm_error


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
