"""Batched beam search and greedy decoding over the seq2seq protocol both models implement:

    state = model.encode(src, src_mask)                # tensors with batch in dim 0
    log_probs, state = model.decode_step(state, prefix)  # prefix: Long[B, t], starts with BOS

Beam search keeps K hypotheses per sentence in one (B*K)-row batch. A finished hypothesis stays
in its beam with a frozen score (it may only "emit" EOS at no cost), so finished and open ones
compete on the same raw log-probability; the winner per sentence is picked at the end by
score / length**length_penalty (fairseq's normalization; 0 = raw score, 1 = per-token average).
"""
from __future__ import annotations

import torch
from torch import Tensor, nn

from .vocab import BOS, EOS, PAD


def _reorder(state: dict[str, Tensor], idx: Tensor) -> dict[str, Tensor]:
    return {k: v.index_select(0, idx) for k, v in state.items()}


def max_length(src_mask: Tensor, a: float, b: int) -> int:
    """Decoding stops after a * (longest source) + b tokens."""
    return int(a * int(src_mask.sum(1).max()) + b)


@torch.no_grad()
def greedy(model: nn.Module, src: Tensor, src_mask: Tensor, max_len: int) -> list[list[int]]:
    """Argmax decoding; token lists without BOS, cut before EOS."""
    state = model.encode(src, src_mask)
    prefix = torch.full((src.size(0), 1), BOS, dtype=torch.long, device=src.device)
    done = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
    for _ in range(max_len):
        log_probs, state = model.decode_step(state, prefix)
        nxt = log_probs.argmax(-1).masked_fill(done, PAD)
        prefix = torch.cat([prefix, nxt[:, None]], 1)
        done |= nxt == EOS
        if done.all():
            break
    return [_cut(row) for row in prefix[:, 1:].tolist()]


@torch.no_grad()
def beam_search(model: nn.Module, src: Tensor, src_mask: Tensor, beam: int, max_len: int,
                length_penalty: float = 1.0) -> list[list[int]]:
    """Best hypothesis per sentence (token lists without BOS, cut before EOS)."""
    b, k, dev = src.size(0), beam, src.device
    state = _reorder(model.encode(src, src_mask), torch.arange(b, device=dev).repeat_interleave(k))
    prefix = torch.full((b * k, 1), BOS, dtype=torch.long, device=dev)
    scores = torch.full((b, k), float("-inf"), device=dev)
    scores[:, 0] = 0.0  # all K rows start identical: expand only the first
    done = torch.zeros(b * k, dtype=torch.bool, device=dev)
    lengths = torch.zeros(b * k, device=dev)  # tokens generated, EOS included
    for _ in range(max_len):
        log_probs, state = model.decode_step(state, prefix)
        log_probs = log_probs.float()
        v = log_probs.size(-1)
        # A finished row continues only with EOS at zero cost, keeping its score.
        frozen = torch.full_like(log_probs, float("-inf"))
        frozen[:, EOS] = 0.0
        log_probs = torch.where(done[:, None], frozen, log_probs)
        cand = (scores.view(-1, 1) + log_probs).view(b, k * v)
        scores, flat = cand.topk(k, dim=1)
        rows = (torch.arange(b, device=dev)[:, None] * k + flat // v).view(-1)
        tokens = (flat % v).view(-1)
        was_done = done.index_select(0, rows)
        tokens = tokens.masked_fill(was_done, PAD)
        lengths = lengths.index_select(0, rows) + (~was_done).float()
        done = was_done | (tokens == EOS)
        prefix = torch.cat([prefix.index_select(0, rows), tokens[:, None]], 1)
        state = _reorder(state, rows)
        if done.all():
            break
    norm = scores.view(-1) / lengths.clamp(min=1) ** length_penalty
    best = norm.view(b, k).argmax(1) + torch.arange(b, device=dev) * k
    return [_cut(row) for row in prefix.index_select(0, best)[:, 1:].tolist()]


def _cut(tokens: list[int]) -> list[int]:
    return tokens[: tokens.index(EOS)] if EOS in tokens else [t for t in tokens if t != PAD]
