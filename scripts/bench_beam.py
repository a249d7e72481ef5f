"""Beam-search decoding time with the source state left in place against reordered every step, side by side.

The decision it backs: tasks/translation/beam.py does not reorder `model.source_state` (encoder output,
cross-attention keys/values, masks) at each step, because a step only permutes the K rows of a
sentence, which hold the same source tensors. The models are the scale=small sizes
(configs/task_scale/<task>/small.yaml) with random weights, on random sources of Multi30k's lengths.

    OMP_NUM_THREADS=1 python scripts/bench_beam.py                       # both models, beam 4, 32 sentences
    OMP_NUM_THREADS=1 python scripts/bench_beam.py --task transformer --rounds 9

Each round decodes the same batch both ways in turn (alternating, so load from other processes hits
both alike) and checks the hypotheses are identical; the table gives the median wall ms per batch over
rounds, its min-max, and the median of the per-round ratios.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch
from hydra import compose, initialize_config_dir

from rmsnorm_repro.norms import build_normalization
from rmsnorm_repro.paths import configs_dir
from rmsnorm_repro.tasks.translation.beam import beam_search
from rmsnorm_repro.tasks.translation.rnnsearch import RNNSearch
from rmsnorm_repro.tasks.translation.transformer import Transformer

VOCAB = 8000  # the small tier's joint BPE


def build(task: str) -> torch.nn.Module:
    with initialize_config_dir(str(configs_dir()), version_base=None):
        cfg = compose("train", overrides=[f"task={task}", "scale=small", "norm=rmsnorm"])
    cls = Transformer if task == "transformer" else RNNSearch
    return cls(cfg.task.model, VOCAB, 0, build_normalization("rmsnorm")).eval()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", choices=("transformer", "rnnsearch"), nargs="+", default=["transformer", "rnnsearch"])
    ap.add_argument("--sentences", type=int, default=32)
    ap.add_argument("--beam", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    print(f"{torch.get_num_threads()} thread(s), beam {args.beam}, {args.sentences} sentences, {args.rounds} rounds")
    print("| model | source state | median ms | min-max ms | median ratio to reordered |")
    print("|---|---|---:|---:|---:|")
    for task in args.task:
        torch.manual_seed(0)
        model = build(task)
        lengths = torch.randint(6, 25, (args.sentences,))  # Multi30k's sources: ~13 tokens, up to ~40
        src = torch.randint(4, VOCAB, (args.sentences, int(lengths.max())))
        mask = torch.arange(src.size(1))[None] < lengths[:, None]
        kept_ms, reordered_ms = [], []

        def timed() -> tuple[float, list]:
            start = time.perf_counter()
            out = beam_search(model, src, mask, args.beam, max_len=40, length_penalty=0.6)
            return (time.perf_counter() - start) * 1e3, out

        full = tuple(model.source_state)
        for _ in range(args.rounds):
            model.source_state = full
            ms_keep, out_keep = timed()
            model.source_state = ()
            ms_reorder, out_reorder = timed()
            assert out_keep == out_reorder, "hypotheses differ: a source_state tensor is not per-sentence"
            kept_ms.append(ms_keep)
            reordered_ms.append(ms_reorder)
        model.source_state = full
        ratios = [k / r for k, r in zip(kept_ms, reordered_ms)]
        for label, ms in (("left in place", kept_ms), ("reordered every step", reordered_ms)):
            ratio = f"{statistics.median(ratios):.2f}" if ms is kept_ms else "1.00"
            print(f"| {task} | {label} | {statistics.median(ms):.0f} | {min(ms):.0f}-{max(ms):.0f} | {ratio} |")


if __name__ == "__main__":
    main()
