"""Step table: per-step training time of every task x norm at the paper's model sizes.

Each (task, norm) is built from the real config (configs/train.yaml, scale=paper) through the Task
interface and timed on the runner's step (zero_grad, loss, backward, clip, Adam). The norms of a
task take turns: `rounds` rounds, each building every norm's model afresh and timing `steps`
steps after one warm-up step, in an order balanced over rounds (`balanced_order`: each norm in each
place equally often, each pair in both orders), so machine load and drift spread over all of them;
medians over all timed steps. Step s of round r trains every norm on the same batch, so a comparison
is paired: `paired_speedup` judges it from per-round mean log ratios, rounds as blocks. The batch is the paper's times `batch_fraction` (CPU time), which keeps the ratio of norm
work to matrix work per row, so ratios stay comparable to the paper's.
"""
from __future__ import annotations

import csv
import gc
import statistics
import time

from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from ..paths import configs_dir, paper_dir
from ..runner import precision as precisions
from ..runner.checkpoint import seed_everything
from ..runner.optim import build_optimizer
from ..runner.setup import normalization, resolve_device, task_class
from ..runner.step import train_step
from ..tasks import TASKS
from .kernels import verdict

CONFIG_DIR = configs_dir()
PAPER_DIR = paper_dir()
# task -> (paper table file, time column, label) with the paper's per-step times
PAPER_TIMES = {
    "rnnsearch": [("table2.csv", "time_mean", "Table 2 (Theano)"), ("table3.csv", "py_time_mean", "Table 3 (PyTorch)")],
    "transformer": [("table4.csv", "time_mean", "Table 4")],
    "reader": [("table6.csv", "time_mean", "Table 6")],
    "retrieval": [("table8.csv", "time_mean", "Table 8")],
    "convpool": [("table10.csv", "time_mean", "Table 10")],
}
BATCH_KEYS = ("batch_size", "batch_tokens")


def available_tasks() -> list[str]:
    """Registered tasks whose code and paper-scale config exist in this checkout."""
    found = []
    for name in TASKS:
        if not (CONFIG_DIR / "task_scale" / name / "paper.yaml").exists():
            continue
        try:
            task_class(OmegaConf.create({"task": {"name": name}}))
        except Exception:  # not written yet (ImportError) or broken: leave it out, say so in the caller
            continue
        found.append(name)
    return found


def compose_config(task: str, norm: str, batch_fraction: float, extra: list[str] = (), scale: str = "paper"):
    with initialize_config_dir(str(CONFIG_DIR), version_base=None):
        cfg = compose("train", overrides=[f"task={task}", f"norm={norm}", f"scale={scale}", *extra])
    shrunk = []
    for key in BATCH_KEYS:
        if cfg.train.get(key) is not None and batch_fraction != 1.0:
            cfg.train[key] = max(1, round(cfg.train[key] * batch_fraction))
            shrunk.append(f"train.{key}={cfg.train[key]}")
    return cfg, shrunk


def paper_ratios(task: str) -> dict[str, dict[str, float]]:
    """label -> {norm: paper time / paper LayerNorm time}."""
    out = {}
    for file, column, label in PAPER_TIMES.get(task, []):
        path = PAPER_DIR / file
        if not path.exists():
            continue
        times = {}
        with open(path) as f:
            for row in csv.DictReader(f):
                if row.get("norm") and row.get(column):
                    times[row["norm"]] = float(row[column])
        if "layernorm" in times:
            out[label] = {k: v / times["layernorm"] for k, v in times.items()}
    return out


class StepRun:
    """One task x norm: model, optimizer and the runner's timed step (runner.step.train_step), at a
    precision (train.precision's names: fp32, bf16, fp16) on a device."""

    def __init__(self, task: str, norm: str, batch_fraction: float, device: str = "cpu", precision: str = "fp32",
                 overrides: list[str] = (), scale: str = "paper"):
        self.cfg, self.batch = compose_config(task, norm, batch_fraction, [f"device={device}", *overrides], scale)
        seed_everything(int(self.cfg.seed))
        cls = task_class(self.cfg)
        self.norms = normalization(self.cfg, cls)
        device_ = resolve_device(device)
        self.precision = precisions.build(precisions.check(precision, device_), device_)
        self.task = cls(self.cfg, self.norms, device_)
        self.model = self.task.build_model().to(device_)
        self.model.train()
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = build_optimizer(self.params, self.cfg.optim)

    def step(self, step: int) -> tuple[float, float]:
        """(wall ms, CPU ms of this thread) of one training step."""
        batch = self.task.train_batch(step)
        cpu = time.thread_time()
        _, _, wall_ms = train_step(self.task, self.model, self.optimizer, batch, self.params, self.cfg.optim.clip,
                                   self.cfg.optim.get("clip_mode") or "global", precision=self.precision)
        return wall_ms, (time.thread_time() - cpu) * 1e3


