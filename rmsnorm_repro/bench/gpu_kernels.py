"""Part 2 of the GPU check: a kernel table per call at the paper's shapes.

x * 2 (floor), torch F.layer_norm, torch F.rms_norm, the suite's Triton kernel and its RMSNorm / pRMSNorm
modules, Liger's and apex's RMSNorm where installed; forward and forward+backward, fp32 and bf16: wall time,
host time (the calling thread's CPU time), device time and kernels per call (the profiler's CUDA kernels; on
CPU: aten ops). One block a shape x dtype, each written as soon as it is done (bench/gpu_check.py).
"""
from __future__ import annotations

import statistics
import time
from typing import Callable

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from ..norms import RMSNorm
from ..norms.fused import triton_rmsnorm

SHAPES = ((80, 2048), (4096, 512), (8192, 1024), (25000, 512))  # GRU step; Transformer batches (25k tokens: base)
DTYPES = (torch.float32, torch.bfloat16)


def implementations(d: int, device: str, dtype: torch.dtype) -> dict[str, tuple[Callable, list[torch.Tensor]]]:
    """name -> (f(x, w, b), the parameters of its own module): Liger's and apex's where they import. A fwd+bwd
    row clears the gradients of x, w, b and of those parameters after every call, so no row accumulates
    into a gradient (one more kernel) where another gets a fresh one."""
    eps = 1e-6
    rms = RMSNorm(d).to(device=device, dtype=dtype)  # eps outside the root (the authors' PyTorch file): Triton
    rms_inside = RMSNorm(d, eps=eps, eps_inside=True).to(device=device, dtype=dtype)  # the recipes': torch's rms_norm
    prms = RMSNorm(d, p=0.0625).to(device=device, dtype=dtype)
    out = {
        "torch layer_norm": (lambda x, w, b: F.layer_norm(x, (d,), w, b, 1e-5), []),
        "torch rms_norm": (lambda x, w, b: F.rms_norm(x, (d,), w, eps), []),
        "suite Triton kernel": (lambda x, w, b: triton_rmsnorm.rms_norm(x, w, None, d, eps, True), []),
        "suite RMSNorm module": (lambda x, w, b: rms(x), list(rms.parameters())),
        "suite RMSNorm module, eps inside": (lambda x, w, b: rms_inside(x), list(rms_inside.parameters())),
        "suite pRMSNorm module 6.25%": (lambda x, w, b: prms(x), list(prms.parameters())),
    }
    try:
        from liger_kernel.transformers.rms_norm import LigerRMSNorm

        liger = LigerRMSNorm(d, eps=eps).to(device=device, dtype=dtype)
        out["Liger RMSNorm"] = (lambda x, w, b: liger(x), list(liger.parameters()))
    except Exception:  # noqa: BLE001 (not installed, or not for this device)
        pass
    try:
        from apex.normalization import FusedRMSNorm

        apex_norm = FusedRMSNorm(d, eps=eps).to(device=device, dtype=dtype)
        out["apex FusedRMSNorm"] = (lambda x, w, b: apex_norm(x), list(apex_norm.parameters()))
    except Exception:  # noqa: BLE001
        pass
    out["x * 2 (floor)"] = (lambda x, w, b: x * 2.0, [])
    return out


def _sync(device: str) -> Callable[[], None]:
    return torch.cuda.synchronize if device == "cuda" else (lambda: None)


def _block_ms(stmt: Callable[[], None], number: int, sync) -> float:
    stmt()
    sync()
    start = time.perf_counter()
    for _ in range(number):
        stmt()
    sync()
    return (time.perf_counter() - start) * 1e3 / number


def host_us(stmt: Callable[[], None], number: int, sync) -> float:
    """The calling thread's CPU time per call (us): what the host spends to launch the call."""
    sync()
    start = time.thread_time()
    for _ in range(number):
        stmt()
    host = time.thread_time() - start
    sync()
    return host * 1e6 / number


