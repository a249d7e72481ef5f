"""The one-shot GPU check (`make gpu-check`, `python -m rmsnorm_repro.bench --gpu`): for the first time
a GPU is at hand, about 8 minutes on one H100.

1. Exactness of the Triton kernel on the device, fp32 / bf16 / fp16 (and float32 gain beside bf16 /
   fp16 activations, autocast's mix), forward and every gradient against the float64 reference of the
   same rounded inputs; plus the RMSNorm module's choice of kernel (norms/fused `kernel`), under autocast too,
   and the Triton GRU transition and LSTM step (nn/triton_gru.py, nn/triton_lstm.py: the recurrent tasks'
   steps on CUDA) against float64.
2. A kernel table per call at the paper's shapes: x * 2 (floor), torch F.layer_norm, torch F.rms_norm,
   the suite's Triton kernel and its RMSNorm / pRMSNorm modules, Liger's and apex's RMSNorm where
   installed, forward and forward+backward, fp32 and bf16: wall time, host time (the calling thread's
   CPU time), device time and kernels per call (the profiler's CUDA kernels; on CPU: aten ops).
3. A per-step table of every task at the paper's sizes (the paper's batch), norms none / layernorm /
   rmsnorm / prmsnorm taking turns on the same batches, in fp32 with TF32 (train.tf32) and under bf16
   autocast: step time, its ratio to LayerNorm beside the paper's, kernels per step and the GPU's busy
   fraction (kernel time / wall time of a profiled step), and a verdict per task.

Writes results/speed/gpu-<device>.md and .json. Each part reports its own failure and the rest
still runs; the exit code is 1 when an exactness check fails. `--tiny` runs every part at tiny sizes,
on CPU where there is no GPU (the Triton kernel interpreted: TRITON_INTERPRET=1): the tests run it.
"""
from __future__ import annotations

import json
import statistics
import sys
import time
import traceback
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from ..atomic import atomic_write_text
from ..nn import NormGRUCell, NormLSTM, triton_gru
from ..norms import RMSNorm, build_normalization, formulas, fused
from ..norms.fused import triton_rmsnorm

SHAPES = ((80, 2048), (4096, 512), (8192, 1024), (25000, 512))  # GRU step; Transformer batches (25k tokens: base)
DTYPES = (torch.float32, torch.bfloat16)
EXACT_DTYPES = {torch.float32: 2e-5, torch.bfloat16: 2e-2, torch.float16: 3e-3}  # error / max |reference|
STEP_NORMS = ("none", "layernorm", "rmsnorm", "prmsnorm")
STEP_PRECISIONS = ("fp32", "bf16")  # train.precision (fp32 with train.tf32); under bf16 autocast every norm computes in fp32
DEADLINE_S = 450  # stop starting new parts after this (the whole check: about 8 minutes)


# 1. Exactness ----------------------------------------------------------------------------------------
EXACT_CASES = [  # shape, p, eps_inside, affine ("gain", "gain+bias", "none"), zero row
    ((7, 33), 1.0, False, "gain+bias", True),
    ((2, 3, 20), 0.3, True, "gain", False),
    ((5, 1), 1.0, False, "none", False),
    ((64, 4096), 0.0625, False, "gain", True),
    ((16, 1000), 1.0, True, "gain+bias", False),
]
# eps 1e-3: a zero row's scale 1 / eps must stay finite in float16 (max 65504; eps 1e-5 would not)
EPS = 1e-3


def _case(shape, dtype, param_dtype, affine, zero_row, device, seed=0):
    g = torch.Generator().manual_seed(seed)
    d = shape[-1]
    x = torch.randn(*shape, generator=g)
    if zero_row:
        x.view(-1, d)[0] = 0.0
    w = (1 + 0.5 * torch.randn(d, generator=g)) if affine != "none" else None
    b = torch.randn(d, generator=g) if affine == "gain+bias" else None
    dy = torch.randn(*shape, generator=g)
    to = lambda t, dt: None if t is None else t.to(device=device, dtype=dt)  # noqa: E731
    return to(x, dtype), to(w, param_dtype), to(b, param_dtype), to(dy, dtype)


def _max_rel_err(got: list[torch.Tensor], want: list[torch.Tensor]) -> float:
    worst = 0.0
    for a, r in zip(got, want):
        scale = max(r.abs().max().item(), 1e-30)
        worst = max(worst, (a.double() - r).abs().max().item() / scale)
    return worst


