"""Compose configs like `python -m rmsnorm_repro.train` does, run the CLI in a subprocess, and write tiny data
files in the real formats."""
from __future__ import annotations

import gzip
import json
import os
import random
import subprocess
import sys
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from rmsnorm_repro.paths import configs_dir

REPO = Path(__file__).resolve().parents[2]  # the checkout under test: subprocesses run from here
CONFIGS = configs_dir()  # also registers the resolvers train.yaml's hydra section uses
SEARCHPATH = f"hydra.searchpath=[file://{Path(__file__).resolve().parent / 'configs'}]"


def compose_cfg(overrides: list[str], hydra_node: bool = False):
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        return compose("train", overrides=[SEARCHPATH, *overrides], return_hydra_config=hydra_node)


def tiny(tmp_path: Path, *overrides: str):
    """The tiny task's config, writing under tmp_path."""
    return compose_cfg(["task=tiny", f"paths.runs_dir={tmp_path}", *overrides])


def cli_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", WANDB_MODE="disabled", HYDRA_FULL_ERROR="0",
               PYTHONPATH=os.pathsep.join([str(REPO / "tests"), os.environ.get("PYTHONPATH", "")]))
    env.update(extra)
    return env


def cli_args(*overrides: str) -> list[str]:
    flags = [o for o in overrides if o.startswith("-")]  # Hydra's flags (-m) go before the overrides
    return [sys.executable, "-m", "rmsnorm_repro.train", *flags, SEARCHPATH, *(o for o in overrides if o not in flags)]


def main_in_process(monkeypatch, capsys, *overrides: str) -> tuple[int | str | None, list[str]]:
    """rmsnorm-train's main() in this process on the overrides, as a user's shell would run it (no
    tracebacks asked for): its exit code and the non-blank lines it wrote to stderr."""
    from rmsnorm_repro.train import main

    for var in ("HYDRA_FULL_ERROR", "RMSNORM_FULL_ERROR"):
        monkeypatch.setenv(var, "0")
    monkeypatch.setattr(sys, "argv", ["rmsnorm-train", *overrides, "hydra/job_logging=none", "hydra/hydra_logging=none"])
    GlobalHydra.instance().clear()
    try:
        main()
        code = 0
    except SystemExit as stop:
        code = stop.code
    finally:
        GlobalHydra.instance().clear()
    return code, [line for line in capsys.readouterr().err.splitlines() if line.strip()]


def cli(*overrides: str, env: dict[str, str] | None = None, cwd: Path = REPO, timeout: float = 120):
    return subprocess.run(cli_args(*overrides), env=env or cli_env(), cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)


def read_metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def read_summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


MULTI30K_NOUNS = [("man", "Mann"), ("dog", "Hund"), ("child", "Kind"), ("woman", "Frau"), ("bike", "Fahrrad"), ("ball", "Ball")]
MULTI30K_VERBS = [("sees", "sieht"), ("has", "hat"), ("rides", "fährt"), ("holds", "hält")]


def write_multi30k(root: Path, splits: dict[str, int], seed: int = 0) -> Path:
    """Multi30k's raw layout: <split>.en.gz / <split>.de.gz, aligned captions of a tiny language."""
    rng = random.Random(seed)
    root.mkdir(parents=True, exist_ok=True)
    for split, n in splits.items():
        pairs = []
        for _ in range(n):
            a, v, b = rng.choice(MULTI30K_NOUNS), rng.choice(MULTI30K_VERBS), rng.choice(MULTI30K_NOUNS)
            pairs.append((f"A {a[0]} {v[0]} a {b[0]} .", f"Ein {a[1]} {v[1]} ein {b[1]} ."))
        for side, lang in enumerate(("en", "de")):
            with gzip.open(root / f"{split}.{lang}.gz", "wt", encoding="utf-8") as f:
                f.write("".join(p[side] + "\n" for p in pairs))
    return root
