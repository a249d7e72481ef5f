"""Module table: what a user who writes `RMSNorm(d)(x)` and backpropagates gets, beside LayerNorm.

Forward+backward through the modules and functions as users call them: `y = norm(x)`,
`y.backward(dy)`, gradients cleared as `zero_grad(set_to_none=True)` does; every output and gradient
is a fresh tensor. Rows per shape: torch's F.layer_norm with weight and bias (the baseline), the
suite's LayerNorm, RMSNorm and pRMSNorm modules, the fused kernel called directly (no module), and
`x * 2`, the floor no norm can beat (read x, write y; read dy, write dx, through the same autograd
machinery). Compiled rows: torch.compile(fullgraph=True) of the RMSNorm module beside the same of
nn.LayerNorm. A recurrent-cell row: one NormGRU layer (nn/gru.py) at RNNSearch's sizes per norm.

The allocator phases run in one process: glibc as it comes first, then tuned (rmsnorm_repro.allocator:
malloc reuses freed memory), which cannot be undone in-process. Each round times every call in a block
right after a block of F.layer_norm; ratios are given two ways: the ratio of the medians, and the median
of the per-round ratios of adjacent blocks (robust to load that changes between rounds), with the
interquartile range of those per-round ratios as the spread. Both from thread CPU time (1 thread), which
time stolen by other processes or VMs does not inflate, and from wall time; the targets read CPU time.
"""
from __future__ import annotations

import statistics
import time
from typing import Callable

import torch
import torch.nn.functional as F

from .. import allocator
from ..norms import LayerNorm, RMSNorm
from ..norms.fused import cpu
from .kernels import _calibrate, block_ms, floor_clause, verdict

SHAPES = ((80, 2048), (4096, 512), (8192, 1024))
BASELINE = "torch F.layer_norm (weight, bias)"
RMS_MODULE = "suite RMSNorm module"
FLOOR = "x * 2 (floor)"
COMPILED_RMS, COMPILED_LN = "compiled RMSNorm module", "compiled nn.LayerNorm"
# Targets: module call, fwd+bwd, 1 thread, ratio of medians against F.layer_norm, under an allocator.
TARGETS = {("80x2048", "default"): 0.6, ("4096x512", "default"): 0.6, ("8192x1024", "tuned"): 0.9}
GRU = {"batch": 80, "hidden": 1000, "input": 512, "steps": 10}  # RNNSearch: batch 80, H = 1000 (the sizes)
GRU_NORMS = ("none", "layernorm", "rmsnorm", "prmsnorm")


def calls(d: int, compiled: bool) -> tuple[dict[str, Callable], list[torch.nn.Parameter]]:
    """name -> f(x) returning y, and the parameters whose gradients a step clears."""
    w, b = torch.ones(d, requires_grad=True), torch.zeros(d, requires_grad=True)
    rms, prms, ln = RMSNorm(d), RMSNorm(d, p=0.0625), LayerNorm(d)
    ext = cpu.load()
    out = {
        BASELINE: lambda x: F.layer_norm(x, (d,), w, b, 1e-5),
        "suite LayerNorm module": ln,
        RMS_MODULE: rms,
        "suite pRMSNorm module (6.25%)": prms,
    }
    if ext is not None:
        out["fused kernel, called directly"] = lambda x: ext.rms_norm(x, w, None, d, 1e-8, False)
    out[FLOOR] = lambda x: x * 2.0
    params = [w, b, *rms.parameters(), *prms.parameters(), *ln.parameters()]
    if compiled:
        crms, cln = RMSNorm(d), torch.nn.LayerNorm(d)
        out[COMPILED_RMS] = torch.compile(crms, fullgraph=True, dynamic=False)
        out[COMPILED_LN] = torch.compile(cln, fullgraph=True, dynamic=False)
        params += [*crms.parameters(), *cln.parameters()]
    return out, params


def _step(f: Callable, x: torch.Tensor, dy: torch.Tensor, params: list) -> Callable[[], None]:
    def stmt():
        f(x).backward(dy)
        x.grad = None
        for p in params:
            p.grad = None
    return stmt