def exactness(device: str = "cuda", dtypes=tuple(EXACT_DTYPES), cases=EXACT_CASES) -> list[dict]:
    """One row per (case, dtype, parameter dtype): the Triton kernel's worst error against float64."""
    rows = []
    for dtype in dtypes:
        mixes = [dtype] + ([torch.float32] if dtype in (torch.bfloat16, torch.float16) else [])
        for param_dtype in mixes:
            for shape, p, eps_inside, affine, zero_row in cases:
                x, w, b, dy = _case(shape, dtype, param_dtype, affine, zero_row, device)
                k = formulas.partial_k(shape[-1], p)
                leaves = [t.detach().clone().requires_grad_() for t in (x, w, b) if t is not None]
                xi, wi, bi = leaves[0], (leaves[1] if w is not None else None), (leaves[-1] if b is not None else None)
                y = triton_rmsnorm.rms_norm(xi, wi, bi, k, EPS, eps_inside)
                got = [y, *torch.autograd.grad(y, leaves, dy)]
                ref_leaves = [t.detach().double().requires_grad_() for t in (x, w, b) if t is not None]
                rw = ref_leaves[1] if w is not None else None
                rb = ref_leaves[-1] if b is not None else None
                yr = formulas.rms_norm(ref_leaves[0], rw, rb, k, EPS, eps_inside)
                want = [yr, *torch.autograd.grad(yr, ref_leaves, dy.double())]
                # the op-by-op reference in the same dtype: what this precision can do at all (a row of
                # d = 1 makes dx a difference of nearly equal terms)
                low_leaves = [t.detach().clone().requires_grad_() for t in (x, w, b) if t is not None]
                yl = formulas.rms_norm(low_leaves[0], low_leaves[1] if w is not None else None,
                                       low_leaves[-1] if b is not None else None, k, EPS, eps_inside)
                ref_err = _max_rel_err([yl, *torch.autograd.grad(yl, low_leaves, dy.to(yl.dtype))], want)
                dtypes_ok = y.dtype == dtype and all(gr.dtype == t.dtype for gr, t in zip(got[1:], (x, w, b)))
                err = _max_rel_err(got, want)
                rows.append({"shape": "x".join(map(str, shape)), "dtype": str(dtype).replace("torch.", ""),
                             "params": str(param_dtype).replace("torch.", ""), "p": p, "eps_inside": eps_inside,
                             "affine": affine, "zero_row": zero_row, "max_rel_err": err, "reference_err": ref_err,
                             "tol": EXACT_DTYPES[dtype],
                             "ok": bool((err <= EXACT_DTYPES[dtype] or err <= 4 * ref_err) and dtypes_ok)})
    return rows


def module_checks(device: str = "cuda") -> list[dict]:
    """The RMSNorm module on the device: which kernel it chose, and autocast's dtype."""
    rows = []
    norm = RMSNorm(64).to(device)  # eps outside the root: torch's rms_norm computes another formula
    x = torch.randn(8, 64, device=device)
    y = norm(x)
    expected = fused.kernel("auto", device, x.dtype, x.dtype, 64, 64, False, False)[0]
    rows.append({"check": "RMSNorm(64) on the device chooses", "value": norm.kernel_name,
                 "ok": bool(norm.kernel_name == expected and torch.allclose(y, formulas.rms_norm(x, norm.weight, None, 64, 1e-8, False), rtol=1e-5, atol=1e-5))})
    inside = RMSNorm(64, eps_inside=True).to(device)  # the recipes' placement: torch's own rms_norm on CUDA
    y = inside(x)
    expected = fused.kernel("auto", device, x.dtype, x.dtype, 64, 64, True, False)[0]
    rows.append({"check": "RMSNorm(64, eps_inside=True) on the device chooses", "value": inside.kernel_name,
                 "ok": bool(inside.kernel_name == expected and (device != "cuda" or expected == "torch")
                            and torch.allclose(y, formulas.rms_norm(x, inside.weight, None, 64, 1e-8, True), rtol=1e-5, atol=1e-5))})
    if device == "cuda":  # CPU autocast is covered by tests/test_fused.py
        with torch.autocast("cuda", dtype=torch.bfloat16):
            h = torch.nn.functional.linear(x, torch.eye(64, device=device))
            y = norm(h)
        ref = formulas.rms_norm(h.double(), norm.weight.double(), None, 64, 1e-8, False)
        ok = y.dtype == torch.bfloat16 and _max_rel_err([y], [ref]) < 2e-2
        rows.append({"check": "under autocast (bf16 activations, fp32 gain)", "value": f"{norm.kernel_name}, {y.dtype}", "ok": bool(ok)})
    triton_gru.CPU_TENSORS = device == "cpu"  # --tiny: the recurrent kernels interpreted on CPU tensors, here only
    try:
        return rows + gru_checks(device) + lstm_checks(device)
    finally:
        triton_gru.CPU_TENSORS = False


