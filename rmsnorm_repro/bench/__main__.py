"""python -m rmsnorm_repro.bench [--kernels] [--steps] [--allocator tuned|default] [--threads N]

Writes results/speed/{kernels,steps}-<device>-<allocator>.{json,md} (device: cpu, or cpu-<N>threads
with --threads N > 1). Without --kernels/--steps it runs both.

Allocator: PyTorch's CPU allocator calls malloc directly, and glibc hands out large blocks as
fresh mmap'ed pages that fault on first touch, so a large new output costs more than the
arithmetic. `--allocator tuned` (the default, as in training: the `allocator` config key) sets
glibc's malloc to reuse freed memory (rmsnorm_repro.allocator); it applies to every implementation
alike and the output says which setting ran. `--allocator default` keeps glibc's.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import torch

from .. import allocator


def _environment(args) -> dict:
    return {
        "torch": torch.__version__, "cpu": platform.processor() or platform.machine(), "threads": torch.get_num_threads(),
        "allocator": allocator.in_effect(), "flush_denormal": args.flush_denormal, "GLIBC_TUNABLES": os.environ.get("GLIBC_TUNABLES"),
        "LD_PRELOAD": os.environ.get("LD_PRELOAD"), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "command": "python -m rmsnorm_repro.bench " + " ".join(sys.argv[1:]),
    }


def _write(out: Path, stem: str, env: dict, rows: list[dict], table: str, notes: list[str]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.json").write_text(json.dumps({"env": env, "notes": notes, "rows": rows}, indent=1) + "\n")
    header = [f"# {stem}", "", f"`{env['command']}`: torch {env['torch']}, {env['threads']} thread(s), "
              f"allocator {env['allocator']}, flush denormal {env['flush_denormal']}, {env['date']}.", ""]
    (out / f"{stem}.md").write_text("\n".join(header + [f"- {n}" for n in notes] + ["", table, ""]))
    print(table, flush=True)
    print(f"wrote {out / stem}.json and .md", flush=True)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m rmsnorm_repro.bench", description=__doc__.splitlines()[0])
    ap.add_argument("--kernels", action="store_true", help="kernel table (norm implementations x shapes)")
    ap.add_argument("--steps", action="store_true", help="step table (task x norm at paper sizes)")
    ap.add_argument("--allocator", choices=("tuned", "default"), default="tuned")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1: robust on a shared machine)")
    ap.add_argument("--rounds", type=int, default=15, help="round-robin repetitions (kernels); steps use --step-rounds")
    ap.add_argument("--min-run-time", type=float, default=0.05, help="seconds per timed block (kernels)")
    ap.add_argument("--tasks", default="", help="comma list (default: every task present)")
    ap.add_argument("--norms", default="", help="comma list (default: every norm a task supports)")
    ap.add_argument("--step-rounds", type=int, default=2)
    ap.add_argument("--step-count", type=int, default=3, help="timed steps per norm per round")
    ap.add_argument("--batch-fraction", type=float, default=0.1, help="fraction of the paper's batch (CPU time)")
    ap.add_argument("--flush-denormal", action="store_true", help="flush subnormal floats to zero (1 thread only; "
                    "they slowed the GEMMs of normalized GRU cells 1.2-1.4x in scripts/bench_gru.py)")
    ap.add_argument("--out", default="results/speed")
    args = ap.parse_args(argv)
    in_effect = allocator.apply(args.allocator)
    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(args.flush_denormal)
    device = "cpu" if args.threads == 1 else f"cpu-{args.threads}threads"  # file names: one table per setting
    do_kernels, do_steps = args.kernels or not args.steps, args.steps or not args.kernels
    out, env = Path(args.out), _environment(args)

    if do_kernels:
        # torch.compile's pool of compiler processes would otherwise stay behind and share the cores
        os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
        from . import kernels

        print(f"kernel table: {args.threads} thread(s), allocator {in_effect}", flush=True)
        copy = kernels.dram_copy_gbs()
        rows = kernels.run(rounds=args.rounds, min_run_time=args.min_run_time)
        notes = [f"copy bandwidth beyond cache (256 MiB, read + write): {copy:.1f} GB/s; '% of copy' is against a "
                 "copy of a tensor of the same shape timed in the same rounds",
                 "fwd+bwd includes allocating the output and every gradient; torch layer_norm has its bias, "
                 "RMSNorm has none (the paper's setting); eps 1e-8 outside the sqrt for the suite's RMSNorm",
                 "x * 2 (floor): a scalar multiply, whose forward+backward moves the least any normalization must "
                 "(read x, write y; read dy, write dx) and pays torch's per-call autograd cost: no RMSNorm can beat it",
                 f"medians of {args.rounds} round-robin rounds of ~{args.min_run_time * 1e3:.0f} ms blocks; ratios: medians "
                 "of each block over the torch layer_norm block timed just before it; CPU ms: thread CPU time"]
        table = kernels.markdown(rows) + "\n\nTargets (fwd+bwd):\n\n" + "\n".join(f"- {t}" for t in kernels.target_lines(rows))
        _write(out, f"kernels-{device}-{args.allocator}", {**env, "copy_gb_s": copy}, rows, table, notes)

    if do_steps:
        from . import steps

        present = steps.available_tasks()
        wanted = [t for t in args.tasks.split(",") if t] or present
        missing = [t for t in wanted if t not in present]
        tasks = [t for t in wanted if t in present]
        print(f"step table: tasks {', '.join(tasks) or 'none'}" + (f" (not available: {', '.join(missing)})" if missing else ""), flush=True)
        rows = steps.run(tasks, [n for n in args.norms.split(",") if n] or None, args.step_rounds, args.step_count,
                         args.batch_fraction)
        notes = [f"paper model sizes (scale=paper), batch = {args.batch_fraction} x the paper's (see the batch column), "
                 f"CPU fp32, synthetic data; median of {args.step_rounds} x {args.step_count} steps per norm, "
                 "norms in turn; a step = zero_grad + loss + backward + clip + Adam",
                 "overhead / LN's = (T_norm - T_none) / (T_layernorm - T_none), '-' where LayerNorm's overhead is under "
                 "2% of the no-norm step (within noise); paper ratio = its time / its LayerNorm time",
                 "without --flush-denormal, subnormal floats can make a norm look slow or fast: the reader's RMSNorm "
                 "0.80 x LayerNorm became 1.02 with them flushed (README, Speed)"]
        if missing:
            notes.append(f"tasks not available in this checkout: {', '.join(missing)}")
        table = steps.markdown(rows) + "\n\nTargets:\n\n" + "\n".join(f"- {t}" for t in steps.target_lines(rows))
        _write(out, f"steps-{device}-{args.allocator}", env, rows, table, notes)


if __name__ == "__main__":
    main()
