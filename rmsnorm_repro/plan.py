"""What a table costs before it trains: `python -m rmsnorm_repro.plan table2 --scale paper` (`make plan
TABLE=table2 SCALE=paper`) prints the preset's runs, their steps, the data they need on disk and whether
it is there, the data's first preparation, and GPU-hours per run and in all from the per-step medians the
GPU check measured (results/speed/gpu-<device>.json, `make speed-gpu`). Nothing is trained or written.

The GPU-hours count training steps only (evaluations, the final test decode and early stopping are not
in them); a (task, norm, precision) the GPU check did not time is said to be unmeasured, with how to
measure it, never estimated."""
from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig

from .paths import configs_dir
from .tasks.paper_data import AUTHORS_COPY, GENERATED, PAPER_DATA, PAPER_SCALE, SOURCES

GPU_CHECK = "results/speed"  # where `make speed-gpu` writes gpu-<device>.json


@dataclass
class Job:
    overrides: list[str]
    task: str
    norm: str
    steps: int
    precision: str
    batch: dict[str, str]  # train.batch_size or train.batch_tokens: a GPU check's time holds for its batch only


def _compose(overrides: list[str]) -> DictConfig:
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(configs_dir()), version_base="1.3"):
        return compose("train", overrides=overrides, return_hydra_config=True)


def seed_list(seeds: str) -> str:
    """--seeds as given when it is distinct whole numbers between commas; ValueError (one line) otherwise:
    "1,,2" would plan a run with an empty seed, "1,1" the same run twice."""
    values = [value.strip() for value in seeds.split(",")]
    for value in values:
        if not value:
            raise ValueError(f"--seeds {seeds}: an empty seed between commas; give distinct whole numbers, e.g. 1,2,3")
        try:
            int(value)
        except ValueError:
            raise ValueError(f"--seeds {seeds}: {value!r} is not a whole number; give distinct whole numbers, "
                             "e.g. 1,2,3") from None
    twice = next((value for i, value in enumerate(values) if int(value) in map(int, values[:i])), None)
    if twice is not None:
        raise ValueError(f"--seeds {seeds}: seed {twice} given twice; a seed is one run")
    return ",".join(values)


def sweep_jobs(preset: str, scale: str, data: str | None, seeds: str | None, extra: list[str]) -> tuple[DictConfig, list[Job]]:
    """The preset's multirun as Hydra's basic sweeper expands it (the cartesian product of
    hydra.sweeper.params, a command-line seed list replacing the preset's), each job composed."""
    base = [f"experiment={preset}", f"scale={scale}", *([f"data={data}"] if data else []), *extra]
    cfg = _compose(base)
    params = {str(k): str(v) for k, v in (cfg.hydra.sweeper.params or {}).items()}
    if seeds:
        params["seed"] = seeds
    axes = [[f"{key}={value}" for value in values.split(",")] for key, values in params.items()]
    jobs = []
    for combo in itertools.product(*axes):
        job = _compose([*base, *combo])
        batch = {f"train.{k}": str(job.train[k]) for k in ("batch_size", "batch_tokens") if k in job.train}
        jobs.append(Job(list(combo), job.task.name, job.norm.name, int(job.train.steps),
                        str(job.train.get("precision", "fp32")), batch))
    return cfg, jobs


def _timed_step(step: Any) -> tuple[tuple[str, str, str], tuple[float, dict[str, str]]] | None:
    """One entry of a GPU check's "steps": ((task, norm, precision), (median step ms, its batch)); None when
    it was not timed; ValueError saying what is odd (a NaN or negative time would plan nan or negative hours)."""
    if not isinstance(step, dict):
        raise ValueError(f"a step is {step!r}, not an object")
    key = tuple(step.get(k) for k in ("task", "norm", "precision"))
    if not all(isinstance(k, str) for k in key):
        raise ValueError("a step names no task, norm and precision")
    ms = step.get("step_ms")
    if ms is None:
        return None
    if not (isinstance(ms, (int, float)) and not isinstance(ms, bool) and math.isfinite(ms) and ms > 0):
        raise ValueError(f"{'/'.join(key)}: step_ms {ms!r} is not a time > 0")
    batch = step.get("batch", [])
    if not (isinstance(batch, list) and all(isinstance(b, str) and "=" in b for b in batch)):
        raise ValueError(f"{'/'.join(key)}: batch {batch!r} is not a list of key=value")
    return key, (float(ms), dict(b.split("=", 1) for b in batch))


def gpu_step_ms(speed_dir: Path) -> dict[str, dict[tuple[str, str, str], tuple[float, dict[str, str]]]]:
    """device -> {(task, norm, precision): (median step ms, its batch)} from every GPU check found; a device
    two checks time is shown once per file, as "device (file name)"."""
    checks: dict[str, list[tuple[Path, dict]]] = {}
    for path in sorted(speed_dir.glob("gpu-*.json")):
        try:
            check = json.loads(path.read_text(encoding="utf-8"))
            if not (isinstance(check, dict) and isinstance(check.get("device"), str)):
                raise ValueError("no device named")
            steps = check.get("steps", [])
            if not isinstance(steps, list):
                raise ValueError(f"steps is {steps!r}, not a list")
            timed = dict(entry for entry in map(_timed_step, steps) if entry is not None)
        except (OSError, ValueError) as err:
            why = f"{type(err).__name__}: {err}" if isinstance(err, (OSError, json.JSONDecodeError)) else str(err)
            print(f"plan: {path} is not a GPU check's record ({why}); skipped", file=sys.stderr)
            continue
        checks.setdefault(check["device"], []).append((path, timed))
    out = {}
    for device, found in checks.items():
        if len(found) > 1:
            print(f"plan: {' and '.join(path.name for path, _ in found)} both time {device}: each is shown",
                  file=sys.stderr)
        for path, timed in found:
            out[device if len(found) == 1 else f"{device} ({path.name})"] = timed
    return out


