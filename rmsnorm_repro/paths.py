"""Where the suite's own files are, in a checkout and in an installed wheel alike.

    configs_dir()   # the Hydra configs: <repo>/configs, or rmsnorm_repro/configs inside a wheel
    paper_dir()     # the paper's numbers: <repo>/results/paper, or rmsnorm_repro/paper inside a wheel
    repo_dir()      # the checkout, or None when the package runs from an installed wheel
    table_command("table4")  # "make table4" in a checkout, "rmsnorm-train -m experiment=table4" from a wheel

The repository keeps configs/ and results/paper/ at its top (users read and edit them there); the
wheel ships them as package data (pyproject.toml maps the packages rmsnorm_repro.configs and
rmsnorm_repro.paper to those folders). Every reader of those folders asks here, so `rmsnorm-train`
and `rmsnorm-report` work from any directory after a plain `pip install`.

Importing this module also registers the resolvers of the Hydra-side configs: `run_suffix` and
`job_dirname`, which name a single run's and a sweep job's directory, and `name_excluded`, the keys
left out of those names (all three from rmsnorm_repro/record.py, used by configs/train.yaml),
`options_of`, which lists a group's options in --help (configs/hydra/help/rmsnorm.yaml), and
`python_bin` and `max`, which configs/launcher/slurm.yaml's job setup and task count read: whoever
finds the configs can resolve them.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

PACKAGE = Path(__file__).resolve().parent


def repo_dir() -> Path | None:
    """The checkout this package runs from (it has configs/train.yaml at its top), else None."""
    repo = PACKAGE.parent
    return repo if (repo / "configs" / "train.yaml").is_file() and (repo / "pyproject.toml").is_file() else None


def _shipped(inside: str, in_repo: tuple[str, ...]) -> Path:
    packaged = PACKAGE / inside
    if packaged.is_dir():  # an installed wheel
        return packaged
    repo = repo_dir()
    if repo is None:
        raise FileNotFoundError(f"neither {packaged} nor a checkout's {'/'.join(in_repo)} exists: "
                                f"reinstall rmsnorm_repro (pip install .) or run it from its repository")
    return repo.joinpath(*in_repo)


def table_command(target: str) -> str:
    """How to train a paper table's or figure's runs, as this install can: `make table4` in a checkout,
    `rmsnorm-train -m experiment=table4` from an installed wheel (which has no Makefile)."""
    return f"make {target}" if repo_dir() is not None else f"rmsnorm-train -m experiment={target}"


def configs_dir() -> Path:
    """The Hydra config directory (train.yaml and the groups)."""
    return _shipped("configs", ("configs",))


def paper_dir() -> Path:
    """The paper's published numbers, one CSV per table (results/paper/table*.csv)."""
    return _shipped("paper", ("results", "paper"))


def options_of(group: str) -> str:
    """The options of a config group, "a, b, c" (natural order: table2 before table10), for --help."""
    names = [p.stem for p in (configs_dir() / group).glob("*.yaml")]
    return ", ".join(sorted(names, key=lambda n: [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", n)]))


def python_bin() -> str:
    """The bin/ folder of the Python running this process (a venv's .venv/bin): a SLURM job's setup puts
    it first on PATH, resolved when the sweep is submitted (Hydra's ${hydra:...} is not set then)."""
    return str(Path(sys.executable).parent)


def _register() -> None:
    from . import record

    resolvers = {"run_suffix": lambda overrides, exclude: record.run_suffix(_plain(overrides), _plain(exclude)),
                 "job_dirname": lambda overrides, exclude, params: record.job_dirname(
                     _plain(overrides), _plain(exclude), _plain_dict(params)),
                 "name_excluded": lambda: list(record.NAME_EXCLUDED),
                 "options_of": options_of,
                 "python_bin": python_bin,
                 "max": lambda *values: max(values)}
    for name, resolver in resolvers.items():
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, resolver)


def _plain(node: Any) -> list[str]:
    if node is None:
        return []
    if OmegaConf.is_config(node):
        node = OmegaConf.to_container(node, resolve=True)
    return [str(x) for x in node]


def _plain_dict(node: Any) -> dict[str, Any]:
    if node is None:
        return {}
    return dict(OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node)


_register()
