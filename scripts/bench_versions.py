"""Tokens/s of the small recipes' training step: this checkout against an earlier revision, side by side.

    OMP_NUM_THREADS=1 python scripts/bench_versions.py --rev f012167 --data-root <Multi30k folder> [--rounds 15] \
        [--tasks rnnsearch,transformer] [key=value ...]

The revision is checked out into a temporary git worktree. For each small recipe (RMSNorm unless --norm),
one process per tree builds the model with that tree's code (scale=small, one thread) at this checkout's
sizes (model, dropout and batch, passed to both; key=value overrides change them for both) on the same Multi30k
batch (checked: both trees must draw the same sentences), and the two processes take training steps in
turn (each tree's runner.step.train_step: zero_grad, loss, backward, clip, optimizer), so load from other
processes hits both alike. Each step is timed as its process's thread CPU time; the table gives medians,
target tokens per CPU-second and the median of the per-round speed-ups (old ms / new ms) with its
interquartile range. Revisions from f012167 on have the StepRun this relies on.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# what sets a step's work: this checkout's values go to both trees
SIZE_KEYS = {"rnnsearch": ("task.model.emb", "task.model.hidden", "task.model.dropout", "train.batch_size"),
             "transformer": ("task.model.encoder_layers", "task.model.decoder_layers", "task.model.d_model",
                             "task.model.ffn_dim", "task.model.heads", "task.model.dropout", "train.batch_tokens")}


def child(task: str, norm: str, overrides: list[str]) -> None:
    """Runs in the tree on PYTHONPATH: build the step, print what it trains on, then one step per stdin line."""
    import torch
    from omegaconf import OmegaConf

    from rmsnorm_repro import allocator
    from rmsnorm_repro.bench import steps
    from rmsnorm_repro.runner.step import train_step

    torch.set_num_threads(1)
    allocator.apply("tuned")
    compose = steps.compose

    def small(name, overrides):  # both trees' StepRun compose scale=paper first; time scale=small
        cfg = compose(name, overrides=[o for o in overrides if not o.startswith("scale=")] + ["scale=small"])
        if cfg.data.get("dev_pairs") is not None:  # a later tree's held-out dev slice: train on what the old one did
            cfg.data.dev_pairs = None
        return cfg
    steps.compose = small
    run = steps.StepRun(task, norm, 1.0, overrides=overrides)
    batch = run.task.train_batch(0)
    clip_mode = run.cfg.optim.get("clip_mode") or "global"

    def step() -> None:
        train_step(run.task, run.model, run.optimizer, batch, run.params, run.cfg.optim.clip, clip_mode)
    step()
    step()  # warm-up: first-touch allocation, the kernel's build or load
    sizes = {key: OmegaConf.select(run.cfg, key) for key in SIZE_KEYS[task]}
    print(json.dumps({"sizes": sizes, "target_tokens": int(batch["tgt_mask"].sum()),
                      "batch": [list(batch["src"].shape), int(batch["src"].long().sum()),
                                list(batch["tgt_out"].shape), int(batch["tgt_out"].long().sum())]}), flush=True)
    for _ in sys.stdin:
        start = time.thread_time()
        step()
        print((time.thread_time() - start) * 1e3, flush=True)


def head_sizes(task: str, data: list[str]) -> list[str]:
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from rmsnorm_repro.paths import configs_dir  # importing it registers the configs' resolvers

    with initialize_config_dir(str(configs_dir()), version_base=None):
        cfg = compose("train", overrides=[f"task={task}", "scale=small", *data])
    return [f"{key}={OmegaConf.select(cfg, key)}" for key in SIZE_KEYS[task]]


def start(tree: Path, task: str, norm: str, overrides: list[str]) -> tuple[subprocess.Popen, dict]:
    env = dict(os.environ, PYTHONPATH=str(tree), OMP_NUM_THREADS="1", WANDB_MODE="disabled",
               HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1")
    proc = subprocess.Popen([sys.executable, __file__, "--child", task, "--norm", norm, *overrides], cwd=tree,
                            env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    for line in proc.stdout:  # libraries may print before the child's own line
        if line.startswith("{"):
            return proc, json.loads(line)
    raise SystemExit(f"bench_versions: the {task} step in {tree.name} exited with {proc.wait()} before it ran")


def compare(trees: dict[str, Path], task: str, norm: str, data: list[str], rounds: int) -> list[str]:
    """data: the overrides both trees get (the data and the caller's); the sizes are this checkout's."""
    overrides = [*head_sizes(task, data), *data]
    procs, info = {}, {}
    for name, tree in trees.items():
        procs[name], info[name] = start(tree, task, norm, overrides)
    old, new = info.values()
    if old != new:
        raise SystemExit(f"bench_versions: {task}: the trees do not train on the same batch at the same sizes: {info}")
    ms: dict[str, list[float]] = {name: [] for name in procs}
    for _ in range(rounds):
        for name, proc in procs.items():
            proc.stdin.write("step\n")
            proc.stdin.flush()
            ms[name].append(float(proc.stdout.readline()))
    for proc in procs.values():
        proc.stdin.close()
        proc.wait()
    old_name, new_name = procs
    speedups = [o / n for o, n in zip(ms[old_name], ms[new_name])]
    q1, _, q3 = statistics.quantiles(speedups, n=4)
    tokens = new["target_tokens"]
    rows = [f"| {task} | {name} | {statistics.median(ms[name]):.0f} | {tokens / statistics.median(ms[name]) * 1e3:.0f} | "
            + (f"{statistics.median(speedups):.3f} [{q1:.3f}-{q3:.3f}]" if name == new_name else "1") + " |"
            for name in procs]
    sizes = ", ".join(f"{key} {value}" for key, value in new["sizes"].items())
    return [f"| {task} ({sizes}; {tokens} target tokens) | | | | |", *rows]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rev", help="the earlier revision (a commit, tag or branch)")
    ap.add_argument("--data-root", help="the Multi30k folder (train.en.gz, ...)")
    ap.add_argument("--norm", default="rmsnorm")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--tasks", default=",".join(SIZE_KEYS), help="comma-separated: rnnsearch, transformer")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args, rest = ap.parse_known_args()
    if args.child:
        return child(args.child, args.norm, rest)
    tasks = args.tasks.split(",")
    if not args.rev or not args.data_root or not Path(args.data_root).is_dir() or args.rounds < 1 \
            or not set(tasks) <= set(SIZE_KEYS):
        raise SystemExit("bench_versions: give --rev REV, --data-root (an existing Multi30k folder), --rounds >= 1 "
                         f"and --tasks from {', '.join(SIZE_KEYS)}")
    from rmsnorm_repro.host import cpu_name

    data = ["data=multi30k", f"data.root={Path(args.data_root).resolve()}", *rest]
    with tempfile.TemporaryDirectory() as tmp:
        old = Path(tmp) / "old"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(old), args.rev], check=True)
        try:
            trees = {args.rev: old, "this checkout": ROOT}
            lines = [line for task in tasks
                     for line in compare(trees, task, args.norm, data, args.rounds)]
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(old)], check=True)
    print(f"{cpu_name()}, 1 thread, fp32, norm {args.norm}, {args.rounds} rounds, thread CPU time, "
          f"the trees' steps alternating\n")
    print("| recipe | tree | ms / step | target tokens / CPU-s | speed-up (old / new) [IQR] |\n|---|---|---:|---:|---:|")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
