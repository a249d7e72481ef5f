"""Per-call cost of the ways PyTorch offers to expose the fused CPU kernel with its backward.

    OMP_NUM_THREADS=1 python scripts/bench_binding.py [--rounds 31] [--out results/speed/binding-cpu.md]

The same C++ forward and backward (rmsnorm_cpu.cpp) behind each binding:
  pybind11 + C++ autograd::Function   what the suite ships (cpu.load().rms_norm)
  TORCH_LIBRARY op + C++ Function     the same Function as the Autograd kernel of a dispatcher op
                                      (built once with -DRMSNORM_TORCH_LIBRARY), called as torch.ops.<ns>.rms_norm
  torch.autograd.Function (Python)    Python forward/backward around the C++ forward and backward
  torch.library.custom_op             custom_op + register_autograd + register_fake around them
and, for scale, torch's F.layer_norm (with weight and bias), x * 2 and the suite's RMSNorm module
(the implementation chosen once) beside a module that dispatches on every call (the old path).

At 1x8 the kernels do almost nothing, so the time is the cost per call: forward without grad,
forward recording the graph, forward+backward (y.backward(dy), grads cleared as zero_grad does).
80x2048 (one GRU step of RNNSearch) shows what it adds up to. Thread CPU time, medians of
interleaved rounds; per binding also whether it runs under autocast (bf16), torch.compile
(fullgraph, aot_eager) and torch.export by itself (the suite's module traces the reference there).
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from rmsnorm_repro.norms import RMSNorm, formulas, fused
from rmsnorm_repro.norms.fused import cpu
from rmsnorm_repro.host import cpu_name

NS = "rmsnorm_repro_bench"


def bindings(ext, lib_ext):
    """name -> f(x, w, k) for the four ways to call the kernel."""

    class PythonFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, w, k):
            y, stats = ext.forward(x, w, None, k, 1e-8, False)
            ctx.save_for_backward(x, w, stats)
            ctx.k = k
            return y

        @staticmethod
        def backward(ctx, dy):
            x, w, stats = ctx.saved_tensors
            dx, dw, _ = ext.backward(dy, x, w, None, stats, ctx.k, ctx.needs_input_grad[0], ctx.needs_input_grad[1], False)
            return dx, dw, None

    @torch.library.custom_op(f"{NS}::custom_forward", mutates_args=())
    def custom_forward(x: torch.Tensor, w: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        return ext.forward(x, w, None, k, 1e-8, False)

    @custom_forward.register_fake
    def _(x, w, k):
        n = x.numel() // x.shape[-1]
        return torch.empty_like(x), x.new_empty((2, n), dtype=torch.float64 if x.dtype == torch.float64 else torch.float32)

    @torch.library.custom_op(f"{NS}::custom_backward", mutates_args=())
    def custom_backward(dy: torch.Tensor, x: torch.Tensor, w: torch.Tensor, stats: torch.Tensor,
                        k: int) -> tuple[torch.Tensor, torch.Tensor]:
        dx, dw, _ = ext.backward(dy, x, w, None, stats, k, True, True, False)
        return dx, dw

    @custom_backward.register_fake
    def _(dy, x, w, stats, k):
        return torch.empty_like(x), torch.empty_like(w)

    def setup_context(ctx, inputs, output):
        x, w, k = inputs
        ctx.save_for_backward(x, w, output[1])
        ctx.k = k

    def custom_autograd(ctx, dy, _dstats):
        x, w, stats = ctx.saved_tensors
        dx, dw = custom_backward(dy, x, w, stats, ctx.k)
        return dx, dw, None

    custom_forward.register_autograd(custom_autograd, setup_context=setup_context)
    out = {"pybind11 + C++ autograd::Function (kept)": lambda x, w, k: ext.rms_norm(x, w, None, k, 1e-8, False)}
    if lib_ext is not None:
        op = getattr(torch.ops, NS).rms_norm.default
        torch.library.register_fake(f"{NS}::rms_norm")(lambda x, w, b, k, eps, eps_inside: torch.empty_like(x))
        out["TORCH_LIBRARY op + C++ autograd::Function"] = lambda x, w, k: op(x, w, None, k, 1e-8, False)
    out["torch.autograd.Function (Python) over C++ fwd/bwd"] = lambda x, w, k: PythonFunction.apply(x, w, k)
    out["torch.library.custom_op + register_autograd"] = lambda x, w, k: custom_forward(x, w, k)[0]
    return out


class PerCallDispatch(RMSNorm):
    """The module as it was: the implementation looked up on every call (functional dispatch)."""

    def forward(self, x):
        return fused.rms_norm(x, self.weight, self.bias, self.k, self.eps, self.eps_inside, self.impl)


def works(f, d: int) -> dict[str, str]:
    """Whether binding f runs (and agrees with eager) under autocast, torch.compile(fullgraph) and export."""
    x = torch.randn(4, d)
    w = torch.rand(d) + 0.5
    want = f(x, w, d)
    # exact: float64 y and gradients against the reference formulas
    xd, wd, dy = x.double().requires_grad_(), w.double().requires_grad_(), torch.randn(4, d, dtype=torch.float64)
    got = [f(xd, wd, d)]
    got += torch.autograd.grad(got[0], (xd, wd), dy)
    ref = [formulas.rms_norm(xd, wd, None, d, 1e-8, False)]
    ref += torch.autograd.grad(ref[0], (xd, wd), dy)
    out = {"exact": "yes" if all(torch.allclose(a, r, rtol=1e-12, atol=1e-12) for a, r in zip(got, ref)) else "NO"}
    try:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = f(torch.nn.functional.linear(x, torch.eye(d)), w, d)  # bf16 activations, fp32 gain
        out["autocast"] = "yes" if torch.allclose(y.float(), want, rtol=2e-2, atol=2e-2) else "wrong result"
    except Exception as e:  # noqa: BLE001 (reported in the table)
        out["autocast"] = f"no ({type(e).__name__})"
    try:
        torch._dynamo.reset()
        xg = x.clone().requires_grad_()
        y = torch.compile(lambda x: f(x, w, d), fullgraph=True, backend="aot_eager")(xg)
        y.sum().backward()
        out["compile"] = "yes" if torch.allclose(y, want, rtol=1e-5, atol=1e-5) else "wrong result"
    except Exception as e:  # noqa: BLE001
        out["compile"] = f"no ({type(e).__name__})"
    try:
        class M(torch.nn.Module):
            def forward(self, x):
                return f(x, w, d)

        ep = torch.export.export(M(), (x,))
        out["export"] = "yes" if torch.allclose(ep.module()(x), want, rtol=1e-5, atol=1e-5) else "wrong result"
    except Exception as e:  # noqa: BLE001
        out["export"] = f"no ({type(e).__name__})"
    return out


def time_rounds(stmts: dict, rounds: int, block_s: float = 0.02) -> dict[str, list[float]]:
    """Thread-CPU microseconds per call, one block per statement per round, statements interleaved."""
    number = {}
    for key, stmt in stmts.items():
        for _ in range(20):
            stmt()
        start, n = time.thread_time(), 0
        while time.thread_time() - start < block_s / 2:
            stmt()
            n += 1
        number[key] = max(1, 2 * n)
    res = {key: [] for key in stmts}
    for _ in range(rounds):
        for key, stmt in stmts.items():
            for _ in range(3):
                stmt()
            start = time.thread_time()
            for _ in range(number[key]):
                stmt()
            res[key].append((time.thread_time() - start) / number[key] * 1e6)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=31)
    ap.add_argument("--out", default="results/speed/binding-cpu.md")
    args = ap.parse_args()
    torch.set_num_threads(1)
    load_start = os.getloadavg()[0]
    ext = cpu.load()
    if ext is None:
        sys.exit("the fused CPU kernel cannot be built here")
    lib_ext = cpu.build("rmsnorm_repro_cpu_lib", (f"-DRMSNORM_TORCH_LIBRARY={NS}",))
    calls = bindings(ext, lib_ext)
    rows, checks = [], {name: works(f, 8) for name, f in calls.items()}
    for n, d in ((1, 8), (80, 2048)):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(n, d, generator=g).requires_grad_()
        dy = torch.randn(n, d, generator=g)
        w = torch.ones(d, requires_grad=True)
        b = torch.zeros(d, requires_grad=True)
        module, per_call, layer_norm = RMSNorm(d), PerCallDispatch(d), torch.nn.LayerNorm(d)
        fns = {name: (lambda f=f: f(x, w, d)) for name, f in calls.items()}
        fns["RMSNorm module (kernel chosen once)"] = lambda: module(x)
        fns["RMSNorm module, dispatch on every call (before)"] = lambda: per_call(x)
        fns["torch F.layer_norm (weight, bias)"] = lambda: F.layer_norm(x, (d,), w, b, 1e-5)
        fns["torch nn.LayerNorm module"] = lambda: layer_norm(x)
        fns["x * 2 (floor)"] = lambda: x * 2.0
        params = [w, b, module.weight, per_call.weight, layer_norm.weight, layer_norm.bias]

        def fwd_bwd(f):
            def stmt():
                f().backward(dy)
                x.grad = None
                for p in params:
                    p.grad = None
            return stmt

        def fwd_no_grad(f):
            def stmt():
                with torch.no_grad():
                    f()
            return stmt

        stmts = {}
        for name, f in fns.items():
            if (n, d) == (1, 8):
                stmts[(name, "fwd, no grad")] = fwd_no_grad(f)
                stmts[(name, "fwd, graph")] = f
            stmts[(name, "fwd+bwd")] = fwd_bwd(f)
        res = time_rounds(stmts, args.rounds)
        for (name, mode), v in res.items():
            q = statistics.quantiles(v, n=4)
            rows.append({"shape": f"{n}x{d}", "name": name, "mode": mode, "us": statistics.median(v), "q1": q[0], "q3": q[2]})
    lines = [f"# Per-call cost of the kernel's bindings ({platform.processor() or platform.machine()}, "
             f"{cpu_name()}, torch {torch.__version__}, 1 thread)", "",
             f"`python scripts/bench_binding.py`, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: thread CPU "
             f"microseconds per call, median (interquartile range) of {args.rounds} interleaved rounds. fwd+bwd: "
             "y.backward(dy), gradients cleared as zero_grad(set_to_none=True) does. The autograd engine's fixed "
             f"cost of a backward call is in every fwd+bwd row alike. Machine load (1-minute load average) "
             f"{load_start:.1f} at the start, {os.getloadavg()[0]:.1f} at the end, on {os.cpu_count()} cores.", ""]
    modes = ["fwd, no grad", "fwd, graph", "fwd+bwd"]
    lines += ["| binding / call | " + " | ".join(f"1x8 {m}" for m in modes) + " | 80x2048 fwd+bwd | exact (fp64) | autocast | compile (fullgraph) | export |",
              "|---|" + "---:|" * (len(modes) + 1) + "---|---|---|---|"]
    table = {(r["shape"], r["name"], r["mode"]): r for r in rows}
    for name in dict.fromkeys(r["name"] for r in rows):
        cells = []
        for shape, mode in [("1x8", m) for m in modes] + [("80x2048", "fwd+bwd")]:
            r = table.get((shape, name, mode))
            cells.append(f"{r['us']:.1f} ({r['q1']:.1f}-{r['q3']:.1f})" if r else "-")
        c = checks.get(name, {})
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {c.get('exact', '-')} | {c.get('autocast', '-')} | {c.get('compile', '-')} | {c.get('export', '-')} |")
    lines += ["", "exact: y and both gradients in float64 against the reference formulas (1e-12). autocast, compile, "
              "export: the binding called by itself (compile: fullgraph, aot_eager backend). The suite's RMSNorm module "
              "runs under all of them and under DDP (tests/test_fused.py): it calls the kept binding in eager mode, "
              "the kernel as torch.library ops (norms/fused/ops.py) under torch.compile on CPU, and the reference "
              "formulas under torch.export."]
    text = "\n".join(lines) + "\n"
    print(text)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
