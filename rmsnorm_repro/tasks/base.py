"""The small interface between the runner and a paper task.

The runner builds the model, then for each step asks `train_batch(step)` and `loss(...)`, and at
eval steps `evaluate(model, "valid")`; at the end `evaluate(model, "test")`. It knows nothing else
about tasks. The data position is the step: `train_batch(step)` is a pure function of the config
(seed included) and the step, so a resumed run sees exactly the batches it would have seen.
"""
from __future__ import annotations

from typing import Any, ClassVar

import torch
from omegaconf import DictConfig
from torch import Tensor, nn

from ..norms import Normalization


class Task:
    name: ClassVar[str] = ""
    supported_norms: ClassVar[tuple[str, ...]] = ()
    supported_data: ClassVar[tuple[str, ...]] = ("synthetic",)
    #: what `loss` counts for throughput ("examples" or "tokens")
    unit: ClassVar[str] = "examples"
    #: the validation metric that decides "best" and how ("max" or "min")
    best_metric: ClassVar[tuple[str, str]] = ("loss", "min")
    #: why the task cannot train under DDP (None: it can; its batches shard by rank)
    ddp_unsupported: ClassVar[str | None] = None
    #: the metric library's signature, copied into summary.json (translation: sacreBLEU's)
    bleu_signature: str | None = None

    def __init__(self, cfg: DictConfig, norms: Normalization, device: torch.device):
        self.cfg, self.norms, self.device = cfg, norms, device

    def build_model(self) -> nn.Module:
        raise NotImplementedError

    def train_batch(self, step: int, rank: int = 0, world_size: int = 1) -> Any:
        """The batch of optimizer step `step` (0-based), on self.device; under DDP this rank's shard."""
        raise NotImplementedError

    def loss(self, model: nn.Module, batch: Any) -> tuple[Tensor, int]:
        """(scalar training loss, number of examples or tokens in the batch)."""
        raise NotImplementedError

    def evaluate(self, model: nn.Module, split: str) -> dict[str, float]:
        """Metrics on split "valid" (eval steps) or "test" (end of run); model is in eval mode."""
        raise NotImplementedError

    def provenance(self) -> dict[str, Any]:
        """Where the numbers come from, for summary.json: data variant, test set sizes, a metric's signature."""
        return {"bleu_signature": self.bleu_signature} if self.bleu_signature else {}
