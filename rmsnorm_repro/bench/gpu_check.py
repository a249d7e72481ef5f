"""The one-shot GPU check (`make gpu-check`, `python -m rmsnorm_repro.bench --gpu`): one call on a lent GPU,
at most 7 minutes on one H100 (DEADLINE_S, counted from the process's start).

1. The smoke stage (bench/gpu_smoke.py, under a minute): versions, every Triton kernel variant against
   float64 (bench/gpu.py), each recipe's kernel choice, one training step of every task on the device. The
   rest starts only if it passed.
2. The kernel table per call (bench/gpu_kernels.py), one block a shape x dtype.
3. The per-step table (bench/gpu_steps.py), one block a task x precision.

Nothing done is lost: gpu-<device>.md and .json are rewritten atomically after the smoke stage and after
every block, a failed block is named in its table and the next one runs, and gpu-<device>.log beside them
has every line and traceback. A block starts only if its estimate fits the time left; a watchdog ends the
process GRACE_S past the deadline with everything done written. Exit code: 0 when everything ran and
passed; 1 when a check or block failed (the last lines say which); 2 on bad input; 3 when a watchdog
stopped it. `--tiny` runs the whole path at tiny sizes, on CPU where there is no GPU (the Triton kernels
interpreted: TRITON_INTERPRET=1): the tests run it.
"""
from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path

import torch

from ..atomic import atomic_write_text
from ..norms.fused import triton_rmsnorm
from . import gpu, gpu_kernels, gpu_smoke, gpu_steps
from .gpu_record import Log, Watchdog, portable, process_age_s

DEADLINE_S = 420  # of the process's age: no block starts that would end later
GRACE_S = 45  # past the deadline the watchdog writes what is done and ends the process
KERNEL_BLOCK_S = 12.0  # a kernel-table block's estimate before one was measured (an H100: 5-8 s)
STEPS_RESERVED_S = 200  # the kernel table leaves the per-step table (the paper's headline) at least this
STEPS = 8  # timed steps a norm per task x precision: one balanced cycle of 4 norms (steps.balanced_order)
TINY_KERNELS = dict(shapes=((8, 64),), dtypes=(torch.float32, torch.bfloat16), rounds=1, block_s=0.001)
TINY_STEPS = dict(steps=2, batch_fraction=0.05, overrides=["scale=mini"])
# --tiny on CPU: the Triton kernels interpreted take minutes (the GRU and LSTM checks about one on 2 cores)
TINY_DEADLINE_S, TINY_SMOKE_LIMIT_S = 900, 400
PAPER_KERNELS = dict(shapes=gpu_kernels.SHAPES, dtypes=gpu_kernels.DTYPES, rounds=7, block_s=0.02)
PAPER_STEPS = dict(steps=STEPS, batch_fraction=1.0, overrides=[])


def device_label(device: str) -> str:
    if device == "cuda":
        return torch.cuda.get_device_name(0)
    from ..host import cpu_name

    return f"{cpu_name()} (Triton interpreted)" if triton_rmsnorm._interpreting() else cpu_name()


