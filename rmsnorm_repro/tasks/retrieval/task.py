"""task=retrieval: COCO image-caption retrieval with order embeddings (Tables 7-8, Figure 6)."""
from __future__ import annotations

from typing import ClassVar

import torch
from torch import Tensor, nn

from ..base import Task
from ..sampling import batch_indices
from .data import CAPTIONS_PER_IMAGE, load_retrieval_data, pad_captions
from .metrics import contrastive_loss, fold_metrics, order_violation
from .model import OrderEmbedding

PAPER_TEST_IMAGES, PAPER_FOLDS = 5000, 5


class RetrievalTask(Task):
    name: ClassVar[str] = "retrieval"
    supported_norms: ClassVar[tuple[str, ...]] = ("none", "layernorm", "rmsnorm", "prmsnorm")
    supported_data: ClassVar[tuple[str, ...]] = ("synthetic", "coco")
    unit: ClassVar[str] = "examples"
    best_metric: ClassVar[tuple[str, str]] = ("rsum", "max")
    # the contrastive loss takes its negatives from the batch: DDP shards would each see only their own
    ddp_unsupported: ClassVar[str] = "its contrastive loss takes the negatives from the whole batch"

    def __init__(self, cfg, norms, device):
        super().__init__(cfg, norms, device)
        self.data = load_retrieval_data(cfg)

    def build_model(self) -> nn.Module:
        m = self.cfg.task.model
        model = OrderEmbedding(len(self.data.vocab), self.data.feature_dim, self.norms, int(m.word_dim), int(m.dim))
        return model.to(self.device)

    def train_batch(self, step: int, rank: int = 0, world_size: int = 1) -> dict[str, Tensor]:
        """Caption-image pairs: an epoch visits every caption once, each with its own image.

        In-batch negatives are the other pairs of this process's batch (under DDP: of its shard).
        """
        train = self.data.splits["train"]
        batch_size, seed = int(self.cfg.train.batch_size), int(self.cfg.seed)
        index = batch_indices(len(train.captions), batch_size, step, seed, rank, world_size)
        tokens, mask = pad_captions([train.captions[i] for i in index.tolist()], self.device)
        return {"tokens": tokens, "mask": mask, "images": train.images[index // CAPTIONS_PER_IMAGE].to(self.device)}

    def loss(self, model: nn.Module, batch: dict[str, Tensor]) -> tuple[Tensor, int]:
        s = model.encode_captions(batch["tokens"], batch["mask"])
        im = model.encode_images(batch["images"])
        # Summed, not averaged, over the batch, as in ivendrov's code (the paper's lr 1e-3 goes with it).
        return contrastive_loss(order_violation(s, im), float(self.cfg.task.margin)), len(s)

    @torch.no_grad()
    def evaluate(self, model: nn.Module, split: str) -> dict[str, float]:
        """R@1/5/10, medr, meanr both ways and rsum; a 5000-image split is scored as 5 folds of 1000
        images averaged (the paper's protocol), any other size as one fold of all its images."""
        data = self.data.splits[split]
        size = int(self.cfg.task.eval_batch_size)
        # Length-sorted batches waste little on padding; results are put back in caption order.
        order = sorted(range(len(data.captions)), key=lambda i: len(data.captions[i]))
        captions = torch.empty(len(order), int(self.cfg.task.model.dim), device=self.device)
        for start in range(0, len(order), size):
            chunk = order[start : start + size]
            captions[chunk] = model.encode_captions(*pad_captions([data.captions[i] for i in chunk], self.device))
        images = torch.cat([model.encode_images(x.to(self.device)) for x in data.images.split(size)])
        folds = PAPER_FOLDS if images.shape[0] == PAPER_TEST_IMAGES else 1
        return fold_metrics(captions, images, folds)
