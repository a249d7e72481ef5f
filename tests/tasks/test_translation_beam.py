"""BLEU is sacreBLEU's; beam search is exact where it can be checked; beam 1 is greedy."""
import itertools
import math

import pytest
import sacrebleu
import torch
from omegaconf import OmegaConf

from rmsnorm_repro.norms import build_normalization
from rmsnorm_repro.tasks.translation.beam import beam_search, greedy, max_length
from rmsnorm_repro.tasks.translation.bleu import corpus_bleu
from rmsnorm_repro.tasks.translation.transformer import Transformer
from rmsnorm_repro.tasks.translation.vocab import BOS, EOS, PAD


def test_bleu_equals_sacrebleu_on_the_same_strings():
    refs = ["The cat sat on the mat.", "Ein Hund läuft im Park, schnell!", "It's 5 o'clock."]
    hyps = ["The cat sat on a mat.", "ein Hund läuft im Park schnell!", "It's five o'clock."]
    score, signature = corpus_bleu(hyps, refs)
    assert score == pytest.approx(sacrebleu.corpus_bleu(hyps, [refs]).score, abs=1e-12)
    assert 0 < score < 100
    assert corpus_bleu(refs, refs)[0] == pytest.approx(100.0)
    # case-sensitive (the lowercase "ein" costs points) and 13a, as the paper
    assert score < sacrebleu.corpus_bleu(hyps, [refs], lowercase=True).score
    for part in ("nrefs:1", "case:mixed", "tok:13a", "smooth:exp", f"version:{sacrebleu.__version__}"):
        assert part in signature
    with pytest.raises(ValueError, match="references"):
        corpus_bleu(hyps, refs[:2])


class TableModel(torch.nn.Module):
    """A seq2seq 'model' whose next-token log-probabilities are a fixed function of the prefix."""

    def __init__(self, vocab=7, seed=0):
        super().__init__()
        self.vocab, self.seed = vocab, seed

    def encode(self, src, src_mask):
        return {"src_mask": src_mask, "sid": src[:, :1].float()}

    def log_probs(self, sid: float, prefix: tuple) -> torch.Tensor:
        g = torch.Generator().manual_seed(hash((self.seed, sid, prefix)) % (2 ** 31))
        logits = torch.randn(self.vocab, generator=g) * 2
        logits[:3] = -math.inf  # never PAD, UNK or BOS
        return torch.log_softmax(logits, -1)

    def decode_step(self, state, prev):
        rows = [self.log_probs(float(s), tuple(p)) for s, p in zip(state["sid"][:, 0].tolist(), prev.tolist())]
        return torch.stack(rows), state


def exhaustive(model: TableModel, sid: float, max_len: int, alpha: float) -> list[int]:
    """The best hypothesis by score / len**alpha over every token sequence (EOS-ended or max_len)."""
    best, best_score = None, -math.inf
    words = range(EOS, model.vocab)
    for n in range(1, max_len + 1):
        for seq in itertools.product(words, repeat=n):
            if EOS in seq[:-1] or (n < max_len and seq[-1] != EOS):
                continue  # EOS ends a hypothesis; only at max_len may one stop without it
            score = sum(float(model.log_probs(sid, (BOS, *seq[:i]))[seq[i]]) for i in range(n))
            if score / n ** alpha > best_score:
                best, best_score = list(seq), score / n ** alpha
    return best[:-1] if best[-1] == EOS else best


@pytest.mark.parametrize("alpha", [0.0, 1.0])
def test_a_wide_beam_finds_the_exhaustive_optimum(alpha):
    model = TableModel(vocab=7)
    src = torch.tensor([[11], [12], [13]])
    mask = torch.ones_like(src, dtype=torch.bool)
    # 4 real tokens, length <= 3: a beam of 4**3 keeps every hypothesis, so it must be exact
    got = beam_search(model, src, mask, beam=64, max_len=3, length_penalty=alpha)
    assert got == [exhaustive(model, float(s), 3, alpha) for s in (11, 12, 13)]


def test_beam_beats_greedy_somewhere_and_never_scores_worse():
    model = TableModel(vocab=9, seed=3)
    src = torch.arange(20, 40)[:, None]
    mask = torch.ones_like(src, dtype=torch.bool)

    def score(sid, seq):
        full = seq + [EOS] if len(seq) < 4 else seq
        return sum(float(model.log_probs(sid, (BOS, *full[:i]))[full[i]]) for i in range(len(full)))

    g = greedy(model, src, mask, max_len=4)
    b = beam_search(model, src, mask, beam=5, max_len=4, length_penalty=0.0)
    gs = [score(float(s), h) for s, h in zip(src[:, 0].tolist(), g)]
    bs = [score(float(s), h) for s, h in zip(src[:, 0].tolist(), b)]
    assert all(x >= y - 1e-9 for x, y in zip(bs, gs))
    assert any(x > y + 1e-6 for x, y in zip(bs, gs))