class Record:
    """Everything the check has done so far, rewritten atomically as .md and .json after each part."""

    def __init__(self, out: Path, device: str, tiny: bool, command: str):
        self.label = device_label(device)
        slug = "".join(c if c.isalnum() else "-" for c in self.label.lower()).strip("-")[:40]
        self.md, self.device, self.tiny, self.command = out / f"gpu-{slug}.md", device, tiny, command
        self.smoke_path, self.log_path = out / f"smoke-gpu-{slug}.json", out / f"gpu-{slug}.log"
        self.smoke: dict = {"passed": None, "checks": [], "failed": []}
        self.kernels: list[dict] = []
        self.steps: list[dict] = []
        self.errors: dict[str, dict[str, str]] = {"kernels": {}, "steps": {}, "check": {}}  # part -> block -> why
        self.state = "running"
        self._lock = threading.Lock()

    def part1(self) -> tuple[list[dict], list[dict]]:
        """The smoke stage's exactness rows and module checks: part 1 of the report."""
        by_name = {c.get("name"): c.get("rows", []) for c in self.smoke["checks"]}
        return by_name.get("exactness", []), by_name.get("modules", [])

    def failures(self) -> list[str]:
        return (self.smoke["failed"] + [f"{part} {block}: {why}" for part, blocks in self.errors.items()
                                        for block, why in blocks.items() if not why.startswith("skipped")])

    def save(self) -> None:
        with self._lock:
            exact, checks = self.part1()
            data = {"device": self.label, "tiny": self.tiny, "state": self.state, "seconds": round(process_age_s(), 1),
                    "smoke": {k: v for k, v in self.smoke.items() if k != "checks"}, "exact": exact, "checks": checks,
                    "kernels": self.kernels, "steps": self.steps, "errors": self.errors}
            out = self.md.parent
            text = json.dumps(data, indent=1, default=str) + "\n"
            atomic_write_text(self.md.with_suffix(".json"), portable(text, out))
            atomic_write_text(self.md, portable(self.markdown(exact, checks), out))

    def markdown(self, exact: list[dict], checks: list[dict]) -> str:
        exact_ok = bool(exact) and all(r["ok"] for r in exact + checks)
        header = [f"# GPU check: {self.label}", "",
                  f"`{self.command}`: torch {torch.__version__}, triton "
                  f"{getattr(triton_rmsnorm.triton, '__version__', 'not installed')}, "
                  f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {process_age_s():.0f} s; {self.state}.", "",
                  "- per call: wall clock with the device synchronized around blocks of calls; each block right after "
                  "a block of torch layer_norm (ratios: medians of those pairs); fwd+bwd: y.backward(dy), fresh "
                  "outputs, every gradient (the modules' parameters' too) cleared after each call",
                  "- torch layer_norm has weight and bias; the RMSNorms have a gain only; eps 1e-6 (the suite's "
                  "modules: 1e-8)",
                  "- host us: the calling thread's CPU time per call; device us and kernels: the profiler's CUDA "
                  "kernels per call (on CPU: aten ops, no device time)",
                  f"- per step: the paper's model sizes and batches on the data named under the table (generated data: "
                  f"not the paper's corpora or vocabularies); each task's models built once per norm and kept for "
                  f"both precisions; the norms take turns step by step in balanced order on the same batches, an "
                  f"untimed pass over those batches first; fp32 with TF32 (train.tf32=true; the paper's fp32 had "
                  f"none); GPU busy: the kernel time of one profiled step / the median unprofiled step",
                  f"- exactness: {'every case passed' if exact_ok else 'SOME CASES FAILED (see 1.)'}",
                  f"- log of this call: {self.log_path.name}"]
        if self.tiny:
            header.append("- --tiny: tiny shapes, mini models, two timed steps: a test of the check itself, whose "
                          "times and verdicts say nothing about speed")
        body = ["", "## 0. Smoke stage", ""] + gpu_smoke.markdown(self.smoke)
        body += ["", "## 1. Exactness on the device (against float64)", ""] + gpu.markdown(exact, checks)
        body += ["", "## 2. Kernel table", ""] + gpu_kernels.markdown(self.kernels, self.errors["kernels"])
        body += ["", "## 3. Per training step", ""] + gpu_steps.markdown(self.steps, self.errors["steps"])
        failed = self.failures()
        if failed:
            body += ["", "## What failed", ""] + [f"- {f}" for f in failed]
        return "\n".join(header + body) + "\n"


def full_check(record: Record, log: Log, device: str, tasks: list[str], norms: list[str], kernel_kwargs: dict,
               step_kwargs: dict, deadline_s: float) -> None:
    """Parts 2 and 3, block by block, each written at once; a block starts only if its estimate fits (a kernel
    block: in the time left less STEPS_RESERVED_S)."""
    def left() -> float:
        return deadline_s - process_age_s()

    kernel_s = KERNEL_BLOCK_S
    for dtype in kernel_kwargs["dtypes"]:
        for n, d in kernel_kwargs["shapes"]:
            block = f"{str(dtype).replace('torch.', '')} {n}x{d}"
            if kernel_s > left() - STEPS_RESERVED_S:
                record.errors["kernels"][block] = (f"skipped: its estimate {kernel_s:.0f} s exceeds the "
                                                   f"{left() - STEPS_RESERVED_S:.0f} s left before the step table's")
                record.save()
                continue
            log(f"kernel table: {block} ...")
            start = time.perf_counter()
            try:
                record.kernels += gpu_kernels.kernel_block(device, n, d, dtype, kernel_kwargs["rounds"],
                                                           kernel_kwargs["block_s"])
            except Exception:  # noqa: BLE001 (named in the table; the next block runs)
                record.errors["kernels"][block] = log.exception(f"kernel table {block}")
            kernel_s = max(kernel_s if record.errors["kernels"].get(block) else 0, time.perf_counter() - start)
            record.save()
    from ..runner import precision as precisions

    try:  # torch 2.11 on the lent machine, 2.14 here: the TF32 API moved between them
        precisions.apply_tf32(True, torch.device(device))
    except Exception:  # noqa: BLE001 (fp32 then runs as torch's default; the rows say whether TF32 was on)
        record.errors["check"]["TF32"] = log.exception("train.tf32")
    budget = gpu_steps.Budget(left)
    for task in tasks:
        def done(precision: str, rows: list[dict], error: str | None, task=task) -> None:
            record.steps += rows
            if error:
                record.errors["steps"][f"{task} {precision}"] = error
            record.save()

        gpu_steps.task_blocks(task, device, norms, gpu_steps.STEP_PRECISIONS, step_kwargs["steps"],
                              step_kwargs["batch_fraction"], step_kwargs["overrides"], budget, done, log)


