"""Should the fused CPU RMSNorm write an output with streaming stores? An A/B, side by side in one process.

    OMP_NUM_THREADS=1 python scripts/bench_streaming.py
    OMP_NUM_THREADS=1 python scripts/bench_streaming.py --shapes 4096x512 8192x1024 --rounds 9

Streaming (non-temporal) stores skip reading each destination line into the cache, so the norm
itself gets faster, but its output then is not in the cache for whatever reads it next. For each
shape this times forward+backward of the suite's RMSNorm against torch's layer_norm, followed by
nothing, by an elementwise consumer (tanh: memory-bound) or by a matrix product (compute-bound),
with streaming off and on (the kernel's threshold set to "never" / "always"), and prints the median
ratio to LayerNorm of each. The kernel's default (cpu.py) streams outputs of at least a quarter of
the last-level cache: below that, the cost to a memory-bound consumer outweighed the gain.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from rmsnorm_repro import allocator
from rmsnorm_repro.bench.kernels import block_ms
from rmsnorm_repro.norms import functional as fn
from rmsnorm_repro.norms.fused import cpu

NEVER = (1 << 63) - 1


def _ms(stmt, number: int) -> float:
    return block_ms(stmt, number, time.thread_time)[0]


def bench(n: int, d: int, rounds: int) -> dict[str, float]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, d, generator=g).requires_grad_()
    w, b = torch.ones(d, requires_grad=True), torch.zeros(d, requires_grad=True)
    dy, proj = torch.randn(n, d, generator=g), torch.randn(d, 256, generator=g) / d**0.5
    norms = {"layer_norm": lambda: F.layer_norm(x, (d,), w, b, 1e-5),
             "rms_norm": lambda: fn.rms_norm(x, w, None, 1.0, 1e-8, impl="fused")}
    consumers = {"none": lambda y: torch.autograd.grad(y, (x, w), dy, allow_unused=True),
                 "tanh": lambda y: torch.tanh(y).backward(dy),
                 "matmul": lambda y: (y @ proj).sum().backward()}
    number = max(3, 20_000_000 // (n * d))
    ext, ratios = cpu.load(), {}  # built and cached by main()
    for _ in range(rounds):
        for stream, threshold in (("off", NEVER), ("on", 0)):
            ext.set_stream_min_bytes(threshold)
            for name, consume in consumers.items():
                ln = _ms(lambda: consume(norms["layer_norm"]()), number)
                rms = _ms(lambda: consume(norms["rms_norm"]()), number)
                ratios.setdefault(f"{name}, streaming {stream}", []).append(rms / ln)
    return {key: statistics.median(values) for key, values in ratios.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", nargs="+", default=["1024x512", "4096x512", "8192x1024"])
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    allocator.apply("tuned")
    ext = cpu.load()
    if ext is None:
        raise SystemExit("the fused CPU kernel could not be built here (see the warning above)")
    default = ext.stream_min_bytes()
    print(f"RMSNorm / LayerNorm, forward+backward with its consumer; {torch.get_num_threads()} thread(s); "
          f"default threshold {default / 2**20:.0f} MiB")
    try:
        for shape in args.shapes:
            n, d = (int(v) for v in shape.split("x"))
            mib = n * d * 4 / 2**20
            cells = "  ".join(f"{k}: {v:.2f}" for k, v in bench(n, d, args.rounds).items())
            print(f"{shape} ({mib:.0f} MiB, {'streams' if n * d * 4 >= default else 'does not stream'} by default)  {cells}",
                  flush=True)
    finally:
        ext.set_stream_min_bytes(default)


if __name__ == "__main__":
    main()
