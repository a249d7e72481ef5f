"""The training step, timed: the one the runner, the speed bench and the tests all run."""
from __future__ import annotations

import time
from typing import Any, Callable

import torch
from torch import Tensor

from ..tasks import Task


def train_step(task: Task, model: torch.nn.Module, optimizer: torch.optim.Optimizer, batch: Any,
               params: list[torch.nn.Parameter], clip: float | None = None, scheduler: Any = None,
               loss_weight: Callable[[int], float] | None = None) -> tuple[Tensor, int, float]:
    """Forward, backward, clip (global grad norm), update, schedule; returns (loss, n, ms).

    ms is the step's wall-clock time with the device synchronized on both sides. loss_weight(n)
    scales the loss before backward (DDP's token re-weighting); the returned loss is unscaled.
    """
    device = params[0].device if params else torch.device("cpu")
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    sync()
    t0 = time.perf_counter()
    optimizer.zero_grad(set_to_none=True)
    loss, n = task.loss(model, batch)
    (loss * loss_weight(int(n)) if loss_weight is not None else loss).backward()
    if clip:
        torch.nn.utils.clip_grad_norm_(params, clip)
    optimizer.step()
    if scheduler is not None:
        scheduler.step()
    sync()
    return loss, n, (time.perf_counter() - t0) * 1e3