GRU_CASES = [("rmsnorm", {"eps": EPS}), ("prmsnorm", {"p": 0.25, "eps_inside": True, "bias": True}), ("layernorm", {}),
             ("none", {})]  # eps 1e-3 outside the root: the zero row's gradient stays finite in fp16, as in part 1
# (a_gates, a_cand and s; h): fp32, bf16 autocast's mix, fp16
GRU_DTYPES = [(torch.float32, torch.float32), (torch.bfloat16, torch.float32), (torch.float16, torch.float16)]


def gru_checks(device: str = "cuda") -> list[dict]:
    """The Triton GRU transition (nn/triton_gru.py) on the device: h' and every gradient (a_gates, a_cand,
    h, s, the state-side gains and biases) against the float64 cell op by op, with float32 gains beside
    fp32, bf16 (autocast's mix: a float32 h) and fp16 inputs, a zero state row; hidden 1000 on CUDA (the
    RNNSearch's), 12 on CPU (--tiny, interpreted)."""
    rows, B, H = [], 16, 1000 if device == "cuda" else 12
    for name, options in GRU_CASES:
        torch.manual_seed(0)
        cell = NormGRUCell(8, H, build_normalization(name, options)).to(device)
        with torch.no_grad():  # gains and biases away from 1 and 0: a misplaced one cannot hide
            for p in cell.parameters():
                if p.dim() == 1:
                    p.copy_(torch.rand_like(p) + 0.5)
        reference = NormGRUCell(8, H, build_normalization(name, {**options, "impl": "reference"})).double().to(device)
        reference.load_state_dict(cell.state_dict())
        reference.fused = False
        norms = lambda c: [p for n, p in c.named_parameters() if n.startswith("norm_state")]  # noqa: E731
        worst, dtypes_ok = 0.0, True
        for dtype, h_dtype in GRU_DTYPES:
            g = torch.Generator().manual_seed(1)
            a, h, dy = (torch.randn(B, n, generator=g, dtype=torch.float64) for n in (3 * H, H, H))
            h[0] = 0.0
            s = h @ torch.randn(3 * H, H, generator=g, dtype=torch.float64).t() / H ** 0.5  # row 0: U h0 = 0
            leaves = [t.to(device, dt).requires_grad_() for t, dt in ((a, dtype), (h, h_dtype), (s, dtype))]
            out = triton_gru.combine(cell, leaves[0][:, :2 * H], leaves[0][:, 2 * H:], leaves[1], leaves[2])
            if out is None:
                return rows + [{"check": f"GRU transition (Triton) {name}", "value": "not taken", "ok": False}]
            got = [out, *torch.autograd.grad(out, leaves + norms(cell), dy.to(device, out.dtype))]
            ref_leaves = [t.detach().double().requires_grad_() for t in leaves]
            want_out = reference.combine(ref_leaves[0][:, :2 * H], ref_leaves[0][:, 2 * H:], *ref_leaves[1:])
            want = [want_out, *torch.autograd.grad(want_out, ref_leaves + norms(reference), dy.to(device))]
            worst = max(worst, _max_rel_err(got, want) / EXACT_DTYPES[dtype])  # in units of the tolerance
            dtypes_ok &= out.dtype == torch.promote_types(dtype, h_dtype) and all(
                gr.dtype == t.dtype for gr, t in zip(got[1:], leaves + norms(cell)))
        described = f"{name} {options}" if options else name
        rows.append({"check": f"GRU transition (Triton), {described}: fp32, bf16 autocast, fp16 against float64",
                     "value": f"worst error {worst:.2f} of tolerance", "ok": bool(worst <= 1.0 and dtypes_ok)})
    return rows


