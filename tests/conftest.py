"""Shared test settings and fixtures: offline, wandb disabled, one thread (the CI machine has 2 cores).

Fixtures (as lightning-hydra-template's tests/conftest.py):
- `compose(overrides, hydra_node=False)`: hydra.compose on configs/ as `python -m rmsnorm_repro.train`
  composes it, with tests/runner_fixtures/configs on the search path (the tiny task), Hydra's global
  state cleared first;
- `tiny_cfg(*overrides)`: the tiny task's config writing under this test's own tmp_path;
- `ext`: the fused CPU kernel's extension (the test is skipped where it cannot be built);
- every test leaves the logging configuration as it found it (`_logging_as_found`).
Per-task tiny sizes of the real tasks live in tests/tiny_sizes.py.
"""
import logging
import os

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("WANDB_SILENT", "true")

import pytest  # noqa: E402
import torch  # noqa: E402
from hydra import compose as hydra_compose  # noqa: E402
from hydra import initialize_config_dir  # noqa: E402
from hydra.core.global_hydra import GlobalHydra  # noqa: E402

torch.set_num_threads(1)


def _compose(overrides: list[str], hydra_node: bool = False):
    from runner_fixtures.helpers import CONFIGS, SEARCHPATH  # CONFIGS also registers the resolvers

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        return hydra_compose("train", overrides=[SEARCHPATH, *overrides], return_hydra_config=hydra_node)


@pytest.fixture(scope="session")
def compose():
    """compose(overrides, hydra_node=False) -> the composed config (hydra node included on request)."""
    return _compose


@pytest.fixture
def tiny_cfg(tmp_path, compose):
    """tiny_cfg(*overrides) -> the tiny task's config, its runs under this test's tmp_path."""
    def make(*overrides: str):
        return compose(["task=tiny", f"paths.runs_dir={tmp_path}", *overrides])
    return make


@pytest.fixture(autouse=True)
def _logging_as_found():
    """A test that runs Hydra's main in-process with Hydra's logging config leaves handlers writing to
    that test's captured (then closed) stdout; the next test to log at INFO would print a logging error
    instead. The loggers that existed before each test get their handlers and levels back after it."""
    loggers = [logging.getLogger()] + [log for log in logging.Logger.manager.loggerDict.values()
                                       if isinstance(log, logging.Logger)]
    saved = [(log, log.handlers[:], log.level, log.disabled) for log in loggers]
    yield
    for log, handlers, level, disabled in saved:
        log.handlers[:] = handlers
        log.setLevel(level)
        log.disabled = disabled


@pytest.fixture(scope="session")
def ext():
    from rmsnorm_repro.norms.fused import cpu

    module = cpu.load()
    if module is None:
        pytest.skip("fused CPU kernel could not be built here (no C++ compiler or ninja; see the warning)")
    return module


def pytest_collection_modifyitems(items):
    # `make test` runs a worker a core (pytest-xdist, --dist loadgroup): the SLURM jobs go to one worker, in
    # turn, as the one-node cluster has a job slot a core and their time limits assume a free slot
    for item in items:
        if item.get_closest_marker("slurm"):
            item.add_marker(pytest.mark.xdist_group("slurm"))
