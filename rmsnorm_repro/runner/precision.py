"""train.precision: fp32, or mixed precision with autocast (bf16 on CPU and CUDA, fp16 on CUDA); and
train.tf32, how CUDA multiplies fp32 matrices.

Weights and optimizer states stay fp32; autocast runs matmuls and convolutions in the low precision.
fp16 needs a GradScaler (its state goes into the checkpoint); bf16 has fp32's range and needs none.
Lightning's names (32, bf16-mixed, 16-mixed) are accepted too.
"""
from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from typing import Any, ContextManager

import torch

from ..errors import ConfigError
from ..host import cpu_bf16_matmul

log = logging.getLogger(__name__)

NAMES = {"fp32": "fp32", "32": "fp32", "32-true": "fp32", "bf16": "bf16", "bf16-mixed": "bf16",
         "fp16": "fp16", "16": "fp16", "16-mixed": "fp16"}
DTYPES = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass
class Precision:
    name: str  # fp32 | bf16 | fp16
    device_type: str
    scaler: torch.amp.GradScaler | None = None

    def autocast(self) -> ContextManager[Any]:
        dtype = DTYPES[self.name]
        return torch.autocast(self.device_type, dtype=dtype) if dtype else contextlib.nullcontext()


def check(name: Any, device: torch.device) -> str:
    """The canonical precision name for `name` on `device`, or ConfigError in one line."""
    canonical = NAMES.get(str(name))
    if canonical is None:
        raise ConfigError(f"train.precision={name!r} is unknown; choose fp32, bf16 or fp16")
    if canonical == "fp16" and device.type != "cuda":
        raise ConfigError("train.precision=fp16 needs a CUDA device (CPU autocast is bf16): use train.precision=bf16 "
                          "or fp32 here")
    if canonical == "bf16" and device.type == "cpu" and cpu_bf16_matmul() is None:
        log.warning("train.precision=bf16: this CPU has neither AMX nor AVX512-BF16, so its bf16 matrix products "
                    "run on a slow fallback (~100x fp32 here); train.precision=fp32 is far faster on it")
    if canonical == "bf16" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise ConfigError("train.precision=bf16: this GPU has no bf16; use train.precision=fp16 or fp32")
    return canonical


def build(name: str, device: torch.device) -> Precision:
    scaler = torch.amp.GradScaler(device.type) if name == "fp16" else None
    return Precision(name, device.type, scaler)


def check_tf32(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"train.tf32 must be true or false, got {value!r}")
    return value


def apply_tf32(enabled: bool, device: torch.device) -> bool:
    """train.tf32 on a CUDA device: float32 matrix products and convolutions on TF32 tensor cores (Ampere
    and later: inputs rounded to a 10-bit mantissa, float32 sums), or IEEE float32 throughout when false
    (convolutions included, which torch otherwise runs in TF32 by default). The paper's fp32 times had no
    TF32 (its GPUs predate it). Nothing changes on CPU. Returns whether TF32 is in effect."""
    if device.type != "cuda":
        return False
    mode = "tf32" if enabled else "ieee"
    torch.backends.cuda.matmul.fp32_precision = mode
    torch.backends.cudnn.conv.fp32_precision = mode
    return enabled


def tf32_in_effect(device: torch.device) -> bool:
    """What summary.json's env.tf32 says: whether fp32 products on `device` run in TF32 now."""
    return device.type == "cuda" and torch.backends.cuda.matmul.fp32_precision == "tf32"
