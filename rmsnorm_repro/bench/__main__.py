"""python -m rmsnorm_repro.bench [--kernels] [--steps] [--module] [--allocator tuned|default] [--threads N]
       [--precision fp32|bf16]
       python -m rmsnorm_repro.bench --gpu [--tiny] [--tasks ...] [--norms ...] [--out DIR]   (make gpu-check)
       python -m rmsnorm_repro.bench --profile task=<task> [scale=mini|paper]
       python -m rmsnorm_repro.bench floor [--threads 1,2] [--rounds 5] [--data-root DIR]   (make speed-floor)

Writes results/speed/{kernels,steps}-<device>[-bf16]-<allocator>.{json,md} (device: cpu, or cpu-<N>threads
with --threads N > 1; -bf16: --precision bf16, autocast's mix: bf16 activations, float32 gains and
weights) and module-<device>.{json,md} (--module: the modules as users call them, glibc's allocator as
it comes and then tuned, compiled rows and a GRU step; bench/module.py). Without
--kernels/--steps/--module it runs the kernel and step tables.

Allocator: PyTorch's CPU allocator calls malloc directly, and glibc hands out large blocks as
fresh mmap'ed pages that fault on first touch, so a large new output costs more than the
arithmetic. `--allocator tuned` (the default, as in training: the `allocator` config key) sets
glibc's malloc to reuse freed memory (rmsnorm_repro.allocator); it applies to every implementation
alike and the output says which setting ran. `--allocator default` keeps glibc's.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import torch

from .. import allocator
from ..atomic import cannot_write
from ..host import cpu_name
from .tables import environment, write_table


def _bad_arguments(args) -> str | None:
    """What is wrong with the arguments, in one line, or None: checked before anything is timed or written."""
    from ..norms import NORM_NAMES
    from ..tasks import TASKS

    for name in ("gru_rounds", "threads", "rounds", "step_rounds", "step_count"):
        if getattr(args, name) < 1:
            return f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}"
    if not args.min_run_time > 0:
        return f"--min-run-time must be a positive number of seconds, got {args.min_run_time}"
    if not 0 < args.batch_fraction <= 1:
        return f"--batch-fraction must be in (0, 1], got {args.batch_fraction}"
    for flag, given, known in (("--tasks", args.tasks, TASKS), ("--norms", args.norms, NORM_NAMES)):
        unknown = [n for n in given.split(",") if n and n not in known]
        if unknown:
            return f"{flag}: unknown {', '.join(unknown)}; choose from {', '.join(known)}"
    return None


def _without_out(argv: list[str]) -> list[str]:
    """The arguments as a report states them: --out's folder (a path of this machine) as <out>."""
    said = list(argv)
    for i, arg in enumerate(said):
        if arg.startswith("--out="):
            said[i] = "--out=<out>"
        elif arg == "--out" and i + 1 < len(said):
            said[i + 1] = "<out>"
    return said


