"""Checks of a composed run config (the resume guard's rules: rmsnorm_repro/record.py).

Everything here turns bad input into a `ConfigError` whose message is one line: what is wrong and
what to do. The entry point prints it without a traceback.
"""
from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from .. import allocator
from ..errors import ConfigError

SCHEDULES = ("constant", "inverse_sqrt", "linear_decay")
OPTIMIZERS = ("adam", "adamw")
# optim.clip_mode: how optim.clip is applied (runner/step.py clip_gradients)
CLIP_MODES = ("global", "per_tensor", "global_sqrt")
SEED_MAX = 2**32 - 1  # numpy's seeds are 32-bit


def _get(cfg: DictConfig, key: str) -> Any:
    return OmegaConf.select(cfg, key, throw_on_missing=False)


def _int(cfg: DictConfig, key: str, minimum: int, maximum: int | None = None) -> None:
    value = _get(cfg, key)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum or (maximum is not None and value > maximum):
        bound = f"in [{minimum}, {maximum}]" if maximum is not None else f">= {minimum}"
        raise ConfigError(f"{key} must be an integer {bound}, got {value!r}")


def _number(cfg: DictConfig, key: str, low: float, high: float = math.inf, optional: bool = False,
            low_open: bool = False) -> None:
    value = _get(cfg, key)
    if value is None and optional:
        return
    # inf or nan would be accepted by every comparison below, and an infinite lr "diverges" into
    # the paper's "fails to train": refuse them
    bad = isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
    if not bad:
        bad = value <= low if low_open else value < low
        bad = bad or value > high
    if bad:
        bracket = "(" if low_open else "["
        allowed = (f"a finite number in {bracket}{low:g}, {high:g}]" if high < math.inf
                   else f"a finite number {'>' if low_open else '>='} {low:g}")
        raise ConfigError(f"{key} must be {allowed}{' or null' if optional else ''}, got {value!r}")


def check_config(cfg: DictConfig) -> None:
    """Check the keys every task shares; the task and norm factories check their own."""
    for key in ("task.name", "norm.name", "data.name"):
        if not isinstance(_get(cfg, key), str):
            raise ConfigError(f"{key} is missing: choose one with {key.split('.')[0]}=<name>")
    _int(cfg, "seed", 0, SEED_MAX)
    _int(cfg, "train.steps", 1)
    if "batch_size" in (_get(cfg, "train") or {}):  # token-batched tasks (Transformer) have none
        _int(cfg, "train.batch_size", 1)
    for key in ("train.eval_every", "train.log_every", "train.checkpoint_every"):
        _int(cfg, key, 1)
    _number(cfg, "train.max_minutes", 0.0, optional=True, low_open=True)
    _number(cfg, "train.max_loss", 0.0, optional=True, low_open=True)
    if _get(cfg, "train.select_mode") not in (None, "min", "max"):
        raise ConfigError(f"train.select_mode must be min, max or null, got {_get(cfg, 'train.select_mode')!r}")
    if _get(cfg, "train.early_stop_patience") is not None:
        _int(cfg, "train.early_stop_patience", 1)
    _number(cfg, "norm.p", 0.0, 1.0, low_open=True)
    for key in _dropout_keys(_get(cfg, "task"), "task"):  # every task's dropout rates: probabilities
        _number(cfg, key, 0.0, 1.0)
    if _get(cfg, "norm.eps") is not None:
        _number(cfg, "norm.eps", 0.0)
    if _get(cfg, "optim.name") not in OPTIMIZERS:
        raise ConfigError(f"optim.name={_get(cfg, 'optim.name')!r} is unknown; choose one of: {', '.join(OPTIMIZERS)}")
    _number(cfg, "optim.lr", 0.0, low_open=True)
    _number(cfg, "optim.eps", 0.0)
    _number(cfg, "optim.weight_decay", 0.0)
    if _get(cfg, "optim.eps_inside") and (_get(cfg, "optim.name") != "adam" or _get(cfg, "optim.weight_decay")):
        raise ConfigError("optim.eps_inside=true is plain Adam (Salimans' CIFAR optimizer): use optim.name=adam "
                          "and optim.weight_decay=0, or optim.eps_inside=false")
    _number(cfg, "optim.clip", 0.0, optional=True, low_open=True)
    if _get(cfg, "optim.clip_mode") not in (None, *CLIP_MODES):  # None: global
        raise ConfigError(f"optim.clip_mode={_get(cfg, 'optim.clip_mode')!r} is unknown; "
                          f"choose one of: {', '.join(CLIP_MODES)}")
    betas = _get(cfg, "optim.betas")
    if betas is None or len(betas) != 2 or not all(isinstance(b, (int, float)) and 0 <= b < 1 for b in betas):
        raise ConfigError(f"optim.betas must be two numbers in [0, 1), got {betas!r}")
    if _get(cfg, "optim.schedule.name") not in SCHEDULES:
        raise ConfigError(f"optim.schedule.name={_get(cfg, 'optim.schedule.name')!r} is unknown; "
                          f"choose one of: {', '.join(SCHEDULES)}")
    _int(cfg, "optim.schedule.warmup_steps", 0)
    _number(cfg, "optim.schedule.decay_start", 0.0, 1.0)
    _number(cfg, "optim.schedule.beta1_after_decay", 0.0, 1.0, optional=True)
    if _get(cfg, "allocator") not in allocator.MODES:
        raise ConfigError(f"allocator={_get(cfg, 'allocator')!r} is unknown; choose one of: {', '.join(allocator.MODES)}")
    device = str(_get(cfg, "device"))
    if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", device):
        raise ConfigError(f"device={device!r} is unknown; choose auto, cpu, cuda or cuda:<index>")
    if device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise ConfigError(f"device={device} but CUDA is not available here; use device=auto or device=cpu")


def _dropout_keys(node: Any, prefix: str) -> list[str]:
    if not isinstance(node, DictConfig):
        return []
    keys = []
    for name in node.keys():
        child = OmegaConf.select(node, str(name), throw_on_missing=False)
        if str(name).endswith("dropout") and not isinstance(child, DictConfig):
            keys.append(f"{prefix}.{name}")
        keys += _dropout_keys(child, f"{prefix}.{name}")
    return keys


def check_data_root(cfg: DictConfig) -> None:
    """A real data set (anything but synthetic) needs its files where data.root points."""
    data = cfg.data
    if data.name == "synthetic" or data.get("root") is None or data.get("download", False):
        return
    if not Path(str(data.root)).exists():
        hint = ", or data.download=true where there is network" if "download" in data else ""
        raise ConfigError(f"data.root={data.root} does not exist: put the {data.name} files there "
                          f"or point data.root at them{hint}")
