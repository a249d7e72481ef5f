"""Kernel table: RMSNorm implementations against torch's fused LayerNorm, forward and forward+backward.

Every implementation is timed on the same tensors in one process, round-robin, each block right
after a block of torch layer_norm: ratios are medians of these adjacent pairs, so load from other
processes (this machine is shared) hits both sides of a ratio alike. Forward+backward includes allocating the output and all gradients, as in
training. Bandwidth: the bytes a fused kernel must move at least (fwd: read x, write y;
fwd+bwd: that plus read x and dy, write dx), against a same-sized tensor copy timed in the same rounds.
"""
from __future__ import annotations

import statistics
import time
from functools import lru_cache
from typing import Callable

import torch
import torch.nn.functional as F

from ..norms import functional as fn

SHAPES = ((80, 2048), (4096, 512), (8192, 1024))  # one GRU step; a Transformer batch; a large batch
EPS = 1e-8
FLOOR = "x * 2 (floor)"


def implementations(d: int) -> dict[str, Callable]:
    """name -> f(x, w, b) for a row size d. LayerNorm gets its bias, as in the models."""
    return {
        "torch layer_norm": lambda x, w, b: F.layer_norm(x, (d,), w, b, 1e-5),
        "torch rms_norm": lambda x, w, b: F.rms_norm(x, (d,), w, EPS),
        "suite reference": lambda x, w, b: fn.rms_norm(x, w, None, 1.0, EPS, impl="reference"),
        "suite fused": lambda x, w, b: fn.rms_norm(x, w, None, 1.0, EPS, impl="fused"),
        "suite fused pRMSNorm 6.25%": lambda x, w, b: fn.rms_norm(x, w, None, 0.0625, EPS, impl="fused"),
        # static shapes: the best torch.compile can do for one shape (impl=compile goes dynamic after a second)
        "torch.compile": lambda x, w, b: _compiled_reference()(x, w, None, 1.0, EPS),
        # a floor, not a norm: read x, write y; read dy, write dx, through torch's autograd, whose
        # fixed cost per call every implementation above pays as well. (Not x * g: torch computes
        # dg = (dy * x).sum(0) through a full-size temporary, slower than layer_norm at 4096x512.)
        FLOOR: lambda x, w, b: x * 2.0,
    }


@lru_cache(maxsize=None)
def _compiled_reference():
    return torch.compile(fn.rms_norm, dynamic=False)


def _statements(f: Callable, x, w, b, dy) -> dict[str, Callable[[], None]]:
    xg, wg, bg = (t.detach().clone().requires_grad_() for t in (x, w, b))

    def forward():
        with torch.no_grad():
            f(x, w, b)

    def forward_backward():
        # RMSNorm has no bias (the paper's setting): its gradient comes back None
        torch.autograd.grad(f(xg, wg, bg), (xg, wg, bg), dy, allow_unused=True)

    return {"fwd": forward, "fwd+bwd": forward_backward}


def _calibrate(stmt: Callable[[], None], seconds: float) -> int:
    """Calls per timed block so that a block takes about `seconds`."""
    number = 1
    while True:
        start = time.perf_counter()
        for _ in range(number):
            stmt()
        if time.perf_counter() - start >= seconds / 4 or number >= 1 << 20:
            return max(1, round(number * seconds / max(time.perf_counter() - start, 1e-9)))
        number *= 4


def block_ms(stmt: Callable[[], None], number: int, cpu_clock, settle: int = 3) -> tuple[float, float]:
    """(wall ms, CPU ms) per call over one block of `number` calls, after `settle` untimed calls.

    The untimed calls let the allocator settle after the previous block's different sizes: glibc
    needs a few allocations before freed blocks fit again (allocator.py), as in the repeated steps
    of training, and without them whichever implementation came after another's sizes paid faults.
    """
    for _ in range(settle):
        stmt()
    wall, cpu = time.perf_counter(), cpu_clock()
    for _ in range(number):
        stmt()
    return (time.perf_counter() - wall) * 1e3 / number, (cpu_clock() - cpu) * 1e3 / number