def balanced_order(norms: list[str], round_: int) -> list[str]:
    """The norms' order in round `round_`: rotated by round_ // 2, reversed in odd rounds. Over 2k rounds
    (k norms) each norm takes each place equally often and each pair runs in both orders (ABBA for two,
    all six orders for three), so a drift or a first-in-round cost falls on no norm more than another."""
    shift = (round_ // 2) % len(norms)
    order = norms[shift:] + norms[:shift]
    return order[::-1] if round_ % 2 else order


def run(tasks: list[str], norms: list[str] | None = None, rounds: int = 2, steps: int = 3,
        batch_fraction: float = 0.1, precision: str = "fp32", log=print, scale: str = "paper",
        overrides: list[str] = (), max_rounds: int | None = None, interleave: bool = False) -> list[dict]:
    """Per task, the norms timed `rounds` rounds x `steps` steps in balanced order; with max_rounds, more
    rounds (two at a time, keeping the order balanced) until every comparison with LayerNorm resolves a
    DECIDE speed-up (`decides`) or max_rounds is reached. With interleave, a round builds every norm's
    model at once and they take turns step by step (ABBA), so paired steps run moments apart: the
    machine's load, which drifts over seconds, falls on both (each step then starts with another model's
    data in the caches, as every norm's does)."""
    from ..report.paired import decides  # scipy: the GPU check (StepRun only) counts on the image and its wheels alone

    rows = []
    for task in tasks:
        supported = list(task_class(OmegaConf.create({"task": {"name": task}})).supported_norms)
        chosen = [n for n in supported if norms is None or n in norms]
        wall: dict[str, list[float]] = {n: [] for n in chosen}
        cpu: dict[str, list[float]] = {n: [] for n in chosen}
        info: dict[str, dict] = {}

        def build(norm: str) -> StepRun:
            run_ = StepRun(task, norm, batch_fraction, precision=precision, overrides=overrides, scale=scale)
            run_.step(0)  # warm-up: first-touch allocation, kernel build or load
            info[norm] = {"batch": run_.batch, "impl": run_.norms.describe().get("impl_used")}
            return run_

        def timed(norm: str, run_: StepRun, step: int) -> None:
            w, c = run_.step(step)  # the same batch for every norm of the round
            wall[norm].append(w)
            cpu[norm].append(c)

        r = 0
        while r < rounds or (max_rounds is not None and r < max_rounds and (r % 2 or not decides(wall, steps))):
            order = balanced_order(chosen, r)
            if interleave:
                built = {norm: build(norm) for norm in order}
                for s in range(1, steps + 1):
                    for norm in order if s % 2 else order[::-1]:
                        timed(norm, built[norm], s + r * steps)
                del built
            else:
                for norm in order:
                    run_ = build(norm)
                    for s in range(1, steps + 1):
                        timed(norm, run_, s + r * steps)
                    del run_
                    gc.collect()
            gc.collect()
            r += 1
            log(f"  {task}: round {r}/{rounds if max_rounds is None else f'{rounds}-{max_rounds}'} done")
        med = {n: statistics.median(v) for n, v in wall.items() if v}
        med_cpu = {n: statistics.median(v) for n, v in cpu.items() if v}
        paper = paper_ratios(task)
        ln, none = med.get("layernorm"), med.get("none")
        floor = none / ln if ln and none else None  # the ratio a norm costing nothing would reach
        for norm in chosen:
            ratio = med[norm] / ln if ln else None
            # only where LayerNorm's own overhead stands out of the noise (2% of the no-norm step)
            overhead = (med[norm] - none) / (ln - none) if ln and none and ln - none > 0.02 * none else None
            rows.append({
                "task": task, "norm": norm, "step_ms": med[norm], "cpu_ms": med_cpu[norm], "steps": len(wall[norm]),
                "times_ms": wall[norm], "steps_per_round": steps,
                "vs_layernorm": ratio, "floor_vs_layernorm": floor,
                "vs_layernorm_cpu": med_cpu[norm] / med_cpu["layernorm"] if "layernorm" in med_cpu else None,
                "overhead_vs_layernorm_overhead": overhead,
                "paper_vs_layernorm": {label: r.get(norm) for label, r in paper.items()}, "precision": precision,
                **info[norm],
            })
    return rows


def side_by_side(tasks: list[str], norms: list[str], scale: str, overrides: list[str] = (), rounds: int = 6,
                 steps: int = 8, max_rounds: int = 24, how: str = "", log=print) -> dict[str, "Measured"]:
    """{task: {norm: step times in ms}} at a tier's own sizes and batches (scale=mini or small, with the
    runs' data overrides), norms taking turns in balanced order in this process on the same batches, at
    least `rounds` rounds and more (up to max_rounds) until a 5% speed-up is decidable: what the reports'
    speed claims are judged on (report/claims.speed_claims), rather than runs timed apart."""
    rows = run(tasks, norms, rounds, steps, 1.0, log=log, scale=scale, overrides=list(overrides), max_rounds=max_rounds,
               interleave=True)
    from ..report.paired import Measured

    out: dict[str, Measured] = {}
    for task in dict.fromkeys(row["task"] for row in rows):
        mine = [row for row in rows if row["task"] == task]
        got = len(mine[0]["times_ms"]) // steps
        out[task] = Measured({row["norm"]: row["times_ms"] for row in mine}, steps,
                             f" (one process, {how}, scale={scale} sizes and batches, the norms taking turns step by step "
                             f"in balanced order on the same batches, {got} rounds x {steps} steps each)")
    return out


def markdown(rows: list[dict]) -> str:
    lines = ["| task | norm | step ms (median) | CPU ms | vs LayerNorm | vs LayerNorm (CPU) | floor (none / LN) | overhead / LN's | paper vs LayerNorm | batch | impl |",
             "|---|---|---:|---:|---:|---:|---:|---:|---|---|---|"]
    for r in rows:
        f = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
        paper = "; ".join(f"{v:.2f} ({k})" for k, v in r["paper_vs_layernorm"].items() if v is not None) or "-"
        lines.append(f"| {r['task']} | {r['norm']} | {r['step_ms']:.1f} | {r['cpu_ms']:.1f} | {f(r['vs_layernorm'])} | "
                     f"{f(r['vs_layernorm_cpu'])} | {f(r['floor_vs_layernorm'])} | {f(r['overhead_vs_layernorm_overhead'])} | {paper} | "
                     f"{', '.join(r['batch'])} | {r['impl'] or '-'} |")
    return "\n".join(lines)


def target_lines(rows: list[dict]) -> list[str]:
    """Per task: RMSNorm / LayerNorm <= 0.90, and RMSNorm's overhead over no norm <= half of LayerNorm's."""
    lines = []
    for r in rows:
        if r["norm"] != "rmsnorm" or r["vs_layernorm"] is None:
            continue
        line = f"{r['task']}: RMSNorm / LayerNorm {r['vs_layernorm']:.2f} (target <= 0.90: {verdict(r['vs_layernorm'] <= 0.90)}"
        if r["floor_vs_layernorm"] is not None and r["floor_vs_layernorm"] > 0.90:
            line += f"; out of reach here: no norm at all gives {r['floor_vs_layernorm']:.2f}"
        overhead = r["overhead_vs_layernorm_overhead"]
        if overhead is None:
            line += "); overhead / LayerNorm's not measurable (LayerNorm's own overhead within 2% noise)"
        else:
            line += f"); overhead / LayerNorm's {overhead:.2f} (target <= 0.5: {verdict(overhead <= 0.5)}"
            line += ", but below 0: faster than no norm, i.e. noise)" if overhead < 0 else ")"
        lines.append(line)
    return lines
