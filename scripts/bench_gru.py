"""Forward+backward time of one NormGRU layer per norm, side by side in one process.

The decision it backs: nn/gru.py hoists the input half (one GEMM and its norms) out of the time loop and
iterates with unbind (docs/performance.md, "Recurrent cells"); rerun it after changing the cell. The
paper-size cell row of `python -m rmsnorm_repro.bench --module` times the same layer at batch 80, H 1000.

    OMP_NUM_THREADS=1 python scripts/bench_gru.py                  # batch 80, T 20, H 256 and 1024
    OMP_NUM_THREADS=1 python scripts/bench_gru.py --hidden 256 --norms layernorm rmsnorm rmsnorm:impl=reference

Each round times one forward+backward of every variant in turn (alternating, so load from other
processes hits all of them alike); the table gives medians over rounds: wall ms per batch, per time
step, and process CPU ms per batch (a cross-check that other processes cannot inflate), and both
ratios to LayerNorm (trust the CPU one when the machine is busy). torch.nn.GRU (ATen's loop, no
norm) is shown for scale. Input size is H / 2 (the paper's 512-dim embeddings into a 1024-dim GRU).
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from rmsnorm_repro.nn import NormGRU
from rmsnorm_repro.norms import build_normalization


def _norm(spec: str):
    """'rmsnorm' or 'rmsnorm:impl=reference,p=0.0625' -> the factory."""
    name, _, opts = spec.partition(":")
    options = dict(kv.split("=", 1) for kv in opts.split(",")) if opts else {}
    return build_normalization(name, options)


def _variants(input_size: int, hidden: int, norms: list[str]):
    out = {}
    for spec in norms:
        out[spec] = NormGRU(input_size, hidden, _norm(spec))
    out["torch.nn.GRU"] = torch.nn.GRU(input_size, hidden, batch_first=True)
    return out


def _fwd_bwd(model, x, mask):
    if isinstance(model, torch.nn.GRU):
        out, _ = model(x)
    else:
        out, _ = model(x, mask)
    out.sum().backward()


def bench(batch: int, steps: int, hidden: int, norms: list[str], rounds: int, warmup: int = 3) -> list[dict]:
    torch.manual_seed(0)
    x = torch.randn(batch, steps, hidden // 2, requires_grad=False)
    mask = torch.ones(batch, steps, dtype=torch.bool)
    models = _variants(hidden // 2, hidden, norms)
    wall = {k: [] for k in models}
    cpu = {k: [] for k in models}
    for r in range(warmup + rounds):
        for name, model in models.items():
            model.zero_grad(set_to_none=True)
            w0, c0 = time.perf_counter(), time.process_time()
            _fwd_bwd(model, x, mask)
            w1, c1 = time.perf_counter(), time.process_time()
            if r >= warmup:
                wall[name].append((w1 - w0) * 1e3)
                cpu[name].append((c1 - c0) * 1e3)
    ln = "layernorm" if "layernorm" in models else None
    rows = []
    for name in models:
        w, c = statistics.median(wall[name]), statistics.median(cpu[name])
        rows.append({"hidden": hidden, "variant": name, "ms_per_batch": w, "ms_per_step": w / steps,
                     "cpu_ms_per_batch": c,
                     "wall_vs_layernorm": w / statistics.median(wall[ln]) if ln else float("nan"),
                     "cpu_vs_layernorm": c / statistics.median(cpu[ln]) if ln else float("nan")})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=80)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--hidden", type=int, nargs="+", default=[256, 1024])
    ap.add_argument("--norms", nargs="+", default=["none", "layernorm", "rmsnorm"])
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--flush-denormal", action="store_true",
                    help="flush subnormal floats to zero (1 thread only): they slowed the normalized cells' GEMMs 1.2-1.4x here")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(args.flush_denormal)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), batch {args.batch}, T {args.steps}, "
          f"fp32 fwd+bwd, medians of {args.rounds} alternating rounds, flush denormal {args.flush_denormal}")
    print("| H | variant | ms / batch | ms / step | CPU ms / batch | wall vs LN | CPU vs LN |")
    print("|---|---|---|---|---|---|---|")
    for hidden in args.hidden:
        for row in bench(args.batch, args.steps, hidden, args.norms, args.rounds):
            print(f"| {row['hidden']} | {row['variant']} | {row['ms_per_batch']:.1f} | {row['ms_per_step']:.2f} | "
                  f"{row['cpu_ms_per_batch']:.1f} | {row['wall_vs_layernorm']:.2f} | {row['cpu_vs_layernorm']:.2f} |")


if __name__ == "__main__":
    main()