def _summary(name: str, wall: list[float], cpu_ms: list[float], pairs: list[float], pairs_cpu: list[float],
             base_wall: list[float], base_cpu: list[float]) -> dict:
    def iqr(v):
        return statistics.quantiles(v, n=4) if len(v) > 1 else [v[0]] * 3

    q, qc = iqr(pairs), iqr(pairs_cpu)
    return {"call": name, "ms": statistics.median(wall), "cpu_ms": statistics.median(cpu_ms),
            "ratio_of_medians": statistics.median(cpu_ms) / statistics.median(base_cpu),
            "median_paired_ratio": statistics.median(pairs_cpu), "paired_q1": qc[0], "paired_q3": qc[2],
            "ratio_of_medians_wall": statistics.median(wall) / statistics.median(base_wall),
            "median_paired_ratio_wall": statistics.median(pairs), "paired_wall_q1": q[0], "paired_wall_q3": q[2]}


def run_shapes(alloc: str, shapes=SHAPES, rounds: int = 15, min_run_time: float = 0.05, compiled: bool = True,
               names: list[str] | None = None, log=print) -> list[dict]:
    """Rows for one allocator phase (which must already be in effect)."""
    rows = []
    cpu_clock = time.thread_time if torch.get_num_threads() == 1 else time.process_time
    for n, d in shapes:
        g = torch.Generator().manual_seed(0)
        x = torch.randn(n, d, generator=g).requires_grad_()
        dy = torch.randn(n, d, generator=g)
        fns, params = calls(d, compiled)
        fns = {k: v for k, v in fns.items() if names is None or k in names or k == BASELINE}
        stmts = {name: _step(f, x, dy, params) for name, f in fns.items()}
        for stmt in stmts.values():
            stmt()  # warm-up: kernel load, compilation, first touch
            stmt()
        number = {name: _calibrate(stmt, min_run_time) for name, stmt in stmts.items()}
        wall = {name: [] for name in stmts}
        cpu_t = {name: [] for name in stmts}
        pairs = {name: [] for name in stmts}
        pairs_cpu = {name: [] for name in stmts}
        compiled_pairs = []
        for _ in range(rounds):
            for name, stmt in stmts.items():
                if name == BASELINE:
                    continue
                b_wall, b_cpu = block_ms(stmts[BASELINE], number[BASELINE], cpu_clock)
                w_ms, c_ms = block_ms(stmt, number[name], cpu_clock)
                wall[BASELINE].append(b_wall)
                cpu_t[BASELINE].append(b_cpu)
                wall[name].append(w_ms)
                cpu_t[name].append(c_ms)
                pairs[name].append(w_ms / b_wall)
                pairs_cpu[name].append(c_ms / b_cpu)
                if name == COMPILED_RMS and COMPILED_LN in stmts:  # compiled vs compiled, adjacent too
                    compiled_pairs.append(c_ms / block_ms(stmts[COMPILED_LN], number[COMPILED_LN], cpu_clock)[1])
        pairs[BASELINE] = pairs_cpu[BASELINE] = [1.0]
        for name in stmts:
            row = _summary(name, wall[name], cpu_t[name], pairs[name], pairs_cpu[name], wall[BASELINE], cpu_t[BASELINE])
            row.update(shape=f"{n}x{d}", allocator=alloc, mode="fwd+bwd")
            if name == COMPILED_RMS and COMPILED_LN in stmts:
                row["vs_compiled_layer_norm"] = row["cpu_ms"] / statistics.median(cpu_t[COMPILED_LN])
                row["vs_compiled_layer_norm_paired"] = statistics.median(compiled_pairs)
                q = statistics.quantiles(compiled_pairs, n=4) if len(compiled_pairs) > 1 else [compiled_pairs[0]] * 3
                row["compiled_q1"], row["compiled_q3"] = q[0], q[2]
            rows.append(row)
        log(f"  module table: {n}x{d}, allocator {alloc}: done")
    return rows


