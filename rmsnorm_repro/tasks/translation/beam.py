"""Batched beam search and greedy decoding over the seq2seq protocol both models implement:

    state = model.encode(src, src_mask)                # tensors with batch in dim 0
    log_probs, state = model.decode_step(state, prefix)  # prefix: Long[B, t], starts with BOS
    model.source_state (optional): names of the state's tensors that depend on the source only (encoder output,
        masks): the same for every hypothesis of a sentence, so a beam search step never reorders them.

A sentence leaves the batch once its result is fixed (greedy: at its EOS; beam: when all K of its
hypotheses have ended), and its rows of every state tensor are dropped, so a step costs what the open
sentences need. A row's computation does not depend on the other rows of the batch, so the hypotheses
are those of decoding the whole batch to the end (tests/tasks/test_translation_beam.py).
"""
from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor, nn

from ..base import EvaluationInterrupted
from .vocab import BOS, EOS, PAD

#: the absolute output length cap (tokens) when task.decode.max_len is not set
DEFAULT_MAX_DECODE_LEN = 256


def _reorder(state: dict[str, Tensor], idx: Tensor, keep: frozenset[str] = frozenset()) -> dict[str, Tensor]:
    """Rows `idx` of every tensor of the state but those named in `keep`."""
    return {k: v if k in keep else v.index_select(0, idx) for k, v in state.items()}


def max_length(src_mask: Tensor, a: float, b: int, cap: int = DEFAULT_MAX_DECODE_LEN) -> int:
    """Decoding stops after min(a * (longest source) + b, cap) tokens: the cap bounds decoding time when a
    source line is absurdly long."""
    return min(int(a * int(src_mask.sum(1).max()) + b), int(cap))


def _check(should_stop: Callable[[], bool] | None) -> None:
    """Both decoders ask `should_stop` once a decoding step: a stop request ends an evaluation within a step."""
    if should_stop is not None and should_stop():
        raise EvaluationInterrupted("decoding stopped early: a stop was requested")


@torch.no_grad()
def greedy(model: nn.Module, src: Tensor, src_mask: Tensor, max_len: int,
           should_stop: Callable[[], bool] | None = None) -> list[list[int]]:
    """Argmax decoding; token lists without BOS, cut before EOS."""
    state = model.encode(src, src_mask)
    b, dev = src.size(0), src.device
    prefix = torch.full((b, 1), BOS, dtype=torch.long, device=dev)
    out = torch.full((b, max_len), PAD, dtype=torch.long, device=dev)
    rows = torch.arange(b, device=dev)  # the sentence each open row decodes
    for t in range(max_len):
        _check(should_stop)
        log_probs, state = model.decode_step(state, prefix)
        nxt = log_probs.max(-1).indices  # the first maximum, as argmax, ~3x faster on CPU
        out[rows, t] = nxt
        prefix = torch.cat([prefix, nxt[:, None]], 1)
        open_ = nxt != EOS
        if not open_.all():
            if not open_.any():
                break
            keep = open_.nonzero().squeeze(1)
            state, prefix, rows = _reorder(state, keep), prefix.index_select(0, keep), rows.index_select(0, keep)
    return [_cut(row) for row in out.tolist()]


