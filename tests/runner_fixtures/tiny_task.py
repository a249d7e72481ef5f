"""A tiny learnable task for the runner's tests: Gaussian blobs, an MLP, well under a second a run.

The problem (blob centres, valid/test sets) is fixed; the seed changes the init and the batches.
`task.sleep_ms` slows each batch so a test can kill a run mid-way; `task.crash_at` raises at a step.
A test that sets SIGTERM_IN_EVAL to a split gets, once, an evaluation of that split that sends the
run SIGTERM and then takes 20 s unless it stops between batches (as real evaluations do). The variable
TINY_TASK_IMPORT_S slows this module's import (a run's start, before it trains) by that many seconds.
"""
from __future__ import annotations

import os
import signal
import time

import torch
import torch.nn.functional as F
from torch import nn

from rmsnorm_repro.norms import NORM_NAMES
from rmsnorm_repro.tasks.base import Task


SIGTERM_IN_EVAL: str | None = None
time.sleep(float(os.environ.get("TINY_TASK_IMPORT_S", "0")))


class TinyTask(Task):
    name = "tiny"
    supported_norms = NORM_NAMES
    supported_data = ("synthetic",)
    unit = "examples"
    best_metric = ("error", "min")

    def __init__(self, cfg, norms, device):
        super().__init__(cfg, norms, device)
        t = cfg.task
        self.t = t
        self.centres = torch.randn(t.classes, t.dim, generator=torch.Generator().manual_seed(1234)) * t.separation
        self.splits = {"valid": self._sample(torch.Generator().manual_seed(1), t.eval_size),
                       "test": self._sample(torch.Generator().manual_seed(2), t.eval_size)}

    def _sample(self, gen, n):
        y = torch.randint(self.t.classes, (n,), generator=gen)
        x = self.centres[y] + torch.randn(n, self.t.dim, generator=gen)
        return x.to(self.device), y.to(self.device)

    def build_model(self):
        t, n = self.t, self.norms
        return nn.Sequential(n.linear(t.dim, t.hidden), n.act(t.hidden), nn.ReLU(), nn.Dropout(t.dropout),
                             n.linear(t.hidden, t.classes))

    def train_batch(self, step, rank=0, world_size=1):
        if self.t.crash_at is not None and step == self.t.crash_at:
            raise RuntimeError(f"tiny task crashes at step {step} as configured")
        if self.t.sleep_ms:
            time.sleep(self.t.sleep_ms / 1e3)
        gen = torch.Generator().manual_seed(self.cfg.seed * 1_000_003 + step)
        x, y = self._sample(gen, self.cfg.train.batch_size)
        if len(y) % world_size:
            raise ValueError(f"train.batch_size={len(y)} must be divisible by the {world_size} processes")
        shard = len(y) // world_size  # under DDP this rank's slice of the global batch
        return x[rank * shard : (rank + 1) * shard], y[rank * shard : (rank + 1) * shard]

    def loss(self, model, batch):
        x, y = batch
        return F.cross_entropy(model(x), y), len(y)

    def evaluate(self, model, split):
        global SIGTERM_IN_EVAL
        if SIGTERM_IN_EVAL == split:
            SIGTERM_IN_EVAL = None
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(100):
                self.check_stop()
                time.sleep(0.2)
        x, y = self.splits[split]
        logits = model(x)
        error = (logits.argmax(-1) != y).float().mean().item()
        return {"loss": F.cross_entropy(logits, y).item(), "error": error, "accuracy": 1 - error}


class TinyStrictTask(TinyTask):
    """The same task with a restricted norm list and a real data set, for the bad-input tests."""

    supported_norms = ("none", "layernorm", "rmsnorm")
    supported_data = ("synthetic", "tinyreal")
