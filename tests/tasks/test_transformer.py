"""Transformer: shapes, padding and causality, cached decoding equals the full forward, both norm
placements, init centre, and a norm=none model that runs."""
import pytest
import torch
from omegaconf import OmegaConf

from rmsnorm_repro.norms import build_normalization
from rmsnorm_repro.tasks.translation.transformer import Transformer

V, PAD, BOS = 23, 0, 2
CFG = dict(encoder_layers=2, decoder_layers=2, d_model=16, ffn_dim=32, heads=4, dropout=0.1,
           attention_dropout=0.1, pre_norm=False, share_embeddings=True, init_center=0.0)


def model(norm="rmsnorm", seed=0, **over) -> Transformer:
    torch.manual_seed(seed)
    options = {"p": 0.0625} if norm == "prmsnorm" else {}
    return Transformer(OmegaConf.create({**CFG, **over}), V, PAD, build_normalization(norm, options)).double().eval()


def batch(seed=1):
    g = torch.Generator().manual_seed(seed)
    src_len, tgt_len = [6, 3, 5], [5, 2, 4]
    src = torch.randint(4, V, (3, 6), generator=g)
    src_mask = torch.arange(6)[None] < torch.tensor(src_len)[:, None]
    tgt = torch.randint(4, V, (3, 5), generator=g)
    tgt[:, 0] = BOS
    # padded slots hold real token ids, not PAD: only the masks may hide them
    return src, src_mask, tgt, src_len, tgt_len


@pytest.mark.parametrize("norm", ["none", "layernorm", "rmsnorm", "prmsnorm"])
@pytest.mark.parametrize("pre_norm", [False, True])
def test_sentence_alone_equals_sentence_padded_in_a_batch(norm, pre_norm):
    m = model(norm, pre_norm=pre_norm)
    src, src_mask, tgt, src_len, tgt_len = batch()
    logits = m(src, src_mask, tgt)
    assert logits.shape == (3, 5, V)
    for b in range(3):
        s, t = src_len[b], tgt_len[b]
        alone = m(src[b:b + 1, :s], torch.ones(1, s, dtype=torch.bool), tgt[b:b + 1, :t])
        torch.testing.assert_close(logits[b, :t], alone[0], rtol=1e-10, atol=1e-10)


def test_decoder_is_causal():
    m = model("layernorm")
    src, src_mask, tgt, *_ = batch()
    changed = tgt.clone()
    changed[:, 3] = 5
    a, b = m(src, src_mask, tgt), m(src, src_mask, changed)
    torch.testing.assert_close(a[:, :3], b[:, :3])
    assert not torch.allclose(a[:, 3:], b[:, 3:])


@pytest.mark.parametrize("pre_norm", [False, True])
@pytest.mark.parametrize("share", [True, False])
def test_cached_decode_steps_equal_the_full_forward(pre_norm, share):
    m = model("rmsnorm", pre_norm=pre_norm, share_embeddings=share)
    src, src_mask, tgt, *_ = batch()
    expected = torch.log_softmax(m(src, src_mask, tgt), -1)
    state = m.encode(src, src_mask)
    assert "src_mask" in state and all(v.shape[0] == 3 for v in state.values())
    for t in range(tgt.shape[1]):
        # beam search reorders the state every step: an identity reorder must change nothing
        state = {k: v.index_select(0, torch.arange(3)) for k, v in state.items()}
        log_probs, state = m.decode_step(state, tgt[:, : t + 1])
        torch.testing.assert_close(log_probs, expected[:, t], rtol=1e-9, atol=1e-9)


def test_norm_placement_and_factory_use():
    post, pre = model("rmsnorm"), model("rmsnorm", pre_norm=True)
    count = lambda m: sum(type(x).__name__ == "RMSNorm" for x in m.modules())  # noqa: E731
    assert count(post) == 2 * 2 + 2 * 3 and count(pre) == count(post) + 2, "one per residual block (+ final norms)"
    assert count(model("none")) == 0 and count(model("layernorm")) == 0
    p = next(x for x in model("prmsnorm").modules() if type(x).__name__ == "RMSNorm")
    assert p.p == 0.0625 and p.k == 1


def test_init_center_shifts_every_weight_matrix():
    shifted, plain = model("layernorm", init_center=0.2), model("layernorm")
    for (name, a), (_, b) in zip(shifted.named_parameters(), plain.named_parameters()):
        if name.endswith("weight") and a.dim() == 2:
            assert abs(float(a.detach().mean()) - 0.2) < 0.05 + abs(float(b.detach().mean())), name
        elif a.dim() == 1:
            torch.testing.assert_close(a, b)  # norm gains and biases keep their init


def test_training_mode_uses_dropout_and_trains_without_norm():
    m = model("none").float().train()
    src, src_mask, tgt, *_ = batch()
    a, b = m(src, src_mask, tgt), m(src, src_mask, tgt)
    assert not torch.allclose(a, b), "dropout is active in training mode"
    opt = torch.optim.Adam(m.parameters(), 1e-2)
    losses = []
    for _ in range(15):
        loss = torch.nn.functional.cross_entropy(m(src, src_mask, tgt)[:, :-1].flatten(0, 1), tgt[:, 1:].flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]


def test_bad_head_count_is_a_clear_error():
    with pytest.raises(ValueError, match="divisible"):
        model(heads=5)


def test_paper_init_is_zeros_uniform_and_the_tiers_keep_xavier(compose):
    """zero run.py:72-75 (initializer "uniform", gain 0.08), modules/initializer.py:14-16: every weight
    matrix U(-0.08, 0.08); embeddings N(0, d^-1/2) (zero models/transformer.py:18,24-26); max_len 100 (run.py:122)."""
    paper = compose(["task=transformer", "scale=paper"])
    assert (paper.task.model.init, paper.task.model.init_scale, paper.task.max_len) == ("uniform", 0.08, 100)
    for tier in ("mini", "small"):
        cfg = compose(["task=transformer", f"scale={tier}"])
        assert (cfg.task.model.init, cfg.task.max_len) == ("xavier", 80)
    m = model("rmsnorm", init="uniform", init_scale=0.08, d_model=64, ffn_dim=128)
    for name, w in m.named_parameters():
        w = w.detach()
        if name.endswith("weight") and w.dim() == 2 and "embed" not in name:
            assert float(w.abs().max()) <= 0.08 and float(w.abs().max()) > 0.075, name
            assert float(w.std()) == pytest.approx(0.08 / 3 ** 0.5, rel=0.1), name  # U(-a, a): std a / sqrt(3)
        elif "embed" in name:
            assert float(w[1:].std()) == pytest.approx(64 ** -0.5, rel=0.1)
    ffn = dict(model("rmsnorm", init="xavier", d_model=64, ffn_dim=128).named_parameters())["encoder.0.ffn.0.weight"].detach()
    assert 0.08 < float(ffn.abs().max()) <= (6 / (64 + 128)) ** 0.5  # fairseq's Xavier bound, not zero's 0.08