class _AtenOps(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += 1
        return func(*args, **(kwargs or {}))


def kernels(stmt: Callable[[], None], device: str, calls: int = 1) -> tuple[float, float | None]:
    """(kernels per call, device us per call) of `stmt`: on CUDA the profiler's kernels and their summed
    time; on CPU the aten ops a dispatch mode sees (each one a kernel there) and no device time."""
    if device != "cuda":
        with _AtenOps() as ops:
            for _ in range(calls):
                stmt()
        return ops.count / calls, None
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            stmt()
        torch.cuda.synchronize()
    launched = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    return len(launched) / calls, sum(e.device_time for e in launched) / calls


def kernel_block(device: str, n: int, d: int, dtype: torch.dtype, rounds: int = 7, block_s: float = 0.02,
                 names: list[str] | None = None) -> list[dict]:
    """One shape x dtype: median ms, GB/s and the median of paired ratios to torch layer_norm per (mode, impl)."""
    sync, rows = _sync(device), []
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, d, generator=g).to(device, dtype)
    dy = torch.randn(n, d, generator=g).to(device, dtype)
    w = (1 + 0.1 * torch.randn(d, generator=g)).to(device, dtype)
    b = (0.1 * torch.randn(d, generator=g)).to(device, dtype)
    impls = {k: v for k, v in implementations(d, device, dtype).items()
             if names is None or k in names or k == "torch layer_norm"}
    xg, wg, bg = (t.detach().clone().requires_grad_() for t in (x, w, b))
    stmts = {}
    for name, (f, params) in impls.items():
        def fwd(f=f):
            with torch.no_grad():
                f(x, w, b)

        def fwd_bwd(f=f, cleared=(xg, wg, bg, *params)):
            f(xg, wg, bg).backward(dy)
            for t in cleared:
                t.grad = None
        stmts[(name, "fwd")], stmts[(name, "fwd+bwd")] = fwd, fwd_bwd
    number = {}
    for key, stmt in stmts.items():
        one = _block_ms(stmt, 3, sync)  # also the warm-up: Triton compiles here
        number[key] = max(1, int(block_s / max(one / 1e3, 1e-7)))
    ms = {key: [] for key in stmts}
    ratio = {key: [] for key in stmts}
    for _ in range(rounds):
        for key, stmt in stmts.items():
            base = _block_ms(stmts[("torch layer_norm", key[1])], number[("torch layer_norm", key[1])], sync)
            t = _block_ms(stmt, number[key], sync)
            ms[key].append(t)
            ratio[key].append(t / base)
    for (name, mode), v in ms.items():
        moved = (2 if mode == "fwd" else 5) * n * d * x.element_size()
        med = statistics.median(v)
        trms = statistics.median(ms[("torch rms_norm", mode)]) if ("torch rms_norm", mode) in ms else None
        per_call, device_us = kernels(stmts[(name, mode)], device)
        rows.append({"dtype": str(dtype).replace("torch.", ""), "shape": f"{n}x{d}", "mode": mode, "impl": name,
                     "ms": med, "gb_s": moved / med / 1e6, "vs_layer_norm": statistics.median(ratio[(name, mode)]),
                     "vs_torch_rms_norm": med / trms if trms else None,
                     "host_us": host_us(stmts[(name, mode)], number[(name, mode)], sync),
                     "device_us": device_us, "kernels": per_call})
    return rows


def targets(rows: list[dict]) -> list[str]:
    """Per dtype and shape, fwd+bwd: the suite's RMSNorm modules (eps outside the root: Triton; inside: torch's
    kernel) <= 1.05x torch's F.rms_norm and <= 0.9x F.layer_norm."""
    lines = []
    for r in rows:
        if r["impl"] not in ("suite RMSNorm module", "suite RMSNorm module, eps inside") or r["mode"] != "fwd+bwd":
            continue
        vs_rms, vs_ln = r["vs_torch_rms_norm"], r["vs_layer_norm"]
        lines.append(f"- {r['dtype']} {r['shape']}: {r['impl']} {vs_ln:.2f}x F.layer_norm (target <= 0.9x: "
                     f"{'holds' if vs_ln <= 0.9 else 'does not hold'})"
                     + ("" if vs_rms is None else f", {vs_rms:.2f}x F.rms_norm (target <= 1.05x: "
                        f"{'holds' if vs_rms <= 1.05 else 'does not hold'})"))
    return lines


def markdown(rows: list[dict], errors: dict[str, str]) -> list[str]:
    """The section's lines: the table (a failed or skipped block named in it) and the targets."""
    out = ["| dtype | shape | mode | implementation | median ms | host us | device us | kernels | GB/s | "
           "vs layer_norm (paired) | vs torch rms_norm |", "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        trms = "-" if r["vs_torch_rms_norm"] is None else f"{r['vs_torch_rms_norm']:.2f}x"
        dev = "-" if r["device_us"] is None else f"{r['device_us']:.1f}"
        out.append(f"| {r['dtype']} | {r['shape']} | {r['mode']} | {r['impl']} | {r['ms']:.4f} | {r['host_us']:.1f} | "
                   f"{dev} | {r['kernels']:.0f} | {r['gb_s']:.0f} | {r['vs_layer_norm']:.2f}x | {trms} |")
    out += [f"| {block.split()[0]} | {block.split()[1]} | - | {why} | | | | | | | |" for block, why in errors.items()]
    if rows:
        out += ["", "Targets (fwd+bwd):", ""] + targets(rows)
    return out
