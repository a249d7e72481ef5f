"""Corpus BLEU exactly as the paper reports it: sacreBLEU, detokenized, case-sensitive, 13a."""
from __future__ import annotations

from typing import Sequence

from sacrebleu.metrics import BLEU


def bleu_metric() -> BLEU:
    """The suite's BLEU: detokenized, case-sensitive, 13a, exponential smoothing (sacreBLEU's defaults)."""
    return BLEU(lowercase=False, tokenize="13a", smooth_method="exp")


def corpus_bleu(hypotheses: Sequence[str], references: Sequence[str]) -> tuple[float, str]:
    """(BLEU score, sacreBLEU signature) of detokenized hypotheses against one raw reference each."""
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    metric = bleu_metric()
    score = metric.corpus_score(list(hypotheses), [list(references)])
    return float(score.score), str(metric.get_signature())