def _unwritable(out: Path) -> str | None:
    """Why the tables could not be written to `out`, asked before minutes of timing, else None."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out):
            pass
    except OSError as err:
        return cannot_write(err, "choose a folder you can write to with --out")
    return None


def main(argv: list[str] | None = None) -> int | None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["floor"]:  # the floor table (bench/floor.py): each part of a small step beside its GEMMs alone
        from . import floor

        return floor.main(argv[1:])
    ap = argparse.ArgumentParser(prog="python -m rmsnorm_repro.bench", description=__doc__.splitlines()[0])
    ap.add_argument("--kernels", action="store_true", help="kernel table (norm implementations x shapes)")
    ap.add_argument("--steps", action="store_true", help="step table (task x norm at paper sizes)")
    ap.add_argument("--module", action="store_true", help="module table: RMSNorm(d)(x) fwd+bwd vs F.layer_norm, "
                    "default then tuned allocator, compiled rows, GRU step (ignores --allocator)")
    ap.add_argument("--no-compile", action="store_true", help="module table without the compiled rows")
    ap.add_argument("--no-gru", action="store_true", help="module table without the GRU row")
    ap.add_argument("--gru-rounds", type=int, default=21)
    ap.add_argument("--gpu", action="store_true", help="the one-shot GPU check (bench/gpu_check.py): a smoke stage, "
                    "then the kernel and per-step tables (--tasks, --norms honoured); writes <out>/gpu-*.md, .json, .log")
    ap.add_argument("--tiny", action="store_true", help="--gpu at tiny sizes, on CPU without a GPU (the tests run it)")
    ap.add_argument("--profile", nargs="+", metavar="KEY=VALUE", help="task=<task> [scale=mini|paper]: share of "
                    "step time in normalization ops (bench/profile.py); writes results/speed/profile-*.md")
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
    ap.add_argument("--precision", choices=("fp32", "bf16"), default="fp32",
                    help="kernels and steps: bf16 = what train.precision=bf16 runs (autocast: bf16 activations, float32 "
                    "gains; matmuls in bf16, which only CPUs with AMX or AVX512-BF16 run fast)")
    ap.add_argument("--out", default="results/speed")
    args = ap.parse_args(argv)
    bad = _bad_arguments(args) or _unwritable(Path(args.out))
    if bad:
        print(f"error: {bad}", file=sys.stderr, flush=True)
        return 2
    if args.gpu:
        if args.tiny and not torch.cuda.is_available():
            os.environ.setdefault("TRITON_INTERPRET", "1")  # before Triton is imported: its kernels run on CPU tensors
        from . import gpu_check

        return gpu_check.main(args.out, tiny=args.tiny, tasks=[t for t in args.tasks.split(",") if t] or None,
                              norms=[n for n in args.norms.split(",") if n] or None,
                              command="python -m rmsnorm_repro.bench " + " ".join(_without_out(argv)))
    if args.profile:
        from . import profile

        return profile.main(args.profile, args.out)
    if args.module:
        return _module(args)
    in_effect = allocator.apply(args.allocator)
    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(args.flush_denormal)
    device = "cpu" if args.threads == 1 else f"cpu-{args.threads}threads"  # file names: one table per setting
    device += "-bf16" if args.precision == "bf16" else ""
    do_kernels, do_steps = args.kernels or not args.steps, args.steps or not args.kernels
    out, env = Path(args.out), environment(args)

    if do_kernels:
        # torch.compile's pool of compiler processes would otherwise stay behind and share the cores
        os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
        from . import kernels

        print(f"kernel table: {args.threads} thread(s), allocator {in_effect}", flush=True)
        copy = kernels.dram_copy_gbs()
        rows = kernels.run(rounds=args.rounds, min_run_time=args.min_run_time,
                           dtype=torch.bfloat16 if args.precision == "bf16" else torch.float32)
        notes = [f"copy bandwidth beyond cache (256 MiB, read + write): {copy:.1f} GB/s; '% of copy' is against a "
                 "copy of a tensor of the same shape timed in the same rounds",
                 "fwd+bwd includes allocating the output and every gradient; torch layer_norm has its bias, "
                 "RMSNorm has none (the paper's setting); eps 1e-8 outside the sqrt for the suite's RMSNorm",
                 "x * 2 (floor): a scalar multiply, whose forward+backward moves the least any normalization must "
                 "(read x, write y; read dy, write dx) and pays torch's per-call autograd cost: no RMSNorm can beat it",
                 f"x, dy and outputs {args.precision}, gain and bias float32 (autocast's mix)" if args.precision == "bf16"
                 else "every tensor float32",
                 f"medians of {args.rounds} round-robin rounds of ~{args.min_run_time * 1e3:.0f} ms blocks; ratios: medians "
                 "of each block over the torch layer_norm block timed just before it; CPU ms: thread CPU time"]
        table = kernels.markdown(rows) + "\n\nTargets (fwd+bwd):\n\n" + "\n".join(f"- {t}" for t in kernels.target_lines(rows))
        write_table(out, f"kernels-{device}-{args.allocator}", {**env, "copy_gb_s": copy}, rows, table, notes)

    if do_steps:
        from . import steps

        present = steps.available_tasks()
        wanted = [t for t in args.tasks.split(",") if t] or present
        missing = [t for t in wanted if t not in present]
        tasks = [t for t in wanted if t in present]
        print(f"step table: tasks {', '.join(tasks) or 'none'}" + (f" (not available: {', '.join(missing)})" if missing else ""), flush=True)
        rows = steps.run(tasks, [n for n in args.norms.split(",") if n] or None, args.step_rounds, args.step_count,
                         args.batch_fraction, args.precision)
        notes = [f"paper model sizes (scale=paper), batch = {args.batch_fraction} x the paper's (see the batch column), "
                 f"CPU {args.precision}" + (" (autocast: norms compute in float32)" if args.precision == "bf16" else "")
                 + f", synthetic data; median of {args.step_rounds} x {args.step_count} steps per norm, "
                 "norms in turn; a step = zero_grad + loss + backward + clip + Adam",
                 "overhead / LN's = (T_norm - T_none) / (T_layernorm - T_none), '-' where LayerNorm's overhead is under "
                 "2% of the no-norm step (within noise); paper ratio = its time / its LayerNorm time",
                 "without --flush-denormal, subnormal floats can make a norm look slow or fast: the reader's RMSNorm "
                 "0.80 x LayerNorm became 1.02 with them flushed (README, Speed)"]
        if missing:
            notes.append(f"tasks not available in this checkout: {', '.join(missing)}")
        table = steps.markdown(rows) + "\n\nTargets:\n\n" + "\n".join(f"- {t}" for t in steps.target_lines(rows))
        write_table(out, f"steps-{device}-{args.allocator}", env, rows, table, notes)


def _module(args) -> None:
    """The module table: both allocator phases in this process, default first (bench/module.py)."""
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(args.flush_denormal)
    from . import module

    device = "cpu" if args.threads == 1 else f"cpu-{args.threads}threads"
    print(f"module table: {args.threads} thread(s), glibc's allocator as it comes, then tuned", flush=True)
    if os.environ.get("GLIBC_TUNABLES") or os.environ.get("LD_PRELOAD"):
        print("note: GLIBC_TUNABLES / LD_PRELOAD is set, so the 'default' phase is not glibc as it comes", flush=True)
    load_start = os.getloadavg()[0]
    rows = module.run(rounds=args.rounds, min_run_time=args.min_run_time, compiled=not args.no_compile,
                      gru=not args.no_gru, gru_rounds=args.gru_rounds)
    load_end = os.getloadavg()[0]
    env = {**environment(args), "allocator": "default, then tuned (both phases in this process)"}
    g = module.GRU
    notes = [f"CPU: {cpu_name()}; fp32; each call as users make it: y = norm(x); y.backward(dy); gradients "
             "cleared (zero_grad(set_to_none=True)); every output and gradient is a fresh tensor",
             "times: thread CPU time (1 thread), which time taken by other processes or VMs on a shared machine does "
             "not inflate, and wall time beside it; the targets read the CPU-time ratio of medians",
             "baseline: torch F.layer_norm with weight and bias; RMSNorm: the suite's module (gain, no bias, eps 1e-8 "
             "outside the sqrt), the implementation chosen once (fused-cpu here); 'fused kernel, called directly': "
             "the same kernel without the module; x * 2: the floor no norm can beat",
             f"{args.rounds} rounds of ~{args.min_run_time * 1e3:.0f} ms blocks, each block right after a block of "
             "F.layer_norm; ratio of medians = median ms / F.layer_norm's median ms; median of paired ratios = "
             "median over rounds of (block / the F.layer_norm block just before it), IQR in brackets",
             "allocator: glibc as it comes (default), then tuned in the same process (rmsnorm_repro.allocator: "
             "malloc reuses freed memory; the same for every call compared)",
             "compiled rows: torch.compile(fullgraph=True, dynamic=False) of the RMSNorm module (on CPU its graph "
             "calls the fused kernel as two custom ops, norms/fused/ops.py) and of nn.LayerNorm (Inductor's code), both "
             "compiled; at 80x2048 both pay torch.compile's own cost per call of a compiled module",
             f"GRU row: one NormGRU layer (nn/gru.py: four norms per step, input part hoisted), batch {g['batch']}, "
             f"H {g['hidden']}, input {g['input']}, {g['steps']} steps, fwd+bwd of out.sum(), ms per time step, "
             f"{args.gru_rounds} rounds, norms in turn (tuned allocator); flush denormal {args.flush_denormal}",
             f"machine load (1-minute load average) {load_start:.1f} at the start, {load_end:.1f} at the end, on "
             f"{os.cpu_count()} cores: other processes ran beside this one"]
    table = module.markdown(rows) + "\n\nTargets:\n\n" + "\n".join(f"- {t}" for t in module.target_lines(rows))
    write_table(Path(args.out), f"module-{device}", env, rows, table, notes)


if __name__ == "__main__":
    sys.exit(main())