@torch.no_grad()
def beam_search(model: nn.Module, src: Tensor, src_mask: Tensor, beam: int, max_len: int,
                length_penalty: float = 1.0, should_stop: Callable[[], bool] | None = None) -> list[list[int]]:
    """Best hypothesis per sentence (token lists without BOS, cut before EOS). A sentence whose K
    hypotheses have all ended is decided: from then on its beam would only repeat EOS at no cost.

    Beam search keeps K hypotheses per sentence in one (B*K)-row batch. A finished hypothesis stays
    in its beam with a frozen score (it may only "emit" EOS at no cost), so finished and open ones
    compete on the same raw log-probability; the winner per sentence is picked at the end by
    score / length**length_penalty (fairseq's normalization; 0 = raw score, 1 = per-token average).
    Open hypotheses can push a finished one out of the beam (their raw score is still higher); it is
    not lost: the best finished hypothesis of each sentence is also kept aside, and wins at the end
    when its normalized score beats every hypothesis left in the beam."""
    if beam < 1:
        raise ValueError(f"beam must be at least 1, got {beam}")
    b, k, dev = src.size(0), beam, src.device
    state = _reorder(model.encode(src, src_mask), torch.arange(b, device=dev).repeat_interleave(k))
    # A step reorders rows within each sentence's K rows only, so per-sentence tensors stay as they are: no
    # copy of every layer's cross-attention keys/values a step (scripts/bench_beam.py times both ways).
    source_state = frozenset(getattr(model, "source_state", ()))
    prefix = torch.full((b * k, 1), BOS, dtype=torch.long, device=dev)
    scores = torch.full((b, k), float("-inf"), device=dev)
    scores[:, 0] = 0.0  # all K rows start identical: expand only the first
    done = torch.zeros(b * k, dtype=torch.bool, device=dev)
    lengths = torch.zeros(b * k, device=dev)  # tokens generated, EOS included
    # the best finished hypothesis per sentence, kept even after open ones push it out of the beam
    kept_score = torch.full((b,), float("-inf"), device=dev)
    kept = torch.full((b, max_len + 1), PAD, dtype=torch.long, device=dev)
    sentences = torch.arange(b, device=dev)  # the sentence of each beam still in the batch
    results: list[list[int]] = [[] for _ in range(b)]
    for _ in range(max_len):
        _check(should_stop)
        log_probs, state = model.decode_step(state, prefix)
        log_probs = log_probs.float()
        n, v = scores.size(0), log_probs.size(-1)
        # A finished row continues only with EOS at zero cost, keeping its score.
        frozen = torch.full_like(log_probs, float("-inf"))
        frozen[:, EOS] = 0.0
        log_probs = torch.where(done[:, None], frozen, log_probs)
        cand = (scores.view(-1, 1) + log_probs).view(n, k * v)
        scores, flat = cand.topk(k, dim=1)
        rows = (torch.arange(n, device=dev)[:, None] * k + flat // v).view(-1)
        tokens = (flat % v).view(-1)
        was_done = done.index_select(0, rows)
        tokens = tokens.masked_fill(was_done, PAD)
        lengths = lengths.index_select(0, rows) + (~was_done).float()
        done = was_done | (tokens == EOS)
        prefix = torch.cat([prefix.index_select(0, rows), tokens[:, None]], 1)
        state = _reorder(state, rows, source_state)
        finished_now = (done & ~was_done).view(n, k)
        if finished_now.any():
            norm = (scores / lengths.view(n, k).clamp(min=1) ** length_penalty).masked_fill(~finished_now, float("-inf"))
            top, arg = norm.max(1)
            better = top > kept_score
            kept_score = torch.where(better, top, kept_score)
            chosen = prefix.index_select(0, arg + torch.arange(n, device=dev) * k)
            kept[better, : prefix.size(1)] = chosen[better]
        ended = done.view(n, k).all(1)
        if ended.any():
            _finish(results, ended.nonzero().squeeze(1), sentences, scores, lengths, prefix, kept_score, kept, length_penalty)
            if ended.all():
                return results
            live = (~ended).nonzero().squeeze(1)
            live_rows = (live[:, None] * k + torch.arange(k, device=dev)).view(-1)
            scores, kept_score, kept, sentences = scores[live], kept_score[live], kept[live], sentences[live]
            prefix, done, lengths = prefix[live_rows], done[live_rows], lengths[live_rows]
            state = _reorder(state, live_rows)
    _finish(results, torch.arange(scores.size(0), device=dev), sentences, scores, lengths, prefix, kept_score, kept,
            length_penalty)
    return results


def _finish(results: list[list[int]], which: Tensor, sentences: Tensor, scores: Tensor, lengths: Tensor,
            prefix: Tensor, kept_score: Tensor, kept: Tensor, length_penalty: float) -> None:
    """The winner of each beam in `which` into results[its sentence]: the best normalized hypothesis in the
    beam, or the kept finished one when that is strictly better than all left in the beam."""
    k = scores.size(1)
    rows = (which[:, None] * k + torch.arange(k, device=which.device)).view(-1)
    norm = (scores[which].view(-1) / lengths[rows].clamp(min=1) ** length_penalty).view(-1, k)
    best = norm.argmax(1)
    best_norm = norm.gather(1, best[:, None]).squeeze(1)
    out = prefix.index_select(0, rows.view(-1, k).gather(1, best[:, None]).squeeze(1))[:, 1:].tolist()
    use_kept = (kept_score[which] > best_norm).tolist()
    kept_rows = kept[which, 1:].tolist()
    for i, s in enumerate(sentences[which].tolist()):
        results[s] = _cut(kept_rows[i] if use_kept[i] else out[i])


def _cut(tokens: list[int]) -> list[int]:
    return tokens[: tokens.index(EOS)] if EOS in tokens else [t for t in tokens if t != PAD]