def run_all(device: str, out: Path, tiny: bool, tasks: list[str], norms: list[str], command: str,
            deadline_s: float = DEADLINE_S, smoke_limit_s: float = gpu_smoke.LIMIT_S) -> int:
    """The smoke stage, then (if it passed) the full check; returns the exit code."""
    record = Record(out, device, tiny, command)
    log = Log(record.log_path)
    log(f"gpu check on {record.label}: {record.md.name}, deadline {deadline_s:.0f} s from the process's start")
    record.save()
    record.smoke = gpu_smoke.run(device, tasks, record.smoke_path, log, smoke_limit_s,
                                 TINY_STEPS["batch_fraction"] if tiny else 1.0)
    if not record.smoke["passed"]:
        record.state = "the smoke stage failed: the full check did not run"
        record.save()
        log(f"{record.state}; failed: " + "; ".join(record.smoke["failed"]))
        return 1

    def overran(running: str) -> None:
        record.state = f"stopped by the watchdog {GRACE_S} s past the {deadline_s:.0f} s deadline"
        record.save()
        log(f"{record.state}; what was done is in {record.md.name}")

    with Watchdog(deadline_s + GRACE_S, overran):
        try:
            full_check(record, log, device, tasks, norms, TINY_KERNELS if tiny else PAPER_KERNELS,
                       TINY_STEPS if tiny else PAPER_STEPS, deadline_s)
        except Exception:  # noqa: BLE001 (outside any block: named in the report, what was done kept)
            record.errors["check"]["outside any block"] = log.exception("gpu check")
    failed = record.failures()
    skipped = [f"{part} {block}" for part, blocks in record.errors.items() for block, why in blocks.items()
               if why.startswith("skipped")]
    record.state = ("finished" + (f"; {len(failed)} failed" if failed else "")
                    + (f"; skipped for time: {', '.join(skipped)}" if skipped else ""))
    record.save()
    log(f"wrote {record.md.name} and .json ({record.state})")
    for line in failed:
        log(f"FAILED: {line}")
    log.close()
    return 1 if failed else 0


def main(out: str = "results/speed", tiny: bool = False, tasks: list[str] | None = None,
         norms: list[str] | None = None, command: str = "python -m rmsnorm_repro.bench --gpu") -> int:
    """The check on this machine's GPU; `tiny`: every part at tiny sizes, on CPU where there is no GPU."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu" and not tiny:
        print("python -m rmsnorm_repro.bench --gpu: no CUDA device here (this check is for a GPU machine; "
              "--tiny runs it at tiny sizes on CPU)", file=sys.stderr)
        return 2
    if not triton_rmsnorm.available():
        print("python -m rmsnorm_repro.bench --gpu: Triton is not installed (pip install triton)"
              + ("; on CPU --tiny needs TRITON_INTERPRET=1" if device == "cpu" else ""), file=sys.stderr)
        return 2
    from .steps import available_tasks

    present = available_tasks()
    missing = [t for t in tasks or [] if t not in present]
    if missing:
        print(f"python -m rmsnorm_repro.bench --gpu: tasks not available in this checkout: {', '.join(missing)}",
              file=sys.stderr)
        return 2
    chosen = [n for n in gpu_steps.STEP_NORMS if not norms or n in norms]
    chosen_tasks = tasks or sorted(present, key=lambda t: gpu_steps.ORDER.index(t) if t in gpu_steps.ORDER else 99)
    if tiny:
        return run_all(device, Path(out), tiny, chosen_tasks, chosen, command, TINY_DEADLINE_S, TINY_SMOKE_LIMIT_S)
    return run_all(device, Path(out), tiny, chosen_tasks, chosen, command)
