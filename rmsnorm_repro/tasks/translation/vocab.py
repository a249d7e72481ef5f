"""Joint subword vocabulary (sentencepiece BPE), trained once per corpus and cached.

One model covers source and target (joint BPE, as the paper's 32k-merge WMT14 setup), so the
Transformer can share its embeddings. The cache key is the corpus hash plus every training
setting, so a changed corpus or vocab size never reuses a stale model.
"""
from __future__ import annotations

import hashlib
import io
import os
from pathlib import Path
from typing import Iterable, Sequence

import sentencepiece as spm
from ...atomic import cached

PAD, UNK, BOS, EOS = 0, 1, 2, 3


class Vocab:
    """Encodes raw sentences to ids (no BOS/EOS added) and decodes ids back to detokenized text."""

    pad_id, unk_id, bos_id, eos_id = PAD, UNK, BOS, EOS

    def __init__(self, model_file: str | os.PathLike):
        self.model_file = str(model_file)
        self.sp = spm.SentencePieceProcessor(model_file=self.model_file)

    def __len__(self) -> int:
        return self.sp.get_piece_size()

    def encode(self, sentences: Sequence[str]) -> list[list[int]]:
        return self.sp.encode(list(sentences))

    def decode(self, ids: Sequence[Sequence[int]]) -> list[str]:
        """Detokenize; everything from the first EOS on is dropped, specials are skipped."""
        cut = []
        for seq in ids:
            seq = list(seq)
            if EOS in seq:
                seq = seq[: seq.index(EOS)]
            cut.append([i for i in seq if i > EOS])
        return self.sp.decode(cut)

    def plain_text(self, lines: Sequence[str]) -> list[str]:
        """Target-side training text as BLEU's references: raw text already (sentencepiece reads it as it is)."""
        return list(lines)


def corpus_hash(*sides: Iterable[str]) -> str:
    """sha256 over the sentences of every side (order matters); identifies a training corpus."""
    h = hashlib.sha256()
    for side in sides:
        for line in side:
            h.update(line.encode("utf-8"))
            h.update(b"\n")
        h.update(b"\0")
    return h.hexdigest()


def build_vocab(
    src: Sequence[str],
    tgt: Sequence[str],
    vocab_size: int,
    cache_dir: str | os.PathLike,
    corpus_key: str,
    max_sentences: int = 2_000_000,
    seed: int = 0,
) -> Vocab:
    """Train (or load from cache) a joint BPE model on the source and target training sentences.

    `max_sentences` caps sentencepiece's input (a seeded sample of the joint text), which keeps
    WMT14-sized corpora trainable in minutes; small corpora are used whole. vocab_size is a soft
    limit (hard_vocab_limit=False) so that tiny corpora with fewer pieces than asked still train.
    """
    settings = f"bpe|v{vocab_size}|n{max_sentences}|s{seed}|cov1.0|nmt_nfkc"
    key = hashlib.sha256(f"{corpus_key}|{settings}".encode()).hexdigest()[:16]
    path = Path(cache_dir) / "spm" / f"{key}.model"

    def train(tmp: Path) -> None:
        proto = io.BytesIO()
        spm.set_random_generator_seed(seed)  # the input sample of big corpora is reproducible
        spm.SentencePieceTrainer.train(
            sentence_iterator=_joint(src, tgt),
            model_writer=proto,
            model_type="bpe",
            vocab_size=vocab_size,
            hard_vocab_limit=False,
            character_coverage=1.0,
            input_sentence_size=max_sentences,
            shuffle_input_sentence=True,
            pad_id=PAD, unk_id=UNK, bos_id=BOS, eos_id=EOS,
            num_threads=max(1, os.cpu_count() or 1),
            minloglevel=2,
        )
        tmp.write_bytes(proto.getvalue())

    return cached(path, Vocab, train)


def _joint(src: Sequence[str], tgt: Sequence[str]) -> Iterable[str]:
    for s, t in zip(src, tgt):
        if s.strip():
            yield s
        if t.strip():
            yield t
