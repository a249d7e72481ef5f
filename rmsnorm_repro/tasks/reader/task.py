"""task=reader: CNN cloze reading comprehension with the bidirectional attentive reader (Table 6, Figure 5)."""
from __future__ import annotations

from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..base import Task
from ..sampling import batch_indices
from .data import collate, load_reader_data
from .model import AttentiveReader


class ReaderTask(Task):
    name: ClassVar[str] = "reader"
    supported_norms: ClassVar[tuple[str, ...]] = ("none", "batchnorm", "layernorm", "rmsnorm", "prmsnorm")
    supported_data: ClassVar[tuple[str, ...]] = ("synthetic", "cnn")
    unit: ClassVar[str] = "examples"
    best_metric: ClassVar[tuple[str, str]] = ("accuracy", "max")

    def __init__(self, cfg, norms, device):
        super().__init__(cfg, norms, device)
        self.data = load_reader_data(cfg)

    def build_model(self) -> nn.Module:
        m = self.cfg.task.model
        return AttentiveReader(
            vocab_size=len(self.data.vocab),
            n_entities=self.data.n_entities,
            norms=self.norms,
            emb_dim=int(m.emb_dim),
            hidden=int(m.hidden),
            max_doc_len=self.data.max_len("doc"),  # BN-LSTM keeps statistics for every step
            max_query_len=self.data.max_len("query"),
            forget_bias=float(m.forget_bias),
        ).to(self.device)

    def train_batch(self, step: int, rank: int = 0, world_size: int = 1) -> dict[str, Tensor]:
        train = self.data.splits["train"]
        index = batch_indices(len(train), int(self.cfg.train.batch_size), step, int(self.cfg.seed), rank, world_size)
        return collate([train[i] for i in index.tolist()], self.data.n_entities, self.device)

    def loss(self, model: nn.Module, batch: dict[str, Tensor]) -> tuple[Tensor, int]:
        logits = model(batch["doc"], batch["doc_mask"], batch["query"], batch["query_mask"], batch["candidates"])
        return F.cross_entropy(logits, batch["answer"]), len(batch["answer"])

    @torch.no_grad()
    def evaluate(self, model: nn.Module, split: str) -> dict[str, float]:
        examples = self.data.splits[split]
        # Length-sorted batches waste little on padding; the metric does not depend on the order.
        order = sorted(range(len(examples)), key=lambda i: len(examples[i].doc))
        size = int(self.cfg.task.eval_batch_size)
        correct = 0
        for start in range(0, len(order), size):
            batch = collate([examples[i] for i in order[start : start + size]], self.data.n_entities, self.device)
            logits = model(batch["doc"], batch["doc_mask"], batch["query"], batch["query_mask"], batch["candidates"])
            correct += int((logits.argmax(-1) == batch["answer"]).sum())
        accuracy = correct / len(examples)
        return {"accuracy": accuracy, "error": 1.0 - accuracy}
