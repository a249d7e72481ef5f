"""Host work per recurrent time step on CUDA's paths, launches stubbed (no GPU needed): a GRU layer and an
LSTM step by step op by op against the same steps through the Triton cells (nn/triton_gru.py,
nn/triton_lstm.py), side by side in one process.

    OMP_NUM_THREADS=1 python scripts/bench_recurrent_host.py [--rounds 15] [--steps 32]

Tiny CPU tensors (batch 3, hidden 6) so that the arithmetic costs next to nothing and what is timed is what
a step costs the host: the ops' dispatch (op by op: ~4 us each here, a CUDA launch adds its own) or the
autograd.Function, its checks and allocations, with the Triton kernels replaced by a stub (their launch
cost is not in it). The C++ CPU loops are off, as they are on CUDA. Each round times forward+backward of
`--steps` steps on each path, alternating; the output gives the medians (thread CPU time per step) and the
median of the per-round ratios Triton / op by op with its interquartile range.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from triton_testing import Launches  # noqa: E402

from rmsnorm_repro.nn import NormGRU, NormGRUCell, fused_gru, triton_gru, triton_lstm  # noqa: E402
from rmsnorm_repro.nn.lstm import LSTMDirection, NormLSTM  # noqa: E402
from rmsnorm_repro.norms import build_normalization  # noqa: E402


def _as_on_cuda() -> None:
    """CPU tensors take the Triton paths (kernels stubbed); the C++ CPU kernels step aside, as on CUDA."""
    fused_gru.combine = lambda *args: None  # on CUDA it returns at its first check
    fused_gru.load = lambda: None
    triton_gru.runs_on = lambda t: True
    for module, names in ((triton_gru, ("_gru_forward", "_gru_backward")),
                          (triton_lstm, ("_lstm_forward", "_lstm_backward"))):
        for name in names:
            setattr(module, name, Launches())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--steps", type=int, default=32)
    args = parser.parse_args()
    torch.set_num_threads(1)
    _as_on_cuda()
    steps = args.steps
    x, mask = torch.randn(3, steps, 5), torch.ones(3, steps, dtype=torch.bool)
    layers = {"GRU layer": (lambda norms: NormGRU(5, 6, norms), lambda on: setattr(NormGRUCell, "fused", on)),
              "LSTM": (lambda norms: NormLSTM(5, 6, norms, max_steps=steps), lambda on: setattr(LSTMDirection, "fused", on))}
    for name, (build, switch) in layers.items():
        for norm in ("none", "layernorm", "rmsnorm"):
            model = build(build_normalization(norm))
            us = {True: [], False: []}
            for round_ in range(args.rounds + 1):  # round 0 warms up
                for triton in (True, False):
                    switch(triton)
                    start = time.thread_time()
                    for _ in range(5):
                        model(x, mask)[0].sum().backward()
                    if round_:
                        us[triton].append((time.thread_time() - start) / 5 / steps * 1e6)
            ratios = sorted(a / b for a, b in zip(us[True], us[False]))
            quartile = len(ratios) // 4
            print(f"{name}, {norm}: op by op {statistics.median(us[False]):.0f} us a step, Triton cell "
                  f"{statistics.median(us[True]):.0f} us (launches stubbed), ratio {statistics.median(ratios):.2f} "
                  f"[{ratios[quartile]:.2f}-{ratios[-1 - quartile]:.2f}]")


if __name__ == "__main__":
    main()