def run_gru(alloc: str, rounds: int = 7, sizes: dict = GRU, norms=GRU_NORMS, log=print) -> list[dict]:
    """One NormGRU layer per norm, fwd+bwd over `steps` time steps, per step; norms in turn each round."""
    from ..nn import NormGRU  # noqa: PLC0415 (the models' package; only this row needs it)
    from ..norms import build_normalization  # noqa: PLC0415

    torch.manual_seed(0)
    B, H, I, T = sizes["batch"], sizes["hidden"], sizes["input"], sizes["steps"]
    x = torch.randn(B, T, I)
    mask = torch.ones(B, T, dtype=torch.bool)
    options = {"prmsnorm": {"p": 0.0625}}
    layers = {norm: NormGRU(I, H, build_normalization(norm, options.get(norm, {}))) for norm in norms}
    cpu_clock = time.thread_time if torch.get_num_threads() == 1 else time.process_time

    def stmt(layer):
        def go():
            layer.zero_grad(set_to_none=True)
            out, _ = layer(x, mask)
            out.sum().backward()
        return go

    stmts = {norm: stmt(layer) for norm, layer in layers.items()}
    for s in stmts.values():
        s()
    wall = {norm: [] for norm in stmts}
    cpu_t = {norm: [] for norm in stmts}
    pairs = {norm: [] for norm in stmts}
    pairs_cpu = {norm: [] for norm in stmts}
    for _ in range(rounds):
        times = {}
        for norm, s in stmts.items():
            times[norm] = block_ms(s, 1, cpu_clock, settle=0)
            wall[norm].append(times[norm][0] / T)
            cpu_t[norm].append(times[norm][1] / T)
        for norm in stmts:
            pairs[norm].append(times[norm][0] / times["layernorm"][0])
            pairs_cpu[norm].append(times[norm][1] / times["layernorm"][1])
    rows = []
    for norm in stmts:
        row = _summary(f"NormGRU step, norm={norm}", wall[norm], cpu_t[norm], pairs[norm], pairs_cpu[norm],
                       wall["layernorm"], cpu_t["layernorm"])
        row.update(shape=f"GRU B{B} H{H} I{I} T{T}", allocator=alloc, mode="fwd+bwd per step", norm=norm)
        rows.append(row)
    log(f"  module table: GRU row, allocator {alloc}: done")
    return rows


def run(allocators=("default", "tuned"), rounds: int = 15, min_run_time: float = 0.05, compiled: bool = True,
        gru: bool = True, gru_rounds: int = 7, shapes=SHAPES, log=print) -> list[dict]:
    """Every allocator phase in order ('default' must come before 'tuned': tuning cannot be undone)."""
    rows = []
    for alloc in allocators:
        in_effect = allocator.apply(alloc)
        if alloc == "default" and in_effect != "default":
            raise RuntimeError("the default-allocator phase must run before the allocator is tuned")
        rows += run_shapes(alloc, shapes, rounds, min_run_time, compiled, log=log)
        if gru and alloc == allocators[-1]:
            rows += run_gru(alloc, gru_rounds, log=log)
    return rows


def _f(v: float | None, suffix: str = "x") -> str:
    return "-" if v is None else f"{v:.2f}{suffix}"


