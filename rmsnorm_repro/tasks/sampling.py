"""Which examples make up the batch of step `step`: a pure function of (seed, step), so resume replays.

batch_indices: examples are visited in epochs; epoch e is a permutation of all n examples drawn from
(seed, e). The global batch of step s holds positions s*B .. s*B+B-1 of that endless stream.
file_order_indices: the file's whole batches in order, the same every epoch.
Under DDP each rank takes its contiguous slice, so world_size ranks together see exactly the
one-process batch.
"""
from __future__ import annotations

from functools import lru_cache

import torch
from torch import Tensor


@lru_cache(maxsize=4)
def _epoch_permutation(n: int, seed: int, epoch: int) -> Tensor:
    generator = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    return torch.randperm(n, generator=generator)


def batch_indices(n: int, batch_size: int, step: int, seed: int, rank: int = 0, world_size: int = 1) -> Tensor:
    """Indices (into n examples) of this rank's share of the global batch of step `step`."""
    if n < 1:
        raise ValueError("the training set is empty: check the data config")
    if batch_size % world_size:
        raise ValueError(f"train.batch_size={batch_size} must be divisible by the number of processes ({world_size})")
    positions = torch.arange(step * batch_size, (step + 1) * batch_size)
    per_rank = batch_size // world_size
    positions = positions[rank * per_rank : (rank + 1) * per_rank]
    epochs = positions // n
    return torch.cat([_epoch_permutation(n, seed, int(e))[positions[epochs == e] % n] for e in epochs.unique()])


def file_order_indices(n: int, batch_size: int, step: int, rank: int = 0, world_size: int = 1) -> Tensor:
    """Batch `step` in file order, as the attentive reader's training iterator (Attentive_reader bn,
    pkl_data_iterator.py:244-247,270-287 with shuffle=False; attentive_reader.py:412-418): batch i of an
    epoch is examples i*B .. i*B+B-1, a last partial batch is dropped, every epoch repeats the order."""
    if n < batch_size:
        raise ValueError(f"train.batch_size={batch_size} exceeds the {n} training examples")
    if batch_size % world_size:
        raise ValueError(f"train.batch_size={batch_size} must be divisible by the number of processes ({world_size})")
    start = (step % (n // batch_size)) * batch_size + rank * (batch_size // world_size)
    return torch.arange(start, start + batch_size // world_size)