def lstm_checks(device: str = "cuda") -> list[dict]:
    """The Triton LSTM step (nn/triton_lstm.py) on the device: a padded NormLSTM's outputs and the input's and
    every parameter's gradient from a zero state, fp32 and under bf16 autocast, against float64 op by op
    (within the tolerance, or 4 times the error of the op-by-op path in the same precision); hidden 256 on
    CUDA, 6 on CPU (--tiny, interpreted)."""
    rows, B, H = [], 16 if device == "cuda" else 4, 256 if device == "cuda" else 6
    for name, options in (("rmsnorm", {"eps": EPS}), ("layernorm", {})):
        torch.manual_seed(0)
        lstm = NormLSTM(8, H, build_normalization(name, options), max_steps=5).to(device)
        reference = NormLSTM(8, H, build_normalization(name, {**options, "impl": "reference"}), max_steps=5)
        reference.load_state_dict(lstm.state_dict())
        reference = reference.double().to(device)
        g = torch.Generator().manual_seed(1)
        x = torch.randn(B, 5, 8, generator=g, dtype=torch.float64).to(device)
        mask = torch.ones(B, 5, dtype=torch.bool, device=device)
        mask[3, 2:] = False

        def run(model, fused, dtype, autocast):
            model.fwd.fused = fused
            xi = x.to(dtype).requires_grad_()
            with torch.autocast(device, dtype=torch.bfloat16, enabled=autocast):
                out, last = model(xi, mask)
            y = torch.cat([out.flatten(), last.flatten()])
            taken = any(node.name() == "_LSTMStepFunctionBackward" for node in autograd_nodes(y))
            dy = torch.linspace(-1, 1, y.numel(), device=device, dtype=y.dtype)
            return taken, [y, *torch.autograd.grad(y, [xi, *model.parameters()], dy)]

        _, want = run(reference, False, torch.float64, False)
        worst, taken_all = 0.0, True
        for autocast, tol in ((False, EXACT_DTYPES[torch.float32]), (True, EXACT_DTYPES[torch.bfloat16])):
            taken, got = run(lstm, True, torch.float32, autocast)
            _, op_by_op = run(lstm, False, torch.float32, autocast)
            worst = max(worst, _max_rel_err(got, want) / max(tol, 4 * _max_rel_err(op_by_op, want)))
            taken_all &= taken
        rows.append({"check": f"LSTM step (Triton), {name}: fp32, bf16 autocast against float64",
                     "value": f"worst error {worst:.2f} of tolerance" if taken_all else "not taken",
                     "ok": bool(taken_all and worst <= 1.0)})
    return rows


def autograd_nodes(out: torch.Tensor) -> set:
    """The autograd nodes behind out (which Functions a result went through: the tests ask it too)."""
    seen, todo = set(), [out.grad_fn]
    while todo:
        node = todo.pop()
        if node is not None and node not in seen:
            seen.add(node)
            todo += [next_fn for next_fn, _ in node.next_functions]
    return seen


# 2. Kernel table ---------------------------------------------------------------------------------------
def implementations(d: int, device: str, dtype: torch.dtype) -> dict[str, Callable]:
    """name -> f(x, w, b); Liger's and apex's where they import."""
    eps = 1e-6
    rms = RMSNorm(d).to(device=device, dtype=dtype)  # eps outside the root (the authors' PyTorch file): Triton
    rms_inside = RMSNorm(d, eps=eps, eps_inside=True).to(device=device, dtype=dtype)  # the recipes': torch's rms_norm
    prms = RMSNorm(d, p=0.0625).to(device=device, dtype=dtype)
    out = {
        "torch layer_norm": lambda x, w, b: F.layer_norm(x, (d,), w, b, 1e-5),
        "torch rms_norm": lambda x, w, b: F.rms_norm(x, (d,), w, eps),
        "suite Triton kernel": lambda x, w, b: triton_rmsnorm.rms_norm(x, w, None, d, eps, True),
        "suite RMSNorm module": lambda x, w, b: rms(x),
        "suite RMSNorm module, eps inside": lambda x, w, b: rms_inside(x),
        "suite pRMSNorm module 6.25%": lambda x, w, b: prms(x),
    }
    try:
        from liger_kernel.transformers.rms_norm import LigerRMSNorm

        liger = LigerRMSNorm(d, eps=eps).to(device=device, dtype=dtype)
        out["Liger RMSNorm"] = lambda x, w, b: liger(x)
    except Exception:  # noqa: BLE001 (not installed, or not for this device)
        pass
    try:
        from apex.normalization import FusedRMSNorm

        apex_norm = FusedRMSNorm(d, eps=eps).to(device=device, dtype=dtype)
        out["apex FusedRMSNorm"] = lambda x, w, b: apex_norm(x)
    except Exception:  # noqa: BLE001
        pass
    out["x * 2 (floor)"] = lambda x, w, b: x * 2.0
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


