"""LoopLinear on and off, side by side in one process: the small recipes' recurrent parts and training step.

The decision it backs: the recurrent loops (nn/gru.py, nn/lstm.py, the RNNSearch decoder) call their
per-step projections through LoopLinear, which computes each weight's gradient as one product over all
steps instead of one per step added up (docs/performance.md, "The floor"). "off" replaces LoopLinear's
call with the plain `layer(x)` in the same process. Rerun it after changing the loops.

    OMP_NUM_THREADS=1 python scripts/bench_loop_linear.py --data-root <Multi30k folder> [--rounds 15]

Each round times every part with LoopLinear on and then off (alternating, so load from other processes
hits both alike), as the thread's CPU time; the table gives medians over rounds and the median of the
per-round ratios on / off with its interquartile range. Sizes are the small RNNSearch recipe's
(configs/task_scale/rnnsearch/small.yaml), on one fixed Multi30k batch; RMSNorm unless --norm.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from rmsnorm_repro import allocator
from rmsnorm_repro.bench.floor import rnnsearch_parts, small_sizes, step_row
from rmsnorm_repro.nn import LoopLinear
from rmsnorm_repro.runner.setup import cpu_name

PLAIN = lambda self, layer, x: layer(x)  # noqa: E731  (LoopLinear off: autograd adds one gradient per step)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-root", required=True, help="the Multi30k folder (train.en.gz, ...)")
    ap.add_argument("--norm", default="rmsnorm")
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()
    torch.set_num_threads(1)
    allocator.apply("tuned")
    overrides = {"rnnsearch": ["data=multi30k", f"data.root={args.data_root}"], "transformer": []}
    _, _, batch, lengths = small_sizes(overrides)
    row, run = step_row("rnnsearch", args.norm, overrides["rnnsearch"])
    length = lengths["rnnsearch"]
    parts = {r.part: r.call for r in rnnsearch_parts(run.model, args.norm, batch["rnnsearch"], length, length)}
    parts["RNNSearch training step"] = row.call
    on_call = LoopLinear.__call__
    times = {(p, mode): [] for p in parts for mode in ("on", "off")}
    for r in range(args.rounds + 1):
        for part, call in parts.items():
            for mode, method in (("on", on_call), ("off", PLAIN)):
                LoopLinear.__call__ = method
                start = time.thread_time()
                call()
                if r:  # round 0 warms up
                    times[part, mode].append((time.thread_time() - start) * 1e3)
    LoopLinear.__call__ = on_call
    print(f"{cpu_name()}, torch {torch.__version__}, 1 thread, fp32, norm {args.norm}, {args.rounds} rounds "
          f"(thread CPU time)\n")
    print("| part | LoopLinear on ms | off ms | on / off [IQR] |\n|---|---:|---:|---:|")
    for part in parts:
        on, off = times[part, "on"], times[part, "off"]
        ratios = [a / b for a, b in zip(on, off)]
        q1, _, q3 = statistics.quantiles(ratios, n=4)
        print(f"| {part} | {statistics.median(on):.1f} | {statistics.median(off):.1f} | "
              f"{statistics.median(ratios):.3f} [{q1:.3f}-{q3:.3f}] |")


if __name__ == "__main__":
    main()
