"""The training step, timed: the one the runner, the speed bench and the tests all run."""
from __future__ import annotations

import contextlib
import time
from typing import Any, Callable

import torch
from torch import Tensor

from ..tasks import Task
from .config import CLIP_MODES
from .precision import Precision


def clip_gradients(params: list[torch.nn.Parameter], clip: float, mode: str = "global") -> None:
    """Clip the gradients of `params` in place (optim.clip, optim.clip_mode).

    global:      one norm n over all gradients; if n > clip, scale all by clip / n (Nematus'
                 tf.clip_by_global_norm; torch's clip_grad_norm_).
    per_tensor:  each gradient tensor on its own: if ||g|| > clip, g *= clip / ||g|| (ivendrov's
                 order-embedding train.py, `maxnorm(g, grad_clip)` for every gradient).
    global_sqrt: Cooijmans' attentive reader (attentive_reader.py): n is the global norm; if
                 n > clip**2, every gradient is scaled by clip / sqrt(n + 1e-8), so it keeps norm
                 clip * sqrt(n): a much weaker clip than `global` at the same value.
    """
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return
    if mode == "global":
        torch.nn.utils.clip_grad_norm_(params, clip)
    elif mode == "per_tensor":
        norms = torch._foreach_norm(grads)
        scales = [torch.where(n > clip, clip / n, torch.ones_like(n)) for n in norms]
        torch._foreach_mul_(grads, scales)
    elif mode == "global_sqrt":
        total = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))
        scale = torch.where(total > clip**2, clip / torch.sqrt(total + 1e-8), torch.ones_like(total))
        torch._foreach_mul_(grads, scale)
    else:
        raise ValueError(f"optim.clip_mode={mode!r} is unknown; choose one of: {', '.join(CLIP_MODES)}")


def train_step(task: Task, model: torch.nn.Module, optimizer: torch.optim.Optimizer, batch: Any,
               params: list[torch.nn.Parameter], clip: float | None = None, clip_mode: str = "global",
               scheduler: Any = None, loss_weight: Callable[[int], float] | None = None,
               precision: Precision | None = None) -> tuple[Tensor, int, float]:
    """Forward (under the precision's autocast), backward, clip (`clip_gradients`), update, schedule;
    returns (loss, n, ms).

    ms is the step's wall-clock time with the device synchronized on both sides. loss_weight(n)
    scales the loss before backward (DDP's token re-weighting); the returned loss is unscaled. With
    fp16 the GradScaler scales the loss, unscales the gradients before clipping and skips the update
    of a step whose gradients overflowed.
    """
    scaler = precision.scaler if precision is not None else None
    device = params[0].device if params else torch.device("cpu")
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    sync()
    t0 = time.perf_counter()
    optimizer.zero_grad(set_to_none=True)
    with precision.autocast() if precision is not None else contextlib.nullcontext():
        loss, n = task.loss(model, batch)
    weighted = loss * loss_weight(int(n)) if loss_weight is not None else loss
    (scaler.scale(weighted) if scaler is not None else weighted).backward()
    if scaler is not None:
        scaler.unscale_(optimizer)
    if clip:
        clip_gradients(params, clip, clip_mode)
    if scaler is not None:
        scaler.step(optimizer)
        scaler.update()
    else:
        optimizer.step()
    if scheduler is not None:
        scheduler.step()
    sync()
    return loss, n, (time.perf_counter() - t0) * 1e3
