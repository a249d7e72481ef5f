"""Machine translation tasks (paper Tables 2-5, Figures 1-4): RNNSearch and Transformer.

Both share the data pipeline (data.py), the label-smoothed loss, decoding (beam.py) and BLEU (bleu.py);
they differ in the model, the batching (sentences vs tokens) and the supported norms.
"""
from __future__ import annotations

import math
from typing import ClassVar

import numpy as np
import torch
from torch import Tensor, nn

from ...nn import cross_entropy
from ..base import Task, check_int, check_number, setting
from .beam import DEFAULT_MAX_DECODE_LEN, beam_search, greedy, max_length
from .bleu import corpus_bleu
from .rnnsearch import SUPPORTED_NORMS
from .data import Encoded, TranslationData, eval_batches, subset
from .vocab import PAD


class TranslationTask(Task):
    supported_data = ("synthetic", "text", "multi30k", "wmt14", "wmt14_nematus")
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
        self.translations: dict[str, list[str]] = {}  # split -> the last test evaluation's translations

    def test_outputs(self) -> dict[str, list[str]]:
        return self.translations

    def provenance(self) -> dict:
        """summary.json's sacreBLEU signature and `data_info` (the data variant, e.g. which newstest2014,
        and the test sets' sizes)."""
        return {"bleu_signature": self.bleu_signature, "data_info": self.data_info}

    @classmethod
    def check_config(cls, cfg) -> None:
        """Decode/eval settings (and the two loss settings), checked before the corpus is read."""
        check_int(cfg, "task.max_len", 1)
        check_number(cfg, "task.label_smoothing", 0.0, 1.0, high_open=True)
        loss_per = (cfg.get("task") or {}).get("loss_per")  # absent or null: token
        if loss_per not in (None, "token", "sentence"):
            raise ValueError(f"task.loss_per must be token or sentence, got {loss_per!r}")
        for key in ("beam", "valid_beam", "batch_size"):
            check_int(cfg, f"task.decode.{key}", 1)
        check_int(cfg, "task.decode.valid_sentences", 1, optional=True)
        check_int(cfg, "task.maxibatch", 1, optional=True)
        check_int(cfg, "task.decode.valid_loss_sentences", 1, optional=True)
        check_number(cfg, "task.decode.length_penalty", 0.0)
        check_number(cfg, "task.decode.max_len_a", 0.0)
        check_int(cfg, "task.decode.max_len_b", 0)
        check_int(cfg, "task.decode.max_len", 1, optional=True)
        check_int(cfg, "task.decode.max_eval_len", 1, optional=True)
        check_int(cfg, "data.dev_pairs", 1, optional=True)
        for split in ("train", "valid", "test"):  # data=synthetic: an empty split would fail at evaluation
            check_int(cfg, f"task.synthetic.{split}", 1)
        if setting(cfg, "task.decode.max_len_a") == 0 and setting(cfg, "task.decode.max_len_b") == 0:
            raise ValueError("task.decode.max_len_a and task.decode.max_len_b are both 0: decoding would stop "
                             "before the first token; make either positive")

    def model_class(self) -> type[nn.Module]:
        raise NotImplementedError

    def build_model(self) -> nn.Module:
        cls = self.model_class()
        cross_entropy.prepare(self.device)  # its kernel built before any clock starts
        return cls(self.cfg.task.model, len(self.vocab), PAD, self.norms,
                   src_vocab_size=len(self.data.src_vocab)).to(self.device)

    def train_batch(self, step: int, rank: int = 0, world_size: int = 1) -> dict[str, Tensor]:
        return self.data.train_batch(step, rank, world_size, self.device)

    @property
    def loss_mean_over(self) -> str:
        return "sentences" if self.cfg.task.get("loss_per") == "sentence" else "tokens"

    def loss(self, model: nn.Module, batch: dict[str, Tensor]) -> tuple[Tensor, int]:
        """Label-smoothed cross-entropy (EOS included, padding excluded), summed over the batch's
        target tokens and divided by their number (task.loss_per=token) or, as Nematus does, by
        the number of sentences (task.loss_per=sentence: each sentence's summed cost, averaged).
        n is the number of target tokens either way (throughput)."""
        logits = model(batch["src"], batch["src_mask"], batch["tgt_in"])
        n = int(batch["tgt_mask"].sum())
        loss = cross_entropy.smoothed_cross_entropy(logits.flatten(0, 1).float(), batch["tgt_out"].flatten(), PAD,
                                                    float(self.cfg.task.label_smoothing))
        return loss / (len(batch["tgt_out"]) if self.loss_mean_over == "sentences" else n), n

    def summed_loss(self, loss: float, n: int, batch: dict[str, Tensor], world_size: int = 1) -> float:
        """loss_per=sentence: the mean per sentence times the sentences of every rank's batch (ranks'
        shards hold the same number of sentences, up to one); token: the mean per token times n."""
        if self.loss_mean_over == "sentences":
            return loss * len(batch["tgt_out"]) * world_size
        return loss * n

    # Evaluation -----------------------------------------------------------------------------
    @torch.no_grad()
    def evaluate(self, model: nn.Module, split: str) -> dict[str, float]:
        """valid: BLEU with decode.valid_beam on the first decode.valid_sentences sentences and the loss per
        target token on the first decode.valid_loss_sentences (null: all), on the dev split when
        data.dev_pairs holds one out, else on valid. test: "<test>_bleu" and "<test>_sentences" per test
        split with decode.beam, and "valid_beam_bleu" on the whole valid set. Hypotheses are at most
        min(max_len_a * source length + max_len_b, max_len) tokens; decoding stops between batches and
        steps once `stop_requested()` says so."""
        model = getattr(model, "module", model)  # DDP wrapper -> the model with encode/decode_step
        dec = self.cfg.task.decode
        if split == "valid":
            n = dec.get("valid_sentences")
            (src, ref), enc = self.data.dev_text, self.data.dev
            if n is not None and n < len(src):
                src, ref, enc = src[:n], ref[:n], subset(enc, np.arange(n))
            bleu, _ = corpus_bleu(self.translate(model, enc, int(dec.valid_beam)), ref)
            scored, m = self.data.dev, dec.get("valid_loss_sentences")
            if m is not None and m < len(scored):
                scored = subset(scored, np.arange(m))
            return {"bleu": bleu, "loss": self.nll(model, scored)}
        if split == "test":
            self.translations = {"valid": self.translate(model, self.data.valid, int(dec.beam))}
            out = {"valid_beam_bleu": corpus_bleu(self.translations["valid"], self.data.valid_text[1])[0]}
            for name, ((_, ref), enc) in self.data.tests.items():
                self.translations[name] = self.translate(model, enc, int(dec.beam))
                out[f"{name}_bleu"] = corpus_bleu(self.translations[name], ref)[0]
                out[f"{name}_sentences"] = float(len(ref))
            return out
        raise ValueError(f"evaluate split must be 'valid' or 'test', got {split!r}")

    def translate(self, model: nn.Module, enc: Encoded, beam: int) -> list[str]:
        """Detokenized translations of every source sentence of a split, in corpus order."""
        dec = self.cfg.task.decode
        cap = dec.get("max_len")
        cap = DEFAULT_MAX_DECODE_LEN if cap is None else int(cap)
        hyps: list[list[int]] = [[] for _ in range(len(enc))]
        for idx, b in eval_batches(enc, int(dec.batch_size), self.device):
            self.check_stop()
            max_len = max_length(b["src_mask"], float(dec.max_len_a), int(dec.max_len_b), cap)
            if beam == 1:
                out = greedy(model, b["src"], b["src_mask"], max_len, should_stop=self.stop_requested)
            else:
                out = beam_search(model, b["src"], b["src_mask"], beam, max_len, float(dec.length_penalty),
                                  should_stop=self.stop_requested)
            for i, h in zip(idx, out):
                hyps[i] = h
        return self.vocab.decode(hyps)

    @torch.no_grad()
    def nll(self, model: nn.Module, enc: Encoded) -> float:
        """Mean negative log-likelihood per target token (no label smoothing), teacher forced."""
        total, count = 0.0, 0
        for _, b in eval_batches(enc, int(self.cfg.task.decode.batch_size), self.device):
            self.check_stop()
            logits = model(b["src"], b["src_mask"], b["tgt_in"])
            total += float(cross_entropy.smoothed_cross_entropy(logits.flatten(0, 1).float(), b["tgt_out"].flatten(), PAD, 0.0))
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

    @classmethod
    def check_config(cls, cfg) -> None:
        super().check_config(cfg)
        where = (cfg.get("task") or {}).get("table5_stat")  # absent or null: post_norm
        if where not in (None, "post_norm", "pre_norm"):
            raise ValueError(f"task.table5_stat must be post_norm or pre_norm, got {where!r}")

    @torch.no_grad()
    def evaluate(self, model: nn.Module, split: str) -> dict[str, float]:
        out = super().evaluate(model, split)
        if split == "test":
            out.update(self.table5(getattr(model, "module", model)))
        return out

    def table5(self, model: nn.Module) -> dict[str, float]:
        """Mean and std of the decoder GRU's hidden-to-hidden summed inputs on the valid set, at
        target positions 1..4 and over all positions (the paper's Table 5). task.table5_stat:
        post_norm (default: after GRU1's state norms) or pre_norm (RNNSearch.recurrent_input_moments)."""
        where = str(self.cfg.task.get("table5_stat") or "post_norm")
        acc = torch.zeros(5, 3, dtype=torch.float64)
        for _, b in eval_batches(self.data.valid, int(self.cfg.task.decode.batch_size), self.device):
            self.check_stop()
            acc += model.recurrent_input_moments(b["src"], b["src_mask"], b["tgt_in"], b["tgt_mask"], where).double().cpu()
        out = {}
        for row, label in enumerate(("1", "2", "3", "4", "all")):
            count, total, squares = acc[row].tolist()
            mean = total / count if count else math.nan
            var = squares / count - mean * mean if count else math.nan
            out[f"table5_mean_{label}"] = mean
            out[f"table5_std_{label}"] = math.sqrt(max(var, 0.0)) if count else math.nan
        return out