def markdown(rows: list[dict]) -> str:
    lines = ["| shape | allocator | call (fwd+bwd) | CPU ms | ratio of medians (CPU) | median of paired ratios "
             "(CPU; IQR) | wall ms | ratio of medians (wall) | median of paired ratios (wall; IQR) | vs compiled "
             "nn.LayerNorm (CPU; paired) |", "|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        compiled = "-"
        if "vs_compiled_layer_norm" in r:
            compiled = f"{r['vs_compiled_layer_norm']:.2f}x; {r['vs_compiled_layer_norm_paired']:.2f}x"
        lines.append(f"| {r['shape']} | {r['allocator']} | {r['call']} | {r['cpu_ms']:.3f} | {r['ratio_of_medians']:.2f}x | "
                     f"{r['median_paired_ratio']:.2f}x ({r['paired_q1']:.2f}-{r['paired_q3']:.2f}) | {r['ms']:.3f} | "
                     f"{r['ratio_of_medians_wall']:.2f}x | {r['median_paired_ratio_wall']:.2f}x "
                     f"({r['paired_wall_q1']:.2f}-{r['paired_wall_q3']:.2f}) | {compiled} |")
    return "\n".join(lines)


def _noise(r: dict, target: float) -> str:
    """'within noise' where the paired spread reaches across the target."""
    return "; within noise (the paired IQR spans the target)" if r["paired_q1"] <= target <= r["paired_q3"] else ""


def target_lines(rows: list[dict]) -> list[str]:
    """One line per target, with the floor measured beside it."""
    by = {(r["shape"], r["allocator"], r["call"]): r for r in rows}
    lines = []
    for (shape, alloc), target in TARGETS.items():
        r = by.get((shape, alloc, RMS_MODULE))
        if r is None:
            continue
        ratio = r["ratio_of_medians"]
        line = (f"{shape}, {alloc} allocator: RMSNorm module {ratio:.2f}x F.layer_norm (CPU time, ratio of medians; "
                f"paired {r['median_paired_ratio']:.2f}x; wall {r['ratio_of_medians_wall']:.2f}x) (target <= {target}x: "
                f"{verdict(ratio <= target)}{_noise(r, target)}")
        floor = by.get((shape, alloc, FLOOR))
        if floor is not None:
            line += floor_clause(ratio, floor["ratio_of_medians"], target, "with this allocator, which call pays "
                                 "page faults for its fresh outputs depends on glibc's trim heuristics, not on the kernels")
        direct = by.get((shape, alloc, "fused kernel, called directly"))
        if direct is not None:
            line += f"; the kernel called directly {direct['ratio_of_medians']:.2f}x"
        lines.append(line + ")")
    for r in rows:
        if r["call"] == COMPILED_RMS and "vs_compiled_layer_norm" in r:
            v = r["vs_compiled_layer_norm"]
            q1, q3 = r.get("compiled_q1", v), r.get("compiled_q3", v)
            noise = "; within noise (the paired IQR spans the target)" if q1 <= 1.0 <= q3 else ""
            lines.append(f"{r['shape']}, {r['allocator']} allocator: compiled RMSNorm {v:.2f}x compiled nn.LayerNorm "
                         f"(paired {r['vs_compiled_layer_norm_paired']:.2f}x, IQR {q1:.2f}-{q3:.2f}) (target <= 1.0x: "
                         f"{verdict(v <= 1.0)}{noise})")
    gru = {r["norm"]: r for r in rows if "norm" in r}
    if {"none", "layernorm", "rmsnorm"} <= set(gru):
        t_none, t_ln, t_rms = (gru[k]["cpu_ms"] for k in ("none", "layernorm", "rmsnorm"))
        share = (t_rms - t_none) / (t_ln - t_none) if t_ln > t_none else None
        line = (f"GRU step ({gru['rmsnorm']['shape']}, CPU ms): RMSNorm {t_rms:.2f} ms, LayerNorm {t_ln:.2f} ms, no norm "
                f"{t_none:.2f} ms: RMSNorm <= LayerNorm ({verdict(t_rms <= t_ln)}, paired "
                f"{gru['rmsnorm']['median_paired_ratio']:.2f}x{_noise(gru['rmsnorm'], 1.0)})")
        none = gru["none"]
        if share is None:
            line += ("; LayerNorm's step is no slower than no norm's here, so 'closer to no norm than to LayerNorm' "
                     "cannot be measured")
        else:
            line += (f"; RMSNorm's cost over no norm is {share:.2f} of LayerNorm's (closer to no norm than to "
                     f"LayerNorm, i.e. < 0.5: {verdict(share < 0.5)}")
            if none["paired_q1"] <= 1.0 <= none["paired_q3"]:
                line += (f"; within noise: no norm at all is {none['median_paired_ratio']:.2f}x LayerNorm's step, "
                         f"IQR {none['paired_q1']:.2f}-{none['paired_q3']:.2f}, which spans 1")
            line += ")"
        if "prmsnorm" in gru:
            line += f"; pRMSNorm {gru['prmsnorm']['cpu_ms']:.2f} ms"
        lines.append(line)
    return lines