def test_beam_one_equals_greedy_on_a_transformer():
    torch.manual_seed(0)
    cfg = OmegaConf.create(dict(encoder_layers=1, decoder_layers=2, d_model=16, ffn_dim=32, heads=2, dropout=0.0,
                                pre_norm=False, share_embeddings=True, init_center=0.0))
    m = Transformer(cfg, 30, 0, build_normalization("layernorm")).eval()
    src = torch.randint(4, 30, (6, 7))
    mask = torch.arange(7)[None] < torch.tensor([7, 3, 5, 7, 1, 4])[:, None]
    n = max_length(mask, 1.5, 4)
    assert n == int(1.5 * 7 + 4)
    assert beam_search(m, src, mask, beam=1, max_len=n) == greedy(m, src, mask, n)
    wide = beam_search(m, src, mask, beam=4, max_len=n)
    assert len(wide) == 6 and all(EOS not in h for h in wide)


@pytest.mark.parametrize("kind", ["transformer", "rnnsearch"])
def test_source_state_is_per_sentence_so_skipping_its_reorder_changes_nothing(kind, monkeypatch):
    """Beam search leaves model.source_state (encoder output, masks) unreordered: each step reorders rows
    within a sentence's K rows, and those tensors are the same in all K. Same hypotheses as reordering all."""
    from rmsnorm_repro.tasks.translation.rnnsearch import RNNSearch

    torch.manual_seed(0)
    norms = build_normalization("rmsnorm")
    if kind == "transformer":
        cfg = OmegaConf.create(dict(encoder_layers=1, decoder_layers=2, d_model=16, ffn_dim=32, heads=2, dropout=0.0,
                                    pre_norm=False, share_embeddings=True, init_center=0.0))
        m = Transformer(cfg, 30, 0, norms).eval()
        assert set(m.source_state) == {"src_mask", "ck0", "cv0", "ck1", "cv1"}
    else:
        cfg = dict(emb=8, hidden=12, dropout=0.0, tie_embeddings=False, init_std=0.5, init_center=0.0)
        m = RNNSearch(cfg, 30, 0, norms).eval()
    src = torch.randint(4, 30, (6, 7))
    mask = torch.arange(7)[None] < torch.tensor([7, 3, 5, 7, 1, 4])[:, None]
    state = m.encode(src, mask)
    assert set(m.source_state) < set(state)  # names of real state tensors, and not all of them
    fast = beam_search(m, src, mask, beam=5, max_len=20, length_penalty=0.6)
    monkeypatch.setattr(m, "source_state", (), raising=False)
    assert beam_search(m, src, mask, beam=5, max_len=20, length_penalty=0.6) == fast
    assert len({tuple(h) for h in fast}) > 1


class FullRecompute(torch.nn.Module):
    """Decoding as it was before any state was cached: every step runs the whole prefix through the model."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def encode(self, src, src_mask):
        return {"src": src, "src_mask": src_mask}

    def decode_step(self, state, prefix):
        return torch.log_softmax(self.model(state["src"], state["src_mask"], prefix)[:, -1].float(), -1), state


def reference_greedy(model, src, src_mask, max_len):
    """Argmax decoding of the whole batch to the end (no sentence leaves it early)."""
    prefix = torch.full((src.size(0), 1), BOS, dtype=torch.long)
    for _ in range(max_len):
        prefix = torch.cat([prefix, model.decode_step(model.encode(src, src_mask), prefix)[0].argmax(-1)[:, None]], 1)
    return [row[: row.index(EOS)] if EOS in row else [t for t in row if t != PAD] for row in prefix[:, 1:].tolist()]


def small_model(kind: str, vocab: int = 12):
    from rmsnorm_repro.tasks.translation.rnnsearch import RNNSearch

    torch.manual_seed(5)
    norms = build_normalization("rmsnorm")
    if kind == "transformer":
        cfg = OmegaConf.create(dict(encoder_layers=2, decoder_layers=2, d_model=16, ffn_dim=32, heads=2, dropout=0.0,
                                    pre_norm=False, share_embeddings=True, init_center=0.0))
        return Transformer(cfg, vocab, 0, norms).eval()
    cfg = dict(emb=8, hidden=12, dropout=0.0, tie_embeddings=False, init_std=0.5, init_center=0.0)
    return RNNSearch(cfg, vocab, 0, norms).eval()


@pytest.mark.parametrize("kind", ["transformer", "rnnsearch"])
def test_decoding_with_cached_state_and_early_leavers_equals_full_recompute(kind):
    """Greedy and beam search (cached encoder and decoder state, sentences leaving the batch once decided) give
    token for token the hypotheses of recomputing the whole prefix every step with the whole batch to the end."""
    m = small_model(kind)
    torch.manual_seed(5)
    src = torch.randint(4, 12, (9, 8))
    mask = torch.arange(8)[None] < torch.tensor([8, 3, 5, 8, 1, 4, 6, 2, 7])[:, None]
    fast = greedy(m, src, mask, 15)
    assert fast == reference_greedy(FullRecompute(m), src, mask, 15)
    assert len({len(h) for h in fast}) > 1  # sentences end at different steps: some leave the batch early
    for k in (1, 3):
        fast = beam_search(m, src, mask, beam=k, max_len=15, length_penalty=0.6)
        assert fast == beam_search(FullRecompute(m), src, mask, beam=k, max_len=15, length_penalty=0.6)
        # each sentence decoded alone: what its beam gives does not depend on when the others leave
        assert fast == [beam_search(m, src[i:i + 1], mask[i:i + 1], k, 15, 0.6)[0] for i in range(9)]
    assert fast != greedy(m, src, mask, 15) and len({len(h) for h in fast}) > 2
