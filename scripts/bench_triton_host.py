"""Host work per RMSNorm call on the CUDA Triton path, launches stubbed: this checkout against an earlier
revision's triton_rmsnorm.py, side by side in one process (no GPU needed).

    OMP_NUM_THREADS=1 python scripts/bench_triton_host.py --rev b64fd07 [--rounds 31] [--calls 200]

The revision's norms/fused/triton_rmsnorm.py is read with `git show` and loaded beside this checkout's.
Both kernels' launches are replaced by a stub, so what is timed is what a GPU call costs the host:
the autograd.Function, its allocations and checks, the sums. Each round times a block of fwd+bwd calls
(80x512 float32 with gain and bias, the gradient from the caller) of the old path, the new one and a
trivial autograd.Function (autograd's own floor); the output gives medians and the median of the
per-round ratios new / old with its interquartile range.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]


class _Stub:
    """kernel[grid](...) launches nothing."""

    def __getitem__(self, grid):
        return lambda *args, **kwargs: None


class _Trivial(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias):
        return torch.empty_like(x)

    @staticmethod
    def backward(ctx, dy):
        return dy, None, None


def _load_old(rev: str):
    source = subprocess.run(["git", "-C", str(REPO), "show", f"{rev}:rmsnorm_repro/norms/fused/triton_rmsnorm.py"],
                            capture_output=True, text=True, check=True).stdout
    path = Path(tempfile.mkdtemp()) / "triton_rmsnorm_old.py"
    path.write_text(source)
    # a module of the fused package, so that its relative imports resolve against this checkout's
    spec = importlib.util.spec_from_file_location("rmsnorm_repro.norms.fused.triton_rmsnorm_old", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rev", required=True, help="the earlier revision (a commit with norms/fused/triton_rmsnorm.py)")
    ap.add_argument("--rounds", type=int, default=31)
    ap.add_argument("--calls", type=int, default=200, help="fwd+bwd calls per timed block")
    args = ap.parse_args()
    sys.path.insert(0, str(REPO))
    from rmsnorm_repro.norms import fused
    from rmsnorm_repro.norms.fused import triton_rmsnorm as new

    old = _load_old(args.rev)
    for module in (old, new):
        module._rmsnorm_forward = module._rmsnorm_backward = _Stub()
    os.environ["TRITON_INTERPRET"] = "1"  # older paths accept CPU tensors only then (their per-call check)
    torch.cuda.is_available = lambda: True  # the dispatch chooses as on a GPU machine
    run_new = fused.kernel("auto", "cuda", torch.float32, torch.float32, 512, 512, False, True)[1]
    run_old = getattr(old, "rms_norm_or_reference", old.rms_norm)
    x = torch.randn(80, 512, requires_grad=True)
    w, b = torch.ones(512, requires_grad=True), torch.zeros(512, requires_grad=True)
    dy = torch.randn(80, 512)
    paths = {"old": lambda: run_old(x, w, b, 512, 1e-8, False), "new": lambda: run_new(x, w, b, 512, 1e-8, False),
             "trivial Function": lambda: _Trivial.apply(x, w, b)}

    def block(f) -> float:
        start = time.perf_counter()
        for _ in range(args.calls):
            torch.autograd.grad(f(), (x, w, b), dy, allow_unused=True)
        return (time.perf_counter() - start) / args.calls * 1e6

    for f in paths.values():
        block(f)  # warm-up
    times: dict[str, list[float]] = {name: [] for name in paths}
    ratios = []
    for _ in range(args.rounds):
        for name, f in paths.items():
            times[name].append(block(f))
        ratios.append(times["new"][-1] / times["old"][-1])
    ratios.sort()
    quartile = lambda q: ratios[int(q * (len(ratios) - 1))]  # noqa: E731
    for name, values in times.items():
        print(f"{name}: median {statistics.median(values):.0f} us per fwd+bwd")
    print(f"new / old, paired by round: median {statistics.median(ratios):.2f}, "
          f"quartiles {quartile(0.25):.2f}-{quartile(0.75):.2f}, {len(ratios)} rounds of {args.calls} calls")


if __name__ == "__main__":
    main()
