"""task=reader: CNN cloze reading comprehension with the bidirectional attentive reader (Table 6, Figure 5).

The model's softmax runs over the whole vocabulary; the target is the answer's vocabulary id
(data.answer_ids). Training batches permute the entity ids (task.permute_entities): every batch
maps all entity tokens of the vocabulary through one random permutation, drawn from (seed, step),
in documents, queries and answers alike, as the authors' pkl_data_iterator.DataIterator
(permute_ents=True for training; utils.create_mappings). Evaluation reads the data as it is.
"""
from __future__ import annotations

from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..base import Task, check_int, check_number
from ..sampling import batch_indices, file_order_indices
from .data import check_paper_passages, collate, load_reader_data
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
        self.answer_ids = torch.tensor(self.data.answer_ids, dtype=torch.long)
        self.entity_ids = torch.tensor(self.data.entity_ids(), dtype=torch.long)
        self.entity_mask = bool(cfg.task.model.get("entity_mask", False))
        self.permute = bool(cfg.task.get("permute_entities", False))

    @classmethod
    def check_config(cls, cfg) -> None:
        check_int(cfg, "task.eval_batch_size", 1)
        check_number(cfg, "task.model.dropout", 0.0, 1.0, high_open=True)
        init = (cfg.get("task") or {}).get("model", {}).get("init")
        if init not in (None, "cooijmans", "xavier"):
            raise ValueError(f"task.model.init must be cooijmans or xavier, got {init!r}")
        bias = (cfg.get("task") or {}).get("model", {}).get("input_bias")
        if bias not in (None, "after", "both"):
            raise ValueError(f"task.model.input_bias must be after or both, got {bias!r}")
        for split in ("train", "valid", "test"):  # data=synthetic: an empty split would fail at evaluation
            check_int(cfg, f"task.synthetic.{split}_size", 1)
        order = (cfg.get("task") or {}).get("batch_order")
        if order not in (None, "file", "shuffled"):
            raise ValueError(f"task.batch_order must be file or shuffled, got {order!r}")
        check_paper_passages(cfg)

    def build_model(self) -> nn.Module:
        m = self.cfg.task.model
        return AttentiveReader(
            vocab_size=len(self.data.vocab),
            n_outputs=len(self.data.vocab),  # the authors' n_words_ans = emb_sz: the whole vocabulary
            norms=self.norms,
            emb_dim=int(m.emb_dim),
            hidden=int(m.hidden),
            max_doc_len=self.data.max_len("doc"),  # BN-LSTM keeps statistics for every step
            max_query_len=self.data.max_len("query"),
            forget_bias=float(m.forget_bias),
            dropout=float(m.get("dropout", 0.0)),
            use_dq_sims=bool(m.get("use_dq_sims", False)),
            use_desc_skip=bool(m.get("use_desc_skip_c_g", False)),
            learn_h0=bool(m.get("learn_h0", False)),
            init=str(m.get("init", "xavier")),
            input_bias=str(m.get("input_bias", "after")),
        ).to(self.device)

    def prepare(self, examples: list, permutation: Tensor | None = None) -> dict[str, Tensor]:
        """A batch as the model reads it: collate, the answers' vocabulary ids as "target", the
        candidates as a (B, V) vocabulary mask "vocab_candidates" when task.model.entity_mask is on, and
        every token id mapped through `permutation` (a vocabulary lookup table) when given."""
        batch = collate(examples, self.data.n_entities, torch.device("cpu"))
        batch["target"] = self.answer_ids[batch["answer"]]
        mask = None
        if self.entity_mask:
            mask = torch.zeros(len(examples), len(self.data.vocab), dtype=torch.bool)
            mask[:, self.answer_ids] = batch["candidates"]
        if permutation is not None:
            for key in ("doc", "query", "target"):
                batch[key] = permutation[batch[key]]
            if mask is not None:
                mask = torch.zeros_like(mask).index_copy_(1, permutation, mask)  # column v -> permutation[v]
        if mask is not None:
            batch["vocab_candidates"] = mask
        return {k: v.to(self.device) for k, v in batch.items()}

    def entity_permutation(self, step: int) -> Tensor | None:
        """The vocabulary lookup table of step `step`: entity ids permuted among themselves."""
        if not self.permute or len(self.entity_ids) < 2:
            return None
        generator = torch.Generator().manual_seed(int(self.cfg.seed) * 1_000_003 + step)
        table = torch.arange(len(self.data.vocab))
        table[self.entity_ids] = self.entity_ids[torch.randperm(len(self.entity_ids), generator=generator)]
        return table

    def train_batch(self, step: int, rank: int = 0, world_size: int = 1) -> dict[str, Tensor]:
        train, batch_size = self.data.splits["train"], int(self.cfg.train.batch_size)
        if self.cfg.task.get("batch_order") == "file":
            index = file_order_indices(len(train), batch_size, step, rank, world_size)
        else:
            index = batch_indices(len(train), batch_size, step, int(self.cfg.seed), rank, world_size)
        return self.prepare([train[i] for i in index.tolist()], self.entity_permutation(step))

    def forward(self, model: nn.Module, batch: dict[str, Tensor]) -> Tensor:
        return model(batch["doc"], batch["doc_mask"], batch["query"], batch["query_mask"], batch.get("vocab_candidates"))

    def loss(self, model: nn.Module, batch: dict[str, Tensor]) -> tuple[Tensor, int]:
        return F.cross_entropy(self.forward(model, batch), batch["target"]), len(batch["target"])

    @torch.no_grad()
    def evaluate(self, model: nn.Module, split: str) -> dict[str, float]:
        examples = self.data.splits[split]
        # Length-sorted batches waste little on padding; the metric does not depend on the order.
        order = sorted(range(len(examples)), key=lambda i: len(examples[i].doc))
        size = int(self.cfg.task.eval_batch_size)
        correct = 0
        for start in range(0, len(order), size):
            self.check_stop()
            batch = self.prepare([examples[i] for i in order[start : start + size]])
            correct += int((self.forward(model, batch).argmax(-1) == batch["target"]).sum())
        accuracy = correct / len(examples)
        return {"accuracy": accuracy, "error": 1.0 - accuracy}

    def provenance(self) -> dict:
        return {**super().provenance(), "data_info": dict(self.data.info)} if self.data.info else super().provenance()
