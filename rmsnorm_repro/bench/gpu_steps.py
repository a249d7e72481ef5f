"""Part 3 of the GPU check: every task x precision x norm per training step at the paper's sizes.

A task's models are built once per norm and serve both precisions. Per precision (fp32 with TF32, train.tf32's
default; bf16 autocast) the norms take turns step by step in `steps.balanced_order` (each norm in each place
equally often over 2 x norms steps), all on the same batches: first one untimed pass over exactly the batches
then timed, so that every first use (cuBLAS heuristics, Triton's compiles for each shape the batches bring) is
paid outside the timing, then the timed pass, then one profiled step a norm for its kernels and device time.
GPU busy = that step's kernel time / the norm's median (unprofiled) step: the profiler's own start, stop and
parsing are not in it. Every step goes through runner.step.train_step (zero_grad(set_to_none) first: the
gradients are reset the same way for every row). A row's impl column names the kernels its own model ran
(norms.rmsnorm.kernels_in, and the fused recurrent cells its loss went through), not the process's.
"""
from __future__ import annotations

import statistics
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from ..norms.rmsnorm import kernels_in
from ..runner import precision as precisions
from ..runner.step import train_step
from .gpu import autograd_nodes
from .gpu_kernels import kernels
from .steps import StepRun, balanced_order, paper_ratios

STEP_NORMS = ("none", "layernorm", "rmsnorm", "prmsnorm")
STEP_PRECISIONS = ("fp32", "bf16")  # train.precision (fp32 with train.tf32); under bf16 autocast norms compute in fp32
FIRST_BATCH = 1  # batch 0: each model's first step (building its kernels), before any timing
# the suite's fused recurrent cells, by their autograd node: a row's impl column names them where its loss went through
FUSED_CELLS = {"_GRUCellFunctionBackward": "triton GRU cell", "_LSTMStepFunctionBackward": "triton LSTM step"}
# seconds before anything was measured (guesses for an H100 at the paper's sizes, on the side of caution; the
# H200's steps in results/speed/gpu-nvidia-h200.md: 40-380 ms): what a block's first estimate uses
PRIOR_BUILD_S = 8.0
PRIOR_STEP_S = {"transformer": 0.3, "rnnsearch": 0.2, "reader": 1.0, "retrieval": 0.2, "convpool": 0.15}
# the paper's headline tasks first: where time runs short, the last ones are left out
ORDER = ("rnnsearch", "transformer", "convpool", "retrieval", "reader")

def one_step(run: StepRun, batch: int) -> tuple[torch.Tensor, float]:
    """(loss, wall ms) of the runner's training step on batch `batch` (StepRun.step without dropping the loss)."""
    data = run.task.train_batch(batch)
    loss, _, ms = train_step(run.task, run.model, run.optimizer, data, run.params, run.cfg.optim.clip,
                             run.cfg.optim.get("clip_mode") or "global", precision=run.precision)
    return loss, ms


def impl_of(run: StepRun, loss: torch.Tensor) -> str:
    """The norm kernels this row's own model ran, and the fused recurrent cells its loss went through."""
    cells = {FUSED_CELLS[n.name()] for n in autograd_nodes(loss) if n.name() in FUSED_CELLS}
    return ", ".join(kernels_in(run.model) + sorted(cells)) or "-"


def tf32_on(device: str) -> bool:
    """Whether fp32 matrix products run in TF32 now (False where torch cannot say)."""
    try:
        return precisions.tf32_in_effect(torch.device(device))
    except Exception:  # noqa: BLE001 (an older or newer torch's TF32 API)
        return False


def data_of(run: StepRun) -> str:
    """The data the steps ran on: data=<name> and the vocabulary where the task has one."""
    said = f"data={run.cfg.data.name}"
    vocab = getattr(run.task, "vocab", None) or getattr(getattr(run.task, "data", None), "vocab", None)
    if vocab is not None:
        said += f", vocabulary {len(vocab)}"
    return said


def batch_shapes(batch: Any) -> list[tuple[str, tuple[int, ...]]]:
    """(name, shape) of a batch's tensors (a dict's by key; a tuple's or list's unnamed): what the steps ran on."""
    items = (batch.items() if isinstance(batch, dict)
             else [("", t) for t in batch] if isinstance(batch, (tuple, list)) else [("", batch)])
    return [(str(name), tuple(t.shape)) for name, t in items if isinstance(t, torch.Tensor)]


