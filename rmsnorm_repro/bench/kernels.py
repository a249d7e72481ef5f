"""Kernel table: RMSNorm implementations against torch's fused LayerNorm, forward and forward+backward.

Every implementation is timed on the same tensors in one process, round-robin (one block of each
in turn, `rounds` times), so load from other processes hits all of them alike; the table gives the
median over rounds. Forward+backward includes allocating the output and all gradients, as in
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
from torch.utils import benchmark

from ..norms import functional as fn

SHAPES = ((80, 2048), (4096, 512), (8192, 1024))  # one GRU step; a Transformer batch; a large batch
EPS = 1e-8


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


def _median_ms(stmt: Callable[[], None], min_run_time: float, clock) -> float:
    timer = benchmark.Timer("stmt()", globals={"stmt": stmt}, timer=clock)
    return timer.blocked_autorange(min_run_time=min_run_time).median * 1e3


def run(shapes=SHAPES, names: list[str] | None = None, rounds: int = 5, min_run_time: float = 0.2,
        dtype=torch.float32) -> list[dict]:
    """One row per (shape, mode, implementation): wall and CPU medians, GB/s, ratios."""
    rows = []
    # CPU time of this thread: robust against other processes when torch runs on one thread.
    cpu_clock = time.thread_time if torch.get_num_threads() == 1 else time.process_time
    for n, d in shapes:
        g = torch.Generator().manual_seed(0)
        x = torch.randn(n, d, generator=g, dtype=dtype)
        w, b = 1 + 0.1 * torch.randn(d, generator=g, dtype=dtype), 0.1 * torch.randn(d, generator=g, dtype=dtype)
        dy = torch.randn(n, d, generator=g, dtype=dtype)
        impls = {k: v for k, v in implementations(d).items() if names is None or k in names}
        copy_dst = torch.empty_like(x)
        stmts = {("copy", "copy"): lambda: copy_dst.copy_(x)}
        for name, f in impls.items():
            for mode, stmt in _statements(f, x, w, b, dy).items():
                stmt()  # warm up: builds, compiles, first-touch of the parameters
                stmts[(name, mode)] = stmt
        wall = {key: [] for key in stmts}
        cpu = {key: [] for key in stmts}
        for _ in range(rounds):
            for key, stmt in stmts.items():
                wall[key].append(_median_ms(stmt, min_run_time, time.perf_counter))
                cpu[key].append(_median_ms(stmt, min_run_time / 2, cpu_clock))
        med = {key: statistics.median(v) for key, v in wall.items()}
        med_cpu = {key: statistics.median(v) for key, v in cpu.items()}
        row_bytes = n * d * x.element_size()
        copy_gbs = 2 * row_bytes / med[("copy", "copy")] / 1e6
        for (name, mode), ms in med.items():
            if name == "copy":
                continue
            moved = (2 if mode == "fwd" else 5) * row_bytes
            ln, trms = med[("torch layer_norm", mode)], med.get(("torch rms_norm", mode))
            ln_cpu = med_cpu[("torch layer_norm", mode)]
            rows.append({
                "shape": f"{n}x{d}", "mode": mode, "impl": name, "ms": ms, "cpu_ms": med_cpu[(name, mode)],
                "gb_s": moved / ms / 1e6, "pct_copy": 100 * moved / ms / 1e6 / copy_gbs, "copy_gb_s": copy_gbs,
                "vs_layer_norm": ms / ln, "vs_layer_norm_cpu": med_cpu[(name, mode)] / ln_cpu,
                "vs_torch_rms_norm": ms / trms if trms else None,
            })
    return rows


def dram_copy_gbs(mib: int = 256, repeats: int = 5) -> float:
    """Copy bandwidth (read + write) of a buffer far beyond the caches."""
    src = torch.ones(mib * 2**20 // 4)
    dst = torch.empty_like(src)
    ms = statistics.median(_median_ms(lambda: dst.copy_(src), 0.2, time.perf_counter) for _ in range(repeats))
    return 2 * src.numel() * 4 / ms / 1e6


def markdown(rows: list[dict]) -> str:
    lines = ["| shape | mode | implementation | median ms | CPU ms | GB/s | % of copy | vs layer_norm | vs layer_norm (CPU) | vs torch rms_norm |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        trms = f"{r['vs_torch_rms_norm']:.2f}x" if r["vs_torch_rms_norm"] is not None else "-"
        lines.append(f"| {r['shape']} | {r['mode']} | {r['impl']} | {r['ms']:.3f} | {r['cpu_ms']:.3f} | {r['gb_s']:.1f} | "
                     f"{r['pct_copy']:.0f}% | {r['vs_layer_norm']:.2f}x | {r['vs_layer_norm_cpu']:.2f}x | {trms} |")
    return "\n".join(lines)
