"""Each speed lever of the small recipes' training step on and off, side by side in one process.

The decisions it backs (docs/performance.md, "The floor"):
- LoopLinear: the recurrent loops (nn/gru.py, nn/lstm.py, the RNNSearch decoder) compute each per-step
  projection's weight gradient as one product over all steps; "off" calls the layer per step, so autograd
  adds one weight gradient per step.
- fused Adam: build_optimizer takes torch's fused Adam kernel; "off" is torch's default per-tensor loop.
- fused GRU cell: each GRU transition's state-side norms and gates as one C++ kernel forward and one
  backward (nn/fused_gru.py); "off" runs them op by op (`NormGRUCell.fused = False`).
- fused GRU loop: each direction of the encoder's GRU layer as one C++ autograd node, every step inside
  (nn/fused_gru.py `sequence`); "off" runs the layer step by step with the fused transition
  (`NormGRU.fused_loop = False`).
- fused decoder loop: the RNNSearch decoder's teacher-forced loop (conditional GRU with attention) as one
  C++ autograd node (nn/fused_cgru.py); "off" runs it step by step (`RNNSearch.fused_loop = False`).
- fused cross-entropy: the translation loss (log-softmax over the BPE vocabulary, label smoothing, NLL)
  and its gradient as one C++ kernel (nn/cross_entropy.py); "off" is F.cross_entropy.
LoopLinear and the fused GRU cell are measured with both fused loops off: the step-by-step path they speed
up is what the loops replace on CPU (and what runs elsewhere: GPU, torch.compile, autocast).
Rerun it after changing any of them.

    OMP_NUM_THREADS=1 python scripts/bench_levers.py --data-root <Multi30k folder> [--rounds 15]

Each round times every row with its lever on and then off (alternating, so load from other processes hits
both alike), as the thread's CPU time; the table gives medians over rounds and the median of the per-round
ratios on / off with its interquartile range. Sizes are the small recipes' (configs/task_scale/*/small.yaml)
on one fixed Multi30k batch (the parts as `bench floor` builds them); RMSNorm unless --norm.
"""
from __future__ import annotations

import argparse
import statistics
import time
from typing import Callable

import torch

from rmsnorm_repro import allocator
from rmsnorm_repro.bench.floor import rnnsearch_parts, small_sizes, step_row
from rmsnorm_repro.nn import LoopLinear, NormGRU, NormGRUCell, cross_entropy
from rmsnorm_repro.host import cpu_name
from rmsnorm_repro.tasks.translation.rnnsearch import RNNSearch

LOOP_LINEAR_CALL = LoopLinear.__call__


def loop_linear(on: bool) -> None:
    LoopLinear.__call__ = LOOP_LINEAR_CALL if on else (lambda self, layer, x: layer(x))


def fused_cell(on: bool) -> None:
    NormGRUCell.fused = on


def fused_loop(on: bool) -> None:
    NormGRU.fused_loop = on


def fused_decoder(on: bool) -> None:
    RNNSearch.fused_loop = on


def step_by_step(switch: Callable[[bool], None]) -> Callable[[bool], None]:
    """A lever of the step-by-step recurrent path, measured with the fused loops (which replace it) off."""
    def switch_alone(on: bool) -> None:
        fused_loop(False)
        fused_decoder(False)
        switch(on)
    return switch_alone


def fused_loss(on: bool) -> None:
    cross_entropy.fused = on


def adam_switch(run) -> Callable[[bool], None]:
    """Swaps the run's optimizer between build_optimizer's fused Adam and torch's loop (same settings)."""
    fused = run.optimizer
    group = {k: v for k, v in fused.param_groups[0].items() if k in ("lr", "betas", "eps", "weight_decay")}
    loop = type(fused)(run.params, **group, foreach=False)

    def switch(on: bool) -> None:
        run.optimizer = fused if on else loop
    return switch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-root", required=True, help="the Multi30k folder (train.en.gz, ...)")
    ap.add_argument("--norm", default="rmsnorm")
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()
    torch.set_num_threads(1)
    allocator.apply("tuned")
    data = ["data=multi30k", f"data.root={args.data_root}"]
    _, _, batch, lengths = small_sizes({"rnnsearch": data, "transformer": data})
    rnn_step, rnn = step_row("rnnsearch", args.norm, data)
    tf_step, tf = step_row("transformer", args.norm, data)
    length = lengths["rnnsearch"]
    parts = {r.part: r.call for r in rnnsearch_parts(rnn.model, args.norm, batch["rnnsearch"], length, length)}
    rnn_adam, tf_adam = adam_switch(rnn), adam_switch(tf)

    def every(on: bool) -> None:
        loop_linear(on)
        fused_cell(on)
        fused_loop(on)
        fused_decoder(on)
        fused_loss(on)
        rnn_adam(on)
    rows = [("GRU encoder layer", "fused GRU loop", parts["GRU encoder layer"], fused_loop),
            ("conditional GRU decoder", "fused decoder loop", parts["conditional GRU decoder"], fused_decoder)]
    stepwise = {"LoopLinear (step by step)": step_by_step(loop_linear),
                "fused GRU cell (step by step)": step_by_step(fused_cell)}
    rows += [(part, lever, call, switch) for part, call in parts.items() for lever, switch in stepwise.items()] + [
        (rnn_step.part, "fused GRU loop", rnn_step.call, fused_loop),
        (rnn_step.part, "fused decoder loop", rnn_step.call, fused_decoder),
        *((rnn_step.part, lever, rnn_step.call, switch) for lever, switch in stepwise.items()),
        (rnn_step.part, "fused cross-entropy", rnn_step.call, fused_loss),
        (rnn_step.part, "fused Adam", rnn_step.call, rnn_adam),
        (rnn_step.part, "all six", rnn_step.call, every),
        (tf_step.part, "fused cross-entropy", tf_step.call, fused_loss),
        (tf_step.part, "fused Adam", tf_step.call, tf_adam),
    ]
    times: dict[tuple[int, bool], list[float]] = {(i, on): [] for i in range(len(rows)) for on in (True, False)}
    for r in range(args.rounds + 1):
        for i, (_, _, call, switch) in enumerate(rows):
            for on in (True, False):
                every(True)
                tf_adam(True)
                switch(on)
                start = time.thread_time()
                call()
                if r:  # round 0 warms up
                    times[i, on].append((time.thread_time() - start) * 1e3)
    every(True)
    tf_adam(True)
    print(f"{cpu_name()}, torch {torch.__version__}, 1 thread, fp32, norm {args.norm}, {args.rounds} rounds "
          f"(thread CPU time); every other lever on\n")
    print("| part | lever | on ms | off ms | on / off [IQR] |\n|---|---|---:|---:|---:|")
    for i, (part, lever, _, _) in enumerate(rows):
        on, off = times[i, True], times[i, False]
        ratios = [a / b for a, b in zip(on, off)]
        q1, _, q3 = statistics.quantiles(ratios, n=4)
        print(f"| {part} | {lever} | {statistics.median(on):.1f} | {statistics.median(off):.1f} | "
              f"{statistics.median(ratios):.3f} [{q1:.3f}-{q3:.3f}] |")


if __name__ == "__main__":
    main()