def shapes_range(shapes: list[list[tuple[str, tuple[int, ...]]]]) -> str:
    """'src 80x14-19, tgt 80x15-21': each tensor's dims over the batches, min-max where they vary."""
    out = []
    for per_tensor in zip(*shapes):
        dims = zip(*(shape for _, shape in per_tensor))
        out.append(f"{per_tensor[0][0]} ".lstrip() + "x".join(f"{min(d)}" if min(d) == max(d) else f"{min(d)}-{max(d)}"
                                                      for d in dims))
    return ", ".join(out)


@dataclass
class Budget:
    """The check's deadline and what blocks cost so far: a block starts only if its estimate fits."""
    deadline: Callable[[], float]  # seconds left
    build_s: dict[str, float] = field(default_factory=dict)  # task -> seconds to build one norm's model
    step_s: dict[str, float] = field(default_factory=dict)  # task -> seconds a step (the latest untimed pass)

    def block_s(self, task: str, norms: int, steps: int, built: bool) -> float:
        """Seconds for one task x precision: building its models (unless built), 2 passes and a profiled step."""
        step = self.step_s.get(task, PRIOR_STEP_S.get(task, 1.0))
        # a task not built yet: as long as the slowest built so far
        build = 0.0 if built else norms * self.build_s.get(task, max(self.build_s.values(), default=PRIOR_BUILD_S))
        return build + norms * (2 * steps + 4) * step * 1.1 + 2.0  # a profiled step and its parsing: about 3 steps

    def fits(self, seconds: float) -> bool:
        return seconds <= self.deadline()


def task_blocks(task: str, device: str, norms, precisions_: tuple[str, ...], steps: int, batch_fraction: float,
                overrides: list[str], budget: Budget, done: Callable[[str, list[dict], str | None], None],
                log=print) -> None:
    """Every precision of one task; `done(precision, rows, error)` after each (the caller writes them at once).
    A block that does not fit the deadline, or fails, is reported through `done` with its reason, and the
    next one runs."""
    runs: dict[str, StepRun] = {}
    for precision in precisions_:
        estimate = budget.block_s(task, len(norms), steps, built=bool(runs))
        if not budget.fits(estimate):
            done(precision, [], f"skipped: its estimate {estimate:.0f} s exceeds the {budget.deadline():.0f} s left")
            continue
        try:
            if not runs:
                for norm in norms:
                    start = time.perf_counter()
                    runs[norm] = StepRun(task, norm, batch_fraction, device, "fp32", overrides)
                    budget.build_s[task] = time.perf_counter() - start
            rows = precision_block(runs, precision, device, steps, budget, task)
        except Exception as e:  # noqa: BLE001 (named in the table; the next block runs)
            log(f"  gpu step table: {task} {precision} failed: {traceback.format_exc().rstrip()}")
            done(precision, [], f"{type(e).__name__}: {e}".splitlines()[0][:300])
            runs.clear()  # the next precision builds the models anew (an out-of-memory may not recur in bf16)
            if device == "cuda":
                torch.cuda.empty_cache()
            continue
        done(precision, rows, None)
        log(f"  gpu step table: {task} {precision} done")
    runs.clear()
    if device == "cuda":
        torch.cuda.empty_cache()


