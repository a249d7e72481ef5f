"""Machine translation tasks (paper Tables 2-5, Figures 1-4): RNNSearch and Transformer.

Both share the data pipeline (data.py), the label-smoothed loss, decoding (beam.py) and BLEU
(bleu.py); they differ in the model, the batching (sentences vs tokens) and the supported norms.
evaluate("valid") -> {"bleu", "loss"}: BLEU with decode.valid_beam on the first
decode.valid_sentences sentences (all when null), loss per target token on the whole valid set
(the runner logs it as valid_loss). evaluate("test") -> "<test>_bleu" and "<test>_sentences" per
configured test split (test14 and test17 for WMT14, test otherwise) with decode.beam, plus
"valid_beam_bleu" on the whole valid set.
The sacreBLEU signature is the attribute `bleu_signature`; provenance (e.g. which newstest2014
variant) is `data_info`.
"""
from __future__ import annotations

import math
from typing import ClassVar

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..base import Task
from .beam import beam_search, greedy, max_length
from .bleu import corpus_bleu
from .rnnsearch import SUPPORTED_NORMS
from .data import Encoded, TranslationData, eval_batches, subset
from .vocab import PAD


class TranslationTask(Task):
    supported_data = ("synthetic", "text", "multi30k", "wmt14")
    unit = "tokens"
    best_metric = ("bleu", "max")
    batching: ClassVar[str] = "sentences"

    def __init__(self, cfg, norms, device):
        super().__init__(cfg, norms, device)
        batch = cfg.train.batch_tokens if self.batching == "tokens" else cfg.train.batch_size
        self.data = TranslationData(cfg, self.batching, int(batch))
        self.vocab = self.data.vocab
        self.data_info = dict(self.data.info)
        self.bleu_signature = corpus_bleu(["x"], ["x"])[1]  # fixed by the metric's settings

    def model_class(self) -> type[nn.Module]:
        raise NotImplementedError

    def build_model(self) -> nn.Module:
        cls = self.model_class()
        return cls(self.cfg.task.model, len(self.vocab), PAD, self.norms).to(self.device)

    def train_batch(self, step: int, rank: int = 0, world_size: int = 1) -> dict[str, Tensor]:
        return self.data.train_batch(step, rank, world_size, self.device)

    def loss(self, model: nn.Module, batch: dict[str, Tensor]) -> tuple[Tensor, int]:
        """Label-smoothed cross-entropy per target token (EOS included, padding excluded)."""
        logits = model(batch["src"], batch["src_mask"], batch["tgt_in"])
        n = int(batch["tgt_mask"].sum())
        loss = F.cross_entropy(logits.flatten(0, 1).float(), batch["tgt_out"].flatten(), ignore_index=PAD,
                               label_smoothing=float(self.cfg.task.label_smoothing), reduction="sum")
        return loss / n, n

    # Evaluation -----------------------------------------------------------------------------
    @torch.no_grad()
    def evaluate(self, model: nn.Module, split: str) -> dict[str, float]:
        model = getattr(model, "module", model)  # DDP wrapper -> the model with encode/decode_step
        dec = self.cfg.task.decode
        if split == "valid":
            n = dec.get("valid_sentences")
            (src, ref), enc = self.data.valid_text, self.data.valid
            if n is not None and n < len(src):
                src, ref, enc = src[:n], ref[:n], subset(enc, np.arange(n))
            bleu, _ = corpus_bleu(self.translate(model, enc, int(dec.valid_beam)), ref)
            return {"bleu": bleu, "loss": self.nll(model, self.data.valid)}
        if split == "test":
            out = {"valid_beam_bleu": corpus_bleu(self.translate(model, self.data.valid, int(dec.beam)), self.data.valid_text[1])[0]}
            for name, ((_, ref), enc) in self.data.tests.items():
                out[f"{name}_bleu"] = corpus_bleu(self.translate(model, enc, int(dec.beam)), ref)[0]
                out[f"{name}_sentences"] = float(len(ref))
            return out
        raise ValueError(f"evaluate split must be 'valid' or 'test', got {split!r}")

    def translate(self, model: nn.Module, enc: Encoded, beam: int) -> list[str]:
        """Detokenized translations of every source sentence of a split, in corpus order."""
        dec = self.cfg.task.decode
        hyps: list[list[int]] = [[] for _ in range(len(enc))]
        for idx, b in eval_batches(enc, int(dec.batch_size), self.device):
            max_len = max_length(b["src_mask"], float(dec.max_len_a), int(dec.max_len_b))
            if beam == 1:
                out = greedy(model, b["src"], b["src_mask"], max_len)
            else:
                out = beam_search(model, b["src"], b["src_mask"], beam, max_len, float(dec.length_penalty))
            for i, h in zip(idx, out):
                hyps[i] = h
        return self.vocab.decode(hyps)

    def nll(self, model: nn.Module, enc: Encoded) -> float:
        """Mean negative log-likelihood per target token (no label smoothing), teacher forced."""
        total, count = 0.0, 0
        for _, b in eval_batches(enc, int(self.cfg.task.decode.batch_size), self.device):
            logits = model(b["src"], b["src_mask"], b["tgt_in"])
            total += float(F.cross_entropy(logits.flatten(0, 1).float(), b["tgt_out"].flatten(), ignore_index=PAD, reduction="sum"))
            count += int(b["tgt_mask"].sum())
        return total / count


class TransformerTask(TranslationTask):
    """Transformer base, batches of ~train.batch_tokens padded tokens (Table 4)."""

    name = "transformer"
    supported_norms = ("none", "layernorm", "rmsnorm", "prmsnorm")
    batching = "tokens"

    def model_class(self):
        from .transformer import Transformer

        return Transformer


class RNNSearchTask(TranslationTask):
    """Nematus-style RNNSearch, batches of train.batch_size sentences (Tables 2, 3, 5)."""

    name = "rnnsearch"
    supported_norms = SUPPORTED_NORMS
    batching = "sentences"

    def model_class(self):
        from .rnnsearch import RNNSearch

        return RNNSearch

    @torch.no_grad()
    def evaluate(self, model: nn.Module, split: str) -> dict[str, float]:
        out = super().evaluate(model, split)
        if split == "test":
            out.update(self.table5(getattr(model, "module", model)))
        return out

    def table5(self, model: nn.Module) -> dict[str, float]:
        """Mean and std of the decoder GRU's hidden-to-hidden summed inputs on the valid set, at
        target positions 1..4 and over all positions (the paper's Table 5)."""
        acc = torch.zeros(5, 3, dtype=torch.float64)
        for _, b in eval_batches(self.data.valid, int(self.cfg.task.decode.batch_size), self.device):
            acc += model.recurrent_input_moments(b["src"], b["src_mask"], b["tgt_in"], b["tgt_mask"]).double().cpu()
        out = {}
        for row, label in enumerate(("1", "2", "3", "4", "all")):
            count, total, squares = acc[row].tolist()
            mean = total / count if count else math.nan
            var = squares / count - mean * mean if count else math.nan
            out[f"table5_mean_{label}"] = mean
            out[f"table5_std_{label}"] = math.sqrt(max(var, 0.0)) if count else math.nan
        return out
