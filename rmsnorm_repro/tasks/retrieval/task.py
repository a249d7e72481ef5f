"""task=retrieval: COCO image-caption retrieval with order embeddings (Tables 7-8, Figure 6)."""
from __future__ import annotations

from typing import Callable, ClassVar

import torch
from torch import Tensor, nn

from ..base import Task, check_int, check_number
from ..sampling import batch_indices
from .data import CAPTIONS_PER_IMAGE, Split, load_retrieval_data, pad_captions
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

    @classmethod
    def check_config(cls, cfg) -> None:
        check_int(cfg, "task.eval_batch_size", 1)
        check_number(cfg, "task.margin", 0.0)
        sampling = (cfg.get("task") or {}).get("sampling")
        if sampling not in (None, "images", "captions"):
            raise ValueError(f"task.sampling must be images or captions, got {sampling!r}")
        caption_eos = (cfg.get("task") or {}).get("caption_eos", False)
        if not isinstance(caption_eos, bool):
            raise ValueError(f"task.caption_eos must be true or false, got {caption_eos!r}")
        for split in ("train", "valid", "test"):  # data=synthetic: an empty split would fail at evaluation
            check_int(cfg, f"task.synthetic.{split}_images", 1)

    def build_model(self) -> nn.Module:
        m = self.cfg.task.model
        model = OrderEmbedding(len(self.data.vocab), self.data.feature_dim, self.norms, int(m.word_dim), int(m.dim),
                               float(m.get("init_scale", 0.1)))
        return model.to(self.device)

    def train_batch(self, step: int, rank: int = 0, world_size: int = 1) -> dict[str, Tensor]:
        """Caption-image pairs, by task.sampling:

        images (ivendrov's datasource.py): an epoch visits every image once, each with one of its 5
            captions drawn at random (from seed, step and position, so a resume replays it);
        captions: an epoch visits every caption once, each with its own image.
        In-batch negatives are the other pairs of this process's batch (under DDP: of its shard).
        """
        train = self.data.splits["train"]
        batch_size, seed = int(self.cfg.train.batch_size), int(self.cfg.seed)
        if self.sampling == "images":
            images = batch_indices(train.images.shape[0], batch_size, step, seed, rank, world_size)
            generator = torch.Generator().manual_seed(seed * 1_000_003 + step)  # the global batch's draws, sliced
            per_rank = batch_size // world_size
            pick = torch.randint(CAPTIONS_PER_IMAGE, (batch_size,), generator=generator)[rank * per_rank:(rank + 1) * per_rank]
            index = images * CAPTIONS_PER_IMAGE + pick
        else:
            index = batch_indices(len(train.captions), batch_size, step, seed, rank, world_size)
        tokens, mask = pad_captions([train.captions[i] for i in index.tolist()], self.device)
        return {"tokens": tokens, "mask": mask, "images": train.images[index // CAPTIONS_PER_IMAGE].to(self.device)}

    @property
    def sampling(self) -> str:
        return str(self.cfg.task.get("sampling") or "images")

    def loss(self, model: nn.Module, batch: dict[str, Tensor]) -> tuple[Tensor, int]:
        s = model.encode_captions(batch["tokens"], batch["mask"])
        im = model.encode_images(batch["images"])
        # Summed, not averaged, over the batch, as in ivendrov's code (the paper's lr 1e-3 goes with it).
        return contrastive_loss(order_violation(s, im), float(self.cfg.task.margin)), len(s)

    def evaluate(self, model: nn.Module, split: str) -> dict[str, float]:
        return score_split(model, self.data.splits[split], int(self.cfg.task.eval_batch_size), self.device,
                           self.check_stop)


@torch.no_grad()
def score_split(model: nn.Module, data: Split, batch_size: int, device: torch.device,
                between: Callable[[], None] = lambda: None) -> dict[str, float]:
    """R@1/5/10, medr, meanr both ways and rsum; a 5000-image split is scored as 5 folds of 1000
    images averaged (the paper's protocol), any other size as one fold of all its images.
    `between` runs between batches (the runner's stop check)."""
    # Length-sorted batches waste little on padding; results are put back in caption order.
    order = sorted(range(len(data.captions)), key=lambda i: len(data.captions[i]))
    parts = []
    for start in range(0, len(order), batch_size):
        between()
        parts.append(model.encode_captions(*pad_captions([data.captions[i] for i in order[start : start + batch_size]],
                                                         device)))
    encoded = torch.cat(parts)
    captions = torch.empty_like(encoded)
    captions[torch.tensor(order, device=encoded.device)] = encoded
    between()
    images = torch.cat([model.encode_images(x.to(device)) for x in data.images.split(batch_size)])
    between()
    folds = PAPER_FOLDS if images.shape[0] == PAPER_TEST_IMAGES else 1
    return fold_metrics(captions, images, folds)