def data_lines(cfg: DictConfig) -> list[str]:
    name = str(cfg.data.name)
    if name == GENERATED:
        return [f"Data: data={GENERATED} (generated in memory; nothing on disk)"]
    root = Path(str(cfg.data.get("root") or Path(str(cfg.paths.data_dir)) / name))
    there = "present" if root.exists() else "MISSING"
    lines = [f"Data: data={name} in {root}: {there}"]
    source = SOURCES.get(name)
    if source:
        if not root.exists():
            lines.append(f"  get it: {source.prepare}")
        lines.append(f"  size: {source.size}")
        lines.append(f"  first preparation: {source.first_preparation}")
    copy = AUTHORS_COPY.get(str(cfg.task.name))
    if copy and copy != name:
        lines.append(f"  or the authors' preprocessed copy: --data {copy} ({SOURCES[copy].prepare})")
    return lines


def render(preset: str, scale: str, cfg: DictConfig, jobs: list[Job], gpus: dict) -> list[str]:
    precisions = sorted({job.precision for job in jobs})
    lines = [f"Plan for {preset} at scale={scale} on data={cfg.data.name} (nothing is trained):",
             f"Runs: {len(jobs)} of task={cfg.task.name}, {sum(j.steps for j in jobs):,} training steps in all "
             f"({', '.join(sorted({f'{j.steps:,}' for j in jobs}))} a run; early stopping may end a run sooner), "
             f"precision {', '.join(precisions)}",
             *data_lines(cfg)]
    if scale != PAPER_SCALE:
        return lines + [f"GPU time: the GPU check times paper-size steps only; a scale={scale} run's time is in its "
                        "summary.json (s_per_1k_steps)"]
    if not gpus:
        lines.append(f"GPU time: unmeasured: no GPU check under {GPU_CHECK}/ (run `make speed-gpu` on the GPU, "
                     "then this plan again)")
    for device, steps in gpus.items():
        lines += ["", f"GPU time on {device} (training steps only, from the GPU check's per-step medians; evaluations extra):",
                  "", "| run | steps | step ms | GPU-hours |", "|---|---:|---:|---:|"]
        total, unmeasured = 0.0, []
        for job in jobs:
            timed = steps.get((job.task, job.norm, job.precision))
            ms = timed[0] if timed and timed[1] == job.batch else None
            if ms is None:
                unmeasured.append(",".join(job.overrides) or job.norm)
                lines.append(f"| {','.join(job.overrides) or job.norm} | {job.steps:,} | unmeasured | - |")
                continue
            hours = job.steps * ms / 1000 / 3600
            total += hours
            lines.append(f"| {','.join(job.overrides) or job.norm} | {job.steps:,} | {ms:.1f} | {hours:,.1f} |")
        measured = [job for job in jobs if steps.get((job.task, job.norm, job.precision), (0, None))[1] == job.batch]
        lines.append(f"| all {len(measured)} measured runs | {sum(j.steps for j in measured):,} | | {total:,.1f} |")
        if unmeasured:
            timed = sorted({n for t, n, p in steps if t == cfg.task.name and p in precisions})
            batches = sorted({",".join(f"{k}={v}" for k, v in b.items()) for (t, _, _), (_, b) in steps.items()
                              if t == cfg.task.name})
            what = (f"task={cfg.task.name} with {', '.join(timed)} only, at {' / '.join(batches)}" if timed
                    else f"no task={cfg.task.name} step")
            lines += ["", f"Unmeasured on {device}: {len(unmeasured)} of {len(jobs)} runs (its GPU check times {what} "
                      f"at {', '.join(precisions)}): "
                      "time one of them on the GPU with a short run (train.steps=200) and read s_per_1k_steps in its "
                      "summary.json"]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rmsnorm_repro.plan", description=__doc__.split("\n\n")[0])
    parser.add_argument("table", help="an experiment preset: table2 ... table10, fig1, fig3, fig4")
    parser.add_argument("--scale", default=PAPER_SCALE)
    parser.add_argument("--data", default=None, help="default: the task's paper data at scale=paper, else generated")
    parser.add_argument("--seeds", default=None, help="e.g. 1,2,3 (default: the preset's)")
    parser.add_argument("--speed", default=GPU_CHECK, help="the folder of the GPU checks' gpu-<device>.json")
    parser.add_argument("overrides", nargs="*", help="more key=value overrides, as the training gets them")
    args = parser.parse_intermixed_args(argv)
    presets = sorted(p.stem for p in (configs_dir() / "experiment").glob("*.yaml"))
    if args.table not in presets:
        print(f"error: no experiment preset {args.table!r}; choose one of: {', '.join(presets)}", file=sys.stderr)
        return 2
    data = args.data
    if data is None:
        task = str(_compose([f"experiment={args.table}"]).task.name)
        data = PAPER_DATA.get(task, GENERATED) if args.scale == PAPER_SCALE else GENERATED
    try:
        seeds = None if args.seeds is None else seed_list(args.seeds)
        cfg, jobs = sweep_jobs(args.table, args.scale, data, seeds, args.overrides)
    except Exception as e:  # noqa: BLE001 (Hydra's composition errors: one line)
        print(f"error: {str(e).splitlines()[0]}", file=sys.stderr)
        return 2
    print("\n".join(render(args.table, args.scale, cfg, jobs, gpu_step_ms(Path(args.speed)))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