def run(shapes=SHAPES, names: list[str] | None = None, rounds: int = 15, min_run_time: float = 0.05,
        dtype=torch.float32) -> list[dict]:
    """One row per (shape, mode, implementation): wall and CPU medians, GB/s, ratios.

    x and dy are of `dtype`; gain and bias are float32 (for bfloat16 x: what autocast hands a norm).

    Each round times every implementation in a block right after a block of torch layer_norm
    (same mode), and the ratios are medians of these adjacent pairs: load that changes between
    rounds cancels out.
    """
    rows = []
    # CPU time of this thread: robust against other processes when torch runs on one thread.
    cpu_clock = time.thread_time if torch.get_num_threads() == 1 else time.process_time
    for n, d in shapes:
        g = torch.Generator().manual_seed(0)
        x = torch.randn(n, d, generator=g, dtype=dtype)
        w, b = 1 + 0.1 * torch.randn(d, generator=g), 0.1 * torch.randn(d, generator=g)
        dy = torch.randn(n, d, generator=g, dtype=dtype)
        impls = {k: v for k, v in implementations(d).items() if names is None or k in names or k == "torch layer_norm"}
        copy_dst = torch.empty_like(x)
        stmts = {}
        for name, f in impls.items():
            for mode, stmt in _statements(f, x, w, b, dy).items():
                stmt()  # warm up: builds, compiles, first-touch of the parameters
                stmts[(name, mode)] = stmt
        stmts[("copy", "copy")] = lambda: copy_dst.copy_(x)
        number = {key: _calibrate(stmt, min_run_time) for key, stmt in stmts.items()}
        wall, cpu = {key: [] for key in stmts}, {key: [] for key in stmts}
        ratio, ratio_cpu = {key: [] for key in stmts}, {key: [] for key in stmts}
        for _ in range(rounds):
            for key, stmt in stmts.items():
                ln_key = ("torch layer_norm", key[1] if key[1] != "copy" else "fwd")
                ln_wall, ln_cpu = block_ms(stmts[ln_key], number[ln_key], cpu_clock) if key != ln_key else (None, None)
                w_ms, c_ms = block_ms(stmt, number[key], cpu_clock)
                ln_wall, ln_cpu = ln_wall or w_ms, ln_cpu or c_ms
                wall[key].append(w_ms)
                cpu[key].append(c_ms)
                ratio[key].append(w_ms / ln_wall)
                ratio_cpu[key].append(c_ms / ln_cpu)
        med = {key: statistics.median(v) for key, v in wall.items()}
        row_bytes = n * d * x.element_size()
        copy_gbs = 2 * row_bytes / med[("copy", "copy")] / 1e6
        for (name, mode), ms in med.items():
            if name == "copy" or (names is not None and name not in names):
                continue
            moved = (2 if mode == "fwd" else 5) * row_bytes
            trms = ("torch rms_norm", mode)
            rows.append({
                "shape": f"{n}x{d}", "mode": mode, "impl": name, "ms": ms, "cpu_ms": statistics.median(cpu[(name, mode)]),
                "gb_s": moved / ms / 1e6, "pct_copy": 100 * moved / ms / 1e6 / copy_gbs, "copy_gb_s": copy_gbs,
                "vs_layer_norm": statistics.median(ratio[(name, mode)]),
                "vs_layer_norm_cpu": statistics.median(ratio_cpu[(name, mode)]),
                "vs_torch_rms_norm": ms / med[trms] if trms in med else None,
            })
    return rows


def dram_copy_gbs(mib: int = 256, repeats: int = 5) -> float:
    """Copy bandwidth (read + write) of a buffer far beyond the caches."""
    src = torch.ones(mib * 2**20 // 4)
    dst = torch.empty_like(src)
    stmt = lambda: dst.copy_(src)  # noqa: E731
    number = _calibrate(stmt, 0.2)
    ms = statistics.median(block_ms(stmt, number, time.thread_time)[0] for _ in range(repeats))
    return 2 * src.numel() * 4 / ms / 1e6


def markdown(rows: list[dict]) -> str:
    lines = ["| shape | mode | implementation | median ms | CPU ms | GB/s | % of copy | vs layer_norm | vs layer_norm (CPU) | vs torch rms_norm |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        trms = f"{r['vs_torch_rms_norm']:.2f}x" if r["vs_torch_rms_norm"] is not None else "-"
        lines.append(f"| {r['shape']} | {r['mode']} | {r['impl']} | {r['ms']:.3f} | {r['cpu_ms']:.3f} | {r['gb_s']:.1f} | "
                     f"{r['pct_copy']:.0f}% | {r['vs_layer_norm']:.2f}x | {r['vs_layer_norm_cpu']:.2f}x | {trms} |")
    return "\n".join(lines)


# The suite's speed targets (fwd+bwd, CPU fp32): RMSNorm vs torch's fused LayerNorm per shape,
# vs torch's F.rms_norm everywhere, and pRMSNorm no slower than RMSNorm.
LAYER_NORM_TARGETS = {"80x2048": 0.5, "4096x512": 0.6, "8192x1024": 0.9}
RMS_NORM_TARGET = 0.2


def verdict(ok: bool) -> str:
    return "holds" if ok else "does not hold"


def floor_clause(ratio: float, floor: float, target: float, below_why: str) -> str:
    """What the x * 2 floor says about a ratio to layer_norm: where it is, and whether the target is in reach."""
    clause = f"; the floor x * 2 is at {floor:.2f}x"
    if ratio < floor:
        return clause + f" and RMSNorm below it: {below_why}"
    return clause + (", so no norm reaches the target here" if floor > target else "")


def target_lines(rows: list[dict]) -> list[str]:
    """One line per target: the measured ratio, whether it holds, and the floor beside it."""
    fb = {(r["shape"], r["impl"]): r for r in rows if r["mode"] == "fwd+bwd"}
    lines = []
    for shape, target in LAYER_NORM_TARGETS.items():
        fused, partial, floor = (fb.get((shape, name)) for name in ("suite fused", "suite fused pRMSNorm 6.25%", FLOOR))
        if fused is None:
            continue
        ln, trms = fused["vs_layer_norm"], fused["vs_torch_rms_norm"]
        line = f"{shape}: suite RMSNorm {ln:.2f}x torch layer_norm (target <= {target}x: {verdict(ln <= target)}"
        if floor is not None:
            line += floor_clause(ln, floor["vs_layer_norm"], target, "the floor holds only within this run's noise "
                                 "(load, and which call pays page faults for fresh outputs)")
        line += f"); {trms:.2f}x torch rms_norm (target <= {RMS_NORM_TARGET}x: {verdict(trms <= RMS_NORM_TARGET)})"
        if partial:
            line += f"; pRMSNorm {partial['vs_layer_norm']:.2f}x (target <= RMSNorm's: {verdict(partial['vs_layer_norm'] <= ln)})"
        lines.append(line)
    return lines
