"""The small tier's recipe study: what each recipe's runs reached (dev and valid BLEU) against CPU time.

Each study run is an ordinary run at scale=small with overrides (the commands are in docs/small_study.md),
trained for a fixed number of steps; this script reads their records and times every recipe's training
step side by side in one process (one thread, the recipes in turn on their own batches), so that
"BLEU per CPU-minute" compares recipes on the same footing whatever ran beside each run.

    python scripts/small_study.py results/small/study --data-root <raw Multi30k folder> \\
        --out docs/small_study.md     # the table into the page, docs/small_study.png, the timings (.json)

CPU-minutes of a run = its steps x the recipe's median CPU seconds a step (thread CPU time, measured
here) + the evaluations' and the final beam decode's time (from the run's own clock, which ran beside
other jobs: an upper bound).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
from matplotlib.figure import Figure
from omegaconf import OmegaConf

from rmsnorm_repro import allocator
from rmsnorm_repro.atomic import atomic_write_text
from rmsnorm_repro.host import cpu_name
from rmsnorm_repro.report.aggregate import load_runs
from rmsnorm_repro.report.figures import NORM_COLORS, PNG_METADATA
from rmsnorm_repro.runner.checkpoint import seed_everything
from rmsnorm_repro.runner.optim import build_optimizer
from rmsnorm_repro.runner.setup import normalization, task_class
from rmsnorm_repro.runner.step import train_step

# runs that started before summaries recorded batches_per_epoch: 28,000 training pairs (1,000 held out)
BATCHES_PER_EPOCH = {"rnnsearch": 438, "transformer": 199}
BEGIN, END = "<!-- study table: scripts/small_study.py -->", "<!-- end of study table -->"
# what tells two recipes apart (the rest is the scale's)
RECIPE_KEYS = ("task.model", "train.batch_size", "train.batch_tokens", "optim.lr", "optim.schedule.name",
               "optim.schedule.warmup_steps", "data.vocab_size")
LABELS = {"optim.schedule.name": "schedule"}


def recipe(config: dict) -> str:
    cfg = OmegaConf.create(config)
    parts = []
    for key in RECIPE_KEYS:
        value = OmegaConf.select(cfg, key)
        if value is None:
            continue
        if key == "task.model":
            value = ", ".join(f"{k} {v}" for k, v in value.items() if k in ("emb", "hidden", "d_model", "ffn_dim",
                                                                              "encoder_layers", "init_std", "dropout"))
        parts.append(str(value) if key == "task.model" else f"{LABELS.get(key, key.split('.')[-1])} {value}")
    return "; ".join(parts)


def cpu_seconds_a_step(configs: dict[str, dict], data_root: str, steps: int) -> dict[str, float]:
    """Median thread-CPU seconds of one training step per recipe, the recipes in turn in this process."""
    torch.set_num_threads(1)
    allocator.apply("tuned")  # as the runs (allocator=tuned): with glibc's defaults, page faults inflate every step
    built = {}
    for name, config in configs.items():
        cfg = OmegaConf.create(config)
        cfg.data.root = data_root
        seed_everything(1)
        cls = task_class(cfg)
        task = cls(cfg, normalization(cfg, cls), torch.device("cpu"))
        model = task.build_model().train()
        params = [p for p in model.parameters() if p.requires_grad]
        built[name] = (cfg, task, model, params, build_optimizer(params, cfg.optim))
    times: dict[str, list[float]] = {name: [] for name in built}
    for step in range(steps + 1):
        for name, (cfg, task, model, params, optimizer) in built.items():
            batch = task.train_batch(step * 37)  # spread over the length buckets
            start = time.thread_time()
            train_step(task, model, optimizer, batch, params, cfg.optim.clip, cfg.optim.get("clip_mode") or "global")
            if step:  # the first: warm-up
                times[name].append(time.thread_time() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def _seconds(values: list[float]) -> str:
    """The median, or "-" where the run's clock cannot separate an evaluation from its steps' noise."""
    median = statistics.median(values) if values else -1.0
    return f"{median:.0f}" if median > 0 else "-"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", type=Path, help="the study's run folders (any depth)")
    parser.add_argument("--data-root", required=True, help="the raw Multi30k folder the runs trained on")
    parser.add_argument("--out", type=Path, default=Path("docs/small_study.md"))
    parser.add_argument("--steps", type=int, default=12, help="timed steps a recipe")
    args = parser.parse_args(argv)
    runs = [run for run in load_runs(args.runs) if run.status == "completed"]
    if not runs:
        print(f"small_study: no completed runs under {args.runs}", file=sys.stderr)
        return 1
    names = {run.path.name: run for run in runs}
    cpu = cpu_seconds_a_step({name: run.config for name, run in names.items()}, args.data_root, args.steps)

    rows, fig = [], Figure(figsize=(7, 4.5))
    ax = fig.subplots()
    for name, run in sorted(names.items()):
        points = run.points("bleu")
        own_steps = run.summary["steps"]
        # the run's evaluations and final decode, by its own clock: wall time beyond its steps' times
        step_s = (run.summary.get("step_ms_median") or 0) / 1e3
        other_min = max(0.0, run.summary["wall_s"] - own_steps * step_s) / 60
        minutes = lambda step: step * cpu[name] / 60  # noqa: E731
        total = minutes(own_steps) + other_min
        # an evaluation's cost: the clock across an evaluated line minus its steps' median time
        lines = run.points("loss", "wall_s")
        evaluated = {step for step, _, _ in points}
        eval_s = [wall - lines[i - 1][1] - (step - lines[i - 1][0]) * step_s
                  for i, (step, wall, _) in enumerate(lines) if i and step in evaluated]
        per_epoch = (run.summary.get("data_info") or {}).get("batches_per_epoch") or BATCHES_PER_EPOCH[run.task]
        beam = (run.summary.get("final") or {}).get("valid_beam_bleu")
        rows.append(f"| `{name}` | {run.task} | {run.norm} | {recipe(run.config)} | {own_steps} | "
                    f"{own_steps / per_epoch:.1f} | {cpu[name]:.2f} | {_seconds(eval_s)} | {total:.1f} | "
                    + ", ".join(f"{s:.0f}: {b:.1f}" for s, _, b in points) + f" | {beam:.2f} |")
        ax.plot([minutes(s) for s, _, _ in points], [b for _, _, b in points], marker="o",
                color=NORM_COLORS.get(run.norm), linestyle="-" if run.task == "rnnsearch" else "--", label=name)
    ax.set_xlabel("CPU-minutes of training steps (1 thread, timed side by side)")
    ax.set_ylabel("dev BLEU (greedy, 300 sentences)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    png = args.out.with_suffix(".png")
    fig.savefig(png, dpi=110, metadata=PNG_METADATA)
    table = ["| run | task | norm | recipe | steps | epochs | CPU s / step | s / evaluation | CPU-min in all | "
             "dev BLEU (greedy) at step | valid BLEU (beam 4) |", "|---|---|---|---|---:|---:|---:|---:|---:|---|---:|", *rows]
    # the table goes between the page's markers (the page's text is written by hand)
    page = args.out.read_text() if args.out.exists() else f"{BEGIN}\n{END}\n"
    if BEGIN not in page or END not in page:
        print(f"small_study: {args.out} has no {BEGIN} ... {END} markers for the table", file=sys.stderr)
        return 1
    head, rest = page.split(BEGIN, 1)
    atomic_write_text(args.out, head + BEGIN + "\n" + "\n".join(table) + "\n" + END + rest.split(END, 1)[1])
    atomic_write_text(args.out.with_suffix(".json"), json.dumps({"cpu": cpu_name(), "cpu_s_per_step": cpu}, indent=1) + "\n")
    print("\n".join(table))
    print(f"small_study: wrote the table into {args.out}, {png} ({cpu_name()})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
