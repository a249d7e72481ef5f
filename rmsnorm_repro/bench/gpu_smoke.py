"""The GPU check's smoke stage (bench/gpu_check.py): under a minute on an H100, before any timing.

In order, each written to smoke-gpu-<device>.json (atomically) as soon as it is done: the versions and the
device; every Triton kernel variant the suite can launch against float64 on the device (RMSNorm and pRMSNorm
in fp32, bf16, fp16 and autocast's mixes; the GRU transition and the LSTM step: bench/gpu.py); which kernel
each recipe's RMSNorm and pRMSNorm picks, and one training step of every task on the device at scale=mini
(the paper's recipes, small models) with a finite loss. A watchdog ends the stage when it overruns (LIMIT_S), with what
was done written and the check not started; the full check starts only if every smoke check passed.
"""
from __future__ import annotations

import json
import math
import platform
import time
from pathlib import Path
from typing import Callable

import torch

from ..atomic import atomic_write_text
from ..norms.fused import triton_rmsnorm
from . import gpu
from .gpu_record import Log, Watchdog, portable, process_age_s

# of the process's age: the stage's aim is a minute on an H100, about half of it Triton building each kernel
# variant with a cold cache (never measured there yet): the watchdog leaves it room rather than lose the call
LIMIT_S = 150
SMOKE_NORMS = ("rmsnorm", "prmsnorm")


def versions(device: str) -> dict:
    said = {"python": platform.python_version(), "torch": torch.__version__,
            "triton": getattr(triton_rmsnorm.triton, "__version__", "not installed"), "device": device}
    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        said.update(gpu=props.name, capability=f"{props.major}.{props.minor}", cuda=torch.version.cuda,
                    memory_gib=round(props.total_memory / 2**30, 1))
    return {"check": "versions and device", "ok": True, "value": ", ".join(f"{k} {v}" for k, v in said.items()),
            "versions": said}


def exact(device: str) -> dict:
    rows = gpu.exactness(device)
    bad = [r for r in rows if not r["ok"]]
    return {"check": "Triton RMSNorm / pRMSNorm against float64 (fp32, bf16, fp16, autocast's mixes)", "ok": not bad,
            "value": f"{len(rows) - len(bad)} of {len(rows)} cases within tolerance", "rows": rows}


def modules(device: str) -> dict:
    rows = gpu.module_checks(device)
    bad = [r["check"] for r in rows if not r["ok"]]
    return {"check": "RMSNorm's kernel choice, Triton GRU transition and LSTM step against float64", "ok": not bad,
            "value": f"{len(rows) - len(bad)} of {len(rows)} checks passed"
                     + (f"; failed: {'; '.join(bad)}" if bad else ""),
            "rows": rows}


def task_step(task: str, device: str, batch_fraction: float) -> dict:
    """One training step of `task` at scale=mini with each of SMOKE_NORMS on the device: a finite loss, and
    the kernels its norms picked."""
    from .gpu_steps import impl_of, one_step
    from .steps import StepRun

    picked, losses = {}, {}
    for norm in SMOKE_NORMS:
        run = StepRun(task, norm, batch_fraction, device, "fp32", scale="mini")
        loss, _ = one_step(run, 0)
        losses[norm], picked[norm] = loss.item(), impl_of(run, loss)
        del run
    ok = all(math.isfinite(v) for v in losses.values())
    return {"check": f"one training step of {task} on {device} (scale=mini)", "ok": ok,
            "value": "; ".join(f"{n}: loss {losses[n]:.3g}, kernels {picked[n]}" for n in SMOKE_NORMS),
            "kernels": picked}


def checks(device: str, tasks: list[str], batch_fraction: float) -> list[tuple[str, Callable[[], dict]]]:
    return ([("versions", lambda: versions(device)), ("exactness", lambda: exact(device)),
             ("modules", lambda: modules(device))]
            + [(f"step {task}", lambda task=task: task_step(task, device, batch_fraction)) for task in tasks])


def run(device: str, tasks: list[str], path: Path, log: Log, limit_s: float = LIMIT_S,
        batch_fraction: float = 1.0) -> dict:
    """Every smoke check, `path` rewritten after each; returns {"passed", "checks", "failed"}. Past `limit_s`
    of the process's age the watchdog writes what was done (passed: false, the check it was in) and ends
    the process with exit code 3."""
    state = {"passed": None, "checks": [], "failed": [], "limit_s": limit_s, "running": None}

    def write() -> None:
        atomic_write_text(path, portable(json.dumps(state, indent=1, default=str) + "\n", path.parent))

    def overran(running: str) -> None:
        state.update(passed=False, running=running, failed=state["failed"] + [f"{running}: overran the smoke stage's "
                                                                              f"{limit_s:.0f} s"])
        write()
        log(f"smoke stage: still in {running!r} at {process_age_s():.0f} s, past its {limit_s:.0f} s: stopped; "
            f"what was done is in {path.name}")

    with Watchdog(limit_s, overran) as watchdog:
        for name, check in checks(device, tasks, batch_fraction):
            watchdog.running = state["running"] = name
            start = time.perf_counter()
            try:
                result = check()
            except Exception:  # noqa: BLE001 (named in the smoke record; the other checks still run)
                result = {"check": name, "ok": False, "value": log.exception(f"smoke check {name}")}
            result.update(name=name, seconds=round(time.perf_counter() - start, 2))
            state["checks"].append(result)
            if not result["ok"]:
                state["failed"].append(f"{result['check']}: {result['value']}")
            log(f"smoke: {result['check']}: {'ok' if result['ok'] else 'FAILED'} ({result['seconds']:.1f} s)")
            write()
        state.update(passed=not state["failed"], running=None)
        write()
    return state


def markdown(state: dict) -> list[str]:
    verdict = "passed" if state["passed"] else "FAILED: " + "; ".join(state["failed"])
    out = [f"Smoke stage {verdict}.", ""]
    out += [f"- {c['check']}: {c['value']} ({'ok' if c['ok'] else 'FAILED'}, {c.get('seconds', 0):.1f} s)"
            for c in state["checks"]]
    return out
