"""Where the suite's own files are, in a checkout and in an installed wheel alike.

    configs_dir()   # the Hydra configs: <repo>/configs, or rmsnorm_repro/configs inside a wheel
    paper_dir()     # the paper's numbers: <repo>/results/paper, or rmsnorm_repro/paper inside a wheel
    repo_dir()      # the checkout, or None when the package runs from an installed wheel

The repository keeps configs/ and results/paper/ at its top (users read and edit them there); the
wheel ships them as package data (pyproject.toml maps the packages rmsnorm_repro.configs and
rmsnorm_repro.paper to those folders). Every reader of those folders asks here, so `rmsnorm-train`
and `rmsnorm-report` work from any directory after a plain `pip install`.

Importing this module also registers the resolvers of the Hydra-side configs: `run_suffix`, which
names a single run's directory (configs/train.yaml, hydra.run.dir), `options_of`, which lists a
group's options in --help (configs/hydra/help/rmsnorm.yaml), and `python_bin` and `max`, which
configs/launcher/slurm.yaml's job setup and task count read: whoever finds the configs can resolve them.
"""
from __future__ import annotations

import hashlib
import re
import sys
from pathlib import Path
from typing import Any, Iterable

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


def configs_dir() -> Path:
    """The Hydra config directory (train.yaml and the groups)."""
    return _shipped("configs", ("configs",))


def paper_dir() -> Path:
    """The paper's published numbers, one CSV per table (results/paper/table*.csv)."""
    return _shipped("paper", ("results", "paper"))


# The single-run directory name ------------------------------------------------------------------
# Already in the name (<norm>-p<p>-s<seed>), so never repeated in its suffix.
IN_RUN_NAME = ("norm", "norm.p", "seed")
MAX_NAME = 200  # bytes; file systems allow 255 per path component


def run_suffix(overrides: Iterable[str] | None, exclude_keys: Iterable[str] | None) -> str:
    """",optim.lr=0.0001,task.model.dim=64" for a single run's command-line overrides, "" for none.

    The same overrides a sweep names its job directories after (hydra.job.override_dirname:
    sorted, minus exclude_keys), minus the norm, p and seed the name already has and any
    secret-looking key (an API key never becomes a directory name). A '/' in a value (a path)
    becomes '_'; a suffix too long for one path component is cut and ends in a hash of the whole.
    """
    from .runner.config import is_secret_key  # lazy: resolved only when a run directory is named

    excluded = {*(exclude_keys or ()), *IN_RUN_NAME}
    kept = []
    for line in overrides or ():
        key = str(line).split("=", 1)[0].lstrip("+~")
        if key in excluded or is_secret_key(key):
            continue
        kept.append(str(line))
    if not kept:
        return ""
    suffix = "," + ",".join(sorted(kept)).replace("/", "_")
    if len(suffix.encode()) > MAX_NAME:
        digest = hashlib.sha1(suffix.encode()).hexdigest()[:10]
        suffix = suffix.encode()[: MAX_NAME - 12].decode(errors="ignore") + f"-{digest}"
    return re.sub(r"\s", "_", suffix)


def options_of(group: str) -> str:
    """The options of a config group, "a, b, c" (natural order: table2 before table10), for --help."""
    names = [p.stem for p in (configs_dir() / group).glob("*.yaml")]
    return ", ".join(sorted(names, key=lambda n: [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", n)]))


def python_bin() -> str:
    """The bin/ folder of the Python running this process (a venv's .venv/bin): a SLURM job's setup puts
    it first on PATH, resolved when the sweep is submitted (Hydra's ${hydra:...} is not set then)."""
    return str(Path(sys.executable).parent)


def _register() -> None:
    if not OmegaConf.has_resolver("run_suffix"):
        OmegaConf.register_new_resolver("run_suffix", _resolve_run_suffix)
    if not OmegaConf.has_resolver("options_of"):
        OmegaConf.register_new_resolver("options_of", options_of)
    if not OmegaConf.has_resolver("python_bin"):
        OmegaConf.register_new_resolver("python_bin", python_bin)
    if not OmegaConf.has_resolver("max"):
        OmegaConf.register_new_resolver("max", lambda *values: max(values))


def _resolve_run_suffix(overrides: Any, exclude_keys: Any) -> str:
    def plain(node: Any) -> list[str]:
        if node is None:
            return []
        if OmegaConf.is_config(node):
            node = OmegaConf.to_container(node, resolve=True)
        return [str(x) for x in node]

    return run_suffix(plain(overrides), plain(exclude_keys))


_register()
