"""Adam and the learning-rate schedules of the paper's tasks, built from `optim.*`.

Every schedule is a pure function of the step (LambdaLR), so a resumed run recomputes it from the
checkpointed step; its state_dict goes into the checkpoint anyway.
"""
from __future__ import annotations

import math
from typing import Callable, Iterable

import torch
from omegaconf import DictConfig
from torch.optim.lr_scheduler import LambdaLR


class AdamEpsInside(torch.optim.Optimizer):
    """Adam with eps inside the square root, as Salimans' CIFAR code (weight_norm nn.py:73-90):

        m_t = b1 m + (1 - b1) g,  v_t = b2 v + (1 - b2) g^2
        p  -= lr * (m_t / (1 - b1^t)) / sqrt(v_t / (1 - b2^t) + eps)

    torch's Adam divides by sqrt(v_hat) + eps instead, which no option changes. Both bias
    corrections use the group's current betas (the CIFAR protocol lowers beta1 mid-run; so does
    Salimans' symbolic mom1). No weight decay (config.py rejects it).
    """

    def __init__(self, params: Iterable[torch.nn.Parameter], lr: float, betas: tuple[float, float], eps: float):
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps})

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            (b1, b2), eps = group["betas"], group["eps"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_sq"] = torch.zeros_like(p)
                state["step"] += 1
                t, m, v = state["step"], state["exp_avg"], state["exp_avg_sq"]
                m.mul_(b1).add_(p.grad, alpha=1 - b1)
                v.mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
                denom = (v / (1 - b2 ** t)).add_(eps).sqrt_()
                p.addcdiv_(m, denom, value=-group["lr"] / (1 - b1 ** t))


def build_optimizer(params: Iterable[torch.nn.Parameter], optim: DictConfig) -> torch.optim.Optimizer:
    params = list(params)
    if optim.get("eps_inside"):
        return AdamEpsInside(params, lr=float(optim.lr), betas=tuple(float(b) for b in optim.betas), eps=float(optim.eps))
    cls = torch.optim.AdamW if optim.name == "adamw" else torch.optim.Adam
    # torch's fused kernel where it has one: the same update within rounding, one pass per tensor (on a CPU
    # core 2.9x faster than the default loop over the small RNNSearch's 14.6M parameters: docs/performance.md)
    fused = all(p.device.type in ("cpu", "cuda") for p in params)
    return cls(params, lr=float(optim.lr), betas=tuple(float(b) for b in optim.betas),
               eps=float(optim.eps), weight_decay=float(optim.weight_decay), fused=fused)


def decay_step(schedule: DictConfig | dict, total_steps: int) -> int:
    """The first step of linear_decay's fall (and of beta1_after_decay): decay_start of total_steps."""
    return int(float(schedule["decay_start"]) * total_steps)


def lr_factor(schedule: DictConfig, total_steps: int) -> Callable[[int], float]:
    """Multiplier of optim.lr for (0-based) step s.

    constant:     1, after an optional linear warm-up.
    inverse_sqrt: the Transformer's: linear warm-up to 1 at warmup_steps, then sqrt(warmup / step).
    linear_decay: 1 until decay_start * total_steps, then linear to 0 at total_steps (CIFAR).
    """
    name, warmup = schedule.name, int(schedule.warmup_steps)
    decay_from = decay_step(schedule, total_steps)

    def warm(s: int) -> float:
        return min(1.0, (s + 1) / warmup) if warmup > 0 else 1.0

    if name == "constant":
        return warm
    if name == "inverse_sqrt":
        return lambda s: warm(s) * math.sqrt(max(warmup, 1) / max(s + 1, warmup, 1))
    return lambda s: warm(s) * min(1.0, max(0.0, (total_steps - s) / max(total_steps - decay_from, 1)))


def describe_schedule(optim: DictConfig | dict, total_steps: int) -> str:
    """lr_factor's schedule in words, for recipe cards: "peak lr 0.001 after 800 warm-up steps, linear to 0 from
    step 1000"."""
    schedule = optim.get("schedule", {})
    name, warmup = schedule.get("name"), schedule.get("warmup_steps") or 0
    text = f"lr {optim.get('lr')}" + (f" after {warmup} warm-up steps" if warmup else "")
    if name == "inverse_sqrt":
        return f"peak {text}, then its inverse square root"
    if name == "linear_decay":
        return f"peak {text}, linear to 0 from step {decay_step(schedule, total_steps)}"
    return f"{text}, constant" if name == "constant" else f"{text}, schedule {name}"


def build_schedule(optimizer: torch.optim.Optimizer, optim: DictConfig, total_steps: int) -> LambdaLR:
    return LambdaLR(optimizer, lr_factor(optim.schedule, total_steps))


def beta1_switch(optimizer: torch.optim.Optimizer, optim: DictConfig, total_steps: int) -> Callable[[int], None]:
    """Salimans & Kingma's CIFAR protocol lowers Adam's beta1 when the lr decay starts.

    Returns f(step) to call before each optimizer step; a no-op unless beta1_after_decay is set.
    """
    beta1 = optim.schedule.beta1_after_decay
    if beta1 is None or optim.schedule.name != "linear_decay":
        return lambda step: None
    decay_from = decay_step(optim.schedule, total_steps)

    def apply(step: int) -> None:
        if step >= decay_from:
            for group in optimizer.param_groups:
                group["betas"] = (float(beta1), group["betas"][1])

    return apply


def first_schedule_difference(optim: DictConfig, old_total: int, new_total: int, steps_done: int) -> int | None:
    """The first step index <= steps_done whose lr or beta1 differs between a train.steps=old_total and
    a train.steps=new_total run (None: they agree, so a run resumed at steps_done with the new total
    trains exactly like a fresh run of it). Index steps_done counts: its lr is already in the
    checkpointed optimizer."""
    if old_total == new_total:
        return None
    old, new = lr_factor(optim.schedule, old_total), lr_factor(optim.schedule, new_total)
    switches = optim.schedule.name == "linear_decay" and optim.schedule.beta1_after_decay is not None
    old_decay, new_decay = decay_step(optim.schedule, old_total), decay_step(optim.schedule, new_total)
    for s in range(steps_done + 1):
        if old(s) != new(s) or (switches and (s >= old_decay) != (s >= new_decay)):
            return s
    return None