def precision_block(runs: dict[str, StepRun], precision: str, device: str, steps: int, budget: Budget,
                    task: str) -> list[dict]:
    """One task x precision: the untimed pass, the timed pass (both in balanced order on the same batches),
    one profiled step a norm."""
    norms = list(runs)
    for run in runs.values():  # the same models in every precision: only the autocast changes
        run.precision = precisions.build(precisions.check(precision, torch.device(device)), torch.device(device))
    batches = range(FIRST_BATCH, FIRST_BATCH + steps)
    shapes = [batch_shapes(next(iter(runs.values())).task.train_batch(b)) for b in batches]
    start = time.perf_counter()
    for i, b in enumerate(batches):  # untimed: every first use and compile happens here
        for norm in balanced_order(norms, i):
            one_step(runs[norm], b)
    budget.step_s[task] = (time.perf_counter() - start) / (steps * len(norms))
    times: dict[str, list[float]] = {norm: [] for norm in norms}
    losses: dict[str, torch.Tensor] = {}
    for i, b in enumerate(batches):
        for norm in balanced_order(norms, i):
            losses[norm], ms = one_step(runs[norm], b)
            times[norm].append(ms)
    med = {norm: statistics.median(v) for norm, v in times.items()}
    paper = paper_ratios(task)
    rows = []
    for norm in norms:
        run = runs[norm]
        count, device_us = kernels(lambda: one_step(run, FIRST_BATCH), device)
        ln = med.get("layernorm")
        rows.append({"precision": f"{precision} (TF32)" if precision == "fp32" and tf32_on(device) else precision,
                     "task": task, "norm": norm, "step_ms": med[norm], "steps": len(times[norm]),
                     "times_ms": times[norm],
                     "vs_layernorm": med[norm] / ln if ln else None,
                     "paper_vs_layernorm": {label: ratios.get(norm) for label, ratios in paper.items()},
                     "kernels": count, "busy": None if device_us is None else device_us / (med[norm] * 1e3),
                     "loss_finite": bool(torch.isfinite(losses[norm]).item()), "batch": run.batch,
                     "data": data_of(run), "batch_shapes": shapes_range(shapes), "impl": impl_of(run, losses[norm])})
    return rows


def verdicts(step_rows: list[dict]) -> list[str]:
    """Per precision and task: RMSNorm's (and pRMSNorm's) step against LayerNorm's, beside the paper's."""
    lines = []
    for r in step_rows:
        if r["norm"] not in ("rmsnorm", "prmsnorm") or r["vs_layernorm"] is None:
            continue
        paper = [v for v in r["paper_vs_layernorm"].values() if v is not None]
        ours = r["vs_layernorm"]
        said = "; ".join(f"{v:.2f} ({k})" for k, v in r["paper_vs_layernorm"].items() if v is not None) \
            or "no time in the paper"
        holds = "faster than LayerNorm, as in the paper" if ours < 1 else "NOT faster than LayerNorm"
        if paper and min(paper) >= 1:
            holds = ("the paper found no speed-up here either" if ours >= 1
                     else "faster than LayerNorm (the paper was not)")
        target = "target <= 0.90: " + ("holds" if ours <= 0.90 else "does not hold") if r["norm"] == "rmsnorm" else ""
        lines.append(f"- {r['task']} {r['precision']}: {r['norm']} / layernorm {ours:.2f} (paper: {said}): {holds}"
                     + (f"; {target}" if target else ""))
    return lines


def markdown(step_rows: list[dict], errors: dict[str, str]) -> list[str]:
    """The section's lines: the table (a failed or skipped block named in it), the data, the verdicts."""
    out = ["| precision | task | norm | step ms (median) | vs LayerNorm | paper vs LayerNorm | kernels a step "
           "| GPU busy | loss finite | batch | impl |", "|---|---|---|---:|---:|---|---:|---:|---|---|---|"]
    for r in step_rows:
        paper = "; ".join(f"{v:.2f} ({k})" for k, v in r["paper_vs_layernorm"].items() if v is not None) or "-"
        ratio = "-" if r["vs_layernorm"] is None else f"{r['vs_layernorm']:.2f}"
        busy = "-" if r["busy"] is None else f"{r['busy']:.0%}"
        out.append(f"| {r['precision']} | {r['task']} | {r['norm']} | {r['step_ms']:.1f} | {ratio} | {paper} | "
                   f"{r['kernels']:.0f} | {busy} | {'yes' if r['loss_finite'] else 'NO'} | "
                   f"{', '.join(r['batch']) or '-'} | {r['impl']} |")
    out += [f"| {block.split()[1]} | {block.split()[0]} | - | {why} | | | | | | | |" for block, why in errors.items()]
    data = {}
    for r in step_rows:
        data.setdefault(r["task"], f"{r['data']}; batches' tensors {r['batch_shapes']}")
    if data:
        out += ["", "Data the steps ran on (paper model sizes and batches; generated data unless named otherwise):", ""]
        out += [f"- {task}: {said}" for task, said in data.items()]
    if step_rows:
        out += ["", "Verdicts (the paper's ratios: its own GPUs, fp32 without TF32; ours on the data above):", ""]
        out += verdicts(step_rows)
    return out