def kernel_table(device: str = "cuda", shapes=SHAPES, dtypes=DTYPES, rounds: int = 7, block_s: float = 0.02,
                 names: list[str] | None = None) -> list[dict]:
    """Median ms, GB/s and the median of paired ratios to torch layer_norm per (shape, dtype, mode, impl)."""
    sync, rows = _sync(device), []
    for dtype in dtypes:
        for n, d in shapes:
            g = torch.Generator().manual_seed(0)
            x = torch.randn(n, d, generator=g).to(device, dtype)
            dy = torch.randn(n, d, generator=g).to(device, dtype)
            w = (1 + 0.1 * torch.randn(d, generator=g)).to(device, dtype)
            b = (0.1 * torch.randn(d, generator=g)).to(device, dtype)
            impls = {k: v for k, v in implementations(d, device, dtype).items() if names is None or k in names or k == "torch layer_norm"}
            xg, wg, bg = (t.detach().clone().requires_grad_() for t in (x, w, b))
            stmts = {}
            for name, f in impls.items():
                def fwd(f=f):
                    with torch.no_grad():
                        f(x, w, b)

                def fwd_bwd(f=f):
                    f(xg, wg, bg).backward(dy)
                    xg.grad = wg.grad = bg.grad = None
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


# 3. Per-step table -------------------------------------------------------------------------------------
def _profiled_step(run, step: int, device: str) -> tuple[float, float | None]:
    """(kernels, GPU busy fraction) of one training step: the profiler's CUDA kernels and their summed
    time over the step's wall time (on CPU: aten ops, no fraction)."""
    start = time.perf_counter()
    count, device_us = kernels(lambda: run.step(step), device)
    wall_us = (time.perf_counter() - start) * 1e6
    return count, (None if device_us is None else device_us / wall_us)


def step_table(device: str = "cuda", tasks=None, norms=STEP_NORMS, steps: int = 5, rounds: int = 3,
               batch_fraction: float = 1.0, overrides: list[str] = (), precisions=STEP_PRECISIONS, log=print,
               budget_s: float | None = None, skipped: list[str] | None = None) -> list[dict]:
    """Per task x precision x norm: the median ms per training step (norms taking turns, step by step,
    on the same batches, after 2 warm-up steps each), its ratio to LayerNorm beside the paper's, kernels
    and GPU busy fraction of a profiled step. fp32 runs with TF32 (train.tf32's default). Past `budget_s`
    no further task x precision starts; those left out are appended to `skipped`."""
    from ..runner import precision as precision_
    from .steps import StepRun, available_tasks, paper_ratios

    precision_.apply_tf32(True, torch.device(device))
    rows, start = [], time.perf_counter()
    for task in tasks or available_tasks():
        for precision in precisions:
            if budget_s is not None and time.perf_counter() - start > budget_s:
                if skipped is not None:
                    skipped.append(f"{task} {precision}")
                continue
            runs = {norm: StepRun(task, norm, batch_fraction, device, precision, overrides) for norm in norms}
            times: dict[str, list[float]] = {norm: [] for norm in norms}
            for s in range(2):
                for run in runs.values():
                    run.step(s)
            for r in range(rounds):
                for s in range(steps):
                    for norm, run in runs.items():  # every norm on step s's batch before the next step
                        times[norm].append(run.step(2 + r * steps + s)[0])
            med = {norm: statistics.median(v) for norm, v in times.items()}
            paper = paper_ratios(task)
            for norm, run in runs.items():
                count, busy = _profiled_step(run, 2, device)
                ln = med.get("layernorm")
                rows.append({"precision": f"{precision} (TF32)" if precision == "fp32" and device == "cuda" else precision,
                             "task": task, "norm": norm, "step_ms": med[norm], "steps": len(times[norm]),
                             "vs_layernorm": med[norm] / ln if ln else None,
                             "paper_vs_layernorm": {label: ratios.get(norm) for label, ratios in paper.items()},
                             "kernels": count, "busy": busy, "batch": run.batch,
                             "impl": run.norms.describe().get("impl_used", "-")})
            del runs
            if device == "cuda":
                torch.cuda.empty_cache()
            log(f"  gpu step table: {task} {precision} done")
    return rows


def verdicts(step_rows: list[dict]) -> list[str]:
    """Per precision and task: RMSNorm's (and pRMSNorm's) step against LayerNorm's, beside the paper's."""
    lines = []
    for r in step_rows:
        if r["norm"] not in ("rmsnorm", "prmsnorm") or r["vs_layernorm"] is None:
            continue
        paper = [v for v in r["paper_vs_layernorm"].values() if v is not None]
        ours = r["vs_layernorm"]
        said = "; ".join(f"{v:.2f} ({k})" for k, v in r["paper_vs_layernorm"].items() if v is not None) or "no time in the paper"
        holds = "faster than LayerNorm, as in the paper" if ours < 1 else "NOT faster than LayerNorm"
        if paper and min(paper) >= 1:
            holds = "the paper found no speed-up here either" if ours >= 1 else "faster than LayerNorm (the paper was not)"
        lines.append(f"- {r['task']} {r['precision']}: {r['norm']} / layernorm {ours:.2f} (paper: {said}): {holds}")
    return lines


# Report ------------------------------------------------------------------------------------------------
def markdown(exact: list[dict], checks: list[dict], kernels: list[dict], step_rows: list[dict], errors: dict[str, str]) -> str:
    out = ["## 1. Exactness of the Triton kernel (against float64)", ""]
    if exact:
        bad = [r for r in exact if not r["ok"]]
        out.append(f"{len(exact) - len(bad)} of {len(exact)} cases within tolerance: error = max |got - float64 "
                   "reference| / max |reference| over y and every gradient, at most fp32 2e-5, bf16 2e-2, fp16 3e-3, or at "
                   "most 4 times the error of the op-by-op reference run in the same dtype; y and gradients in the "
                   f"inputs' dtypes; eps {EPS}.")
        out += ["", "| shape | dtype | params | p | eps inside | affine | zero row | max rel err | same-dtype reference's | ok |",
                "|---|---|---|---|---|---|---|---:|---:|---|"]
        out += [f"| {r['shape']} | {r['dtype']} | {r['params']} | {r['p']} | {r['eps_inside']} | {r['affine']} | "
                f"{r['zero_row']} | {r['max_rel_err']:.1e} | {r['reference_err']:.1e} | {'yes' if r['ok'] else 'NO'} |" for r in exact]
    out += [f"- {c['check']}: {c['value']} ({'ok' if c['ok'] else 'WRONG'})" for c in checks]
    out += ["", "## 2. Kernel table", ""]
    if kernels:
        out += ["| dtype | shape | mode | implementation | median ms | host us | device us | kernels | GB/s | vs layer_norm (paired) | vs torch rms_norm |",
                "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]
        for r in kernels:
            trms = "-" if r["vs_torch_rms_norm"] is None else f"{r['vs_torch_rms_norm']:.2f}x"
            dev = "-" if r["device_us"] is None else f"{r['device_us']:.1f}"
            out.append(f"| {r['dtype']} | {r['shape']} | {r['mode']} | {r['impl']} | {r['ms']:.4f} | {r['host_us']:.1f} | "
                       f"{dev} | {r['kernels']:.0f} | {r['gb_s']:.0f} | {r['vs_layer_norm']:.2f}x | {trms} |")
    out += ["", "## 3. Per training step (paper sizes)", ""]
    if step_rows:
        out += ["| precision | task | norm | step ms (median) | vs LayerNorm | paper vs LayerNorm | kernels a step | GPU busy | batch | impl |",
                "|---|---|---|---:|---:|---|---:|---:|---|---|"]
        for r in step_rows:
            paper = "; ".join(f"{v:.2f} ({k})" for k, v in r["paper_vs_layernorm"].items() if v is not None) or "-"
            ratio = "-" if r["vs_layernorm"] is None else f"{r['vs_layernorm']:.2f}"
            busy = "-" if r["busy"] is None else f"{r['busy']:.0%}"
            out.append(f"| {r['precision']} | {r['task']} | {r['norm']} | {r['step_ms']:.1f} | {ratio} | {paper} | "
                       f"{r['kernels']:.0f} | {busy} | {', '.join(r['batch']) or '-'} | {r['impl']} |")
        out += ["", "Verdicts (the paper's ratios: its own GPUs, fp32 without TF32):", ""] + verdicts(step_rows)
    if errors:
        out += ["", "## Parts that failed", ""] + [f"- {part}: {msg}" for part, msg in errors.items()]
    return "\n".join(out)


def device_label(device: str) -> str:
    if device == "cuda":
        return torch.cuda.get_device_name(0)
    from ..host import cpu_name

    return f"{cpu_name()} (Triton interpreted)" if triton_rmsnorm._interpreting() else cpu_name()


def run_all(device: str = "cuda", out: str | Path = "results/speed", kernel_kwargs: dict | None = None,
            step_kwargs: dict | None = None, deadline_s: float = DEADLINE_S, log=print, tiny: bool = False) -> tuple[Path, bool]:
    """All three parts; returns (the markdown file written, whether every exactness check passed)."""
    start, errors = time.perf_counter(), {}
    results: dict[str, list] = {"exact": [], "checks": [], "kernels": [], "steps": []}
    skipped: list[str] = []
    parts = [("exact", lambda: exactness(device)), ("checks", lambda: module_checks(device)),
             ("kernels", lambda: kernel_table(device, **(kernel_kwargs or {}))),
             ("steps", lambda: step_table(device, log=log, skipped=skipped,
                                          budget_s=max(deadline_s - (time.perf_counter() - start), 0.0),
                                          **(step_kwargs or {})))]
    for name, part in parts:
        if time.perf_counter() - start > deadline_s:
            errors[name] = f"skipped: the check had run {deadline_s} s"
            continue
        log(f"gpu check: {name} ...")
        try:
            results[name] = part()
        except Exception as e:  # noqa: BLE001 (report it and go on with the other parts)
            errors[name] = f"{type(e).__name__}: {e}".splitlines()[0][:300]
            traceback.print_exc()
    if skipped:
        errors["steps"] = f"skipped {', '.join(skipped)}: the check had run {deadline_s} s"
    exact_ok = bool(results["exact"]) and all(r["ok"] for r in results["exact"] + results["checks"])
    label = device_label(device)
    slug = "".join(c if c.isalnum() else "-" for c in label.lower()).strip("-")[:40]
    path = Path(out) / f"gpu-{slug}.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    header = [f"# GPU check: {label}", "", f"`python -m rmsnorm_repro.bench --gpu{' --tiny' if tiny else ''}`: torch {torch.__version__}, "
              f"triton {getattr(triton_rmsnorm.triton, '__version__', 'not installed')}, "
              f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {time.perf_counter() - start:.0f} s.", "",
              "- timings: wall clock with the device synchronized around blocks of calls; each block right after a block "
              "of torch layer_norm (ratios: medians of those pairs); fwd+bwd: y.backward(dy), fresh outputs",
              "- torch layer_norm has weight and bias; the RMSNorms have a gain only; eps 1e-6 (the suite's modules: 1e-8)",
              "- host us: the calling thread's CPU time per call; device us and kernels: the profiler's CUDA kernels per call "
              "(on CPU: aten ops, no device time); GPU busy: kernel time / wall time of one profiled step",
              "- per step: fp32 with TF32 (train.tf32=true); the paper's fp32 times had no TF32",
              f"- exactness: {'every case passed' if exact_ok else 'SOME CASES FAILED (see section 1)'}", ""]
    if tiny:
        header[-1:-1] = ["- --tiny: tiny shapes, mini models, one timed step: a test of the check itself, whose times and "
                         "verdicts say nothing about speed"]
    atomic_write_text(path, "\n".join(header) + markdown(results["exact"], results["checks"], results["kernels"],
                                                        results["steps"], errors) + "\n")
    atomic_write_text(path.with_suffix(".json"),
                      json.dumps({**results, "errors": errors, "device": label, "tiny": tiny}, indent=1, default=str) + "\n")
    log(f"wrote {path}")
    return path, exact_ok


TINY_KERNELS = dict(shapes=((8, 64),), rounds=1, block_s=0.001)
TINY_STEPS = dict(steps=1, rounds=1, batch_fraction=0.05, overrides=["scale=mini"])


def main(out: str = "results/speed", tiny: bool = False) -> int:
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
    if tiny:
        _, ok = run_all(device, out, TINY_KERNELS, TINY_STEPS, tiny=True)
    else:
        _, ok = run_all(device, out)
    return 0 if ok else 1
