"""RNNSearch: the model protocol beam search and the task rely on, padding, Table 5 moments."""
import pytest
import torch

from rmsnorm_repro.norms import build_normalization
from rmsnorm_repro.tasks.translation.rnnsearch import SUPPORTED_NORMS, RNNSearch

V, PAD, BOS = 17, 0, 2
CFG = dict(emb=8, hidden=6, dropout=0.2, tie_embeddings=False, init_std=0.3, init_center=0.0)


def _model(norm="rmsnorm", seed=0, **over) -> RNNSearch:
    torch.manual_seed(seed)
    return RNNSearch({**CFG, **over}, V, PAD, build_normalization(norm)).double().eval()


def _batch(seed=1):
    """Right-padded batch; the padded source slots hold junk ids so only the masks can hide them."""
    g = torch.Generator().manual_seed(seed)
    src_len, tgt_len = [5, 3, 4], [4, 2, 3]
    src = torch.randint(4, V, (3, 6), generator=g)
    src_mask = torch.arange(6)[None] < torch.tensor(src_len)[:, None]
    tgt_in = torch.randint(4, V, (3, 5), generator=g)
    tgt_in[:, 0] = BOS
    tgt_mask = torch.arange(5)[None] < torch.tensor(tgt_len)[:, None]
    return src, src_mask, tgt_in.masked_fill(~tgt_mask, PAD), tgt_mask, src_len, tgt_len


@pytest.mark.parametrize("norm", ["rmsnorm", "layernorm"])
def test_logits_do_not_depend_on_padding(norm):
    model = _model(norm)
    src, src_mask, tgt_in, _, src_len, tgt_len = _batch()
    logits = model(src, src_mask, tgt_in)
    assert logits.shape == (3, 5, V)
    for b in range(3):
        s, t = src_len[b], tgt_len[b]
        alone = model(src[b:b + 1, :s], torch.ones(1, s, dtype=torch.bool), tgt_in[b:b + 1, :t])
        torch.testing.assert_close(logits[b, :t], alone[0], rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("tie", [False, True])
def test_decode_step_equals_teacher_forcing(tie):
    model = _model("layernorm", tie_embeddings=tie)
    src, src_mask, tgt_in, *_ = _batch()
    expected = torch.log_softmax(model(src, src_mask, tgt_in), -1)
    state = model.encode(src, src_mask)
    assert all(v.shape[0] == 3 for v in state.values()) and "src_mask" in state
    for t in range(tgt_in.shape[1]):
        log_probs, state = model.decode_step(state, tgt_in[:, : t + 1])
        torch.testing.assert_close(log_probs, expected[:, t], rtol=1e-10, atol=1e-10)


def test_state_reordering_follows_the_batch():
    """Beam search reorders every state tensor with index_select(0, idx)."""
    model = _model("rmsnorm")
    src, src_mask, tgt_in, *_ = _batch()
    state = model.encode(src, src_mask)
    _, state = model.decode_step(state, tgt_in[:, :1])
    idx = torch.tensor([2, 0, 0, 1])
    moved = {k: v.index_select(0, idx) for k, v in state.items()}
    lp_moved, _ = model.decode_step(moved, tgt_in.index_select(0, idx)[:, :2])
    lp, _ = model.decode_step(state, tgt_in[:, :2])
    torch.testing.assert_close(lp_moved, lp.index_select(0, idx), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("where", ["post_norm", "pre_norm"])
def test_recurrent_input_moments_match_the_summed_inputs(where):
    """Table 5: pre_norm = GRU1's U h_{t-1}; post_norm = the same after GRU1's two state norms."""
    model = _model("layernorm")
    with torch.no_grad():  # gains and offsets away from 1 and 0: post-norm values then differ visibly
        for norm in (model.gru1.norm_state_gates, model.gru1.norm_state_cand):
            norm.weight.uniform_(0.5, 2.0)
            norm.bias.normal_()
    src, src_mask, tgt_in, tgt_mask, *_ = _batch()
    recorded = []  # GRU1's state projection output = U h_{t-1}, one (B, 3H) tensor per step
    hook = model.gru1.state_proj.register_forward_hook(lambda mod, inp, out: recorded.append(out))
    model(src, src_mask, tgt_in)
    hook.remove()
    s = torch.stack(recorded, 1)  # (B, T, 3H)
    if where == "post_norm":
        g, c = s[..., :12], s[..., 12:]
        s = torch.cat([model.gru1.norm_state_gates(g), model.gru1.norm_state_cand(c)], -1)
    moments = model.recurrent_input_moments(src, src_mask, tgt_in, tgt_mask, where)
    assert moments.shape == (5, 3)

    def stats(vals):
        return torch.tensor([vals.numel(), vals.sum().item(), vals.pow(2).sum().item()], dtype=torch.float64)

    for row, pos in enumerate([0, 1, 2, 3]):
        torch.testing.assert_close(moments[row], stats(s[:, pos][tgt_mask[:, pos]]))
    torch.testing.assert_close(moments[4], stats(s[tgt_mask]))
    assert moments[4, 0] == tgt_mask.sum() * 3 * 6
    other = model.recurrent_input_moments(src, src_mask, tgt_in, tgt_mask,
                                          "pre_norm" if where == "post_norm" else "post_norm")
    assert not torch.allclose(moments[4, 1:], other[4, 1:])
    torch.testing.assert_close(model.recurrent_input_moments(src, src_mask, tgt_in, tgt_mask), moments
                               if where == "post_norm" else other)  # post_norm is the default


def test_post_norm_moments_are_set_by_the_gain_under_layernorm():
    """After LayerNorm with unit gain and zero offset every token's 3H values have mean 0 and
    variance 1 within each norm's group: the pooled M is 0 and S is 1 (the paper's LN row reads
    M -0.5 and S 1.5 after training has moved gain and offset)."""
    model = _model("layernorm")
    src, src_mask, tgt_in, tgt_mask, *_ = _batch()
    count, total, squares = model.recurrent_input_moments(src, src_mask, tgt_in, tgt_mask)[4].tolist()
    assert abs(total / count) < 1e-6 and abs(squares / count - 1) < 1e-3


def test_second_decoder_gru_has_its_biases_on_the_state_side():
    """Nematus v0.3 builds GRU2 with nematus_compat=True: biases added to U h before the state norms."""
    model = _model("rmsnorm")
    assert model.gru2.input_proj.bias is None and model.gru2.state_proj.bias is not None
    assert model.gru1.input_proj.bias is not None and model.gru1.state_proj.bias is None
    assert all(c.input_proj.bias is not None and c.state_proj.bias is None for c in model.encoder.cells)
    assert torch.all(model.gru2.state_proj.bias == 0)  # Nematus inits biases at 0


def test_moments_add_up_over_sentences():
    """Per-sentence moments sum to the batch's: padding adds nothing, so the task can sum over batches."""
    model = _model("layernorm")
    src, src_mask, tgt_in, tgt_mask, src_len, tgt_len = _batch()
    total = sum(
        model.recurrent_input_moments(src[b:b + 1, :src_len[b]], src_mask[b:b + 1, :src_len[b]],
                                      tgt_in[b:b + 1, :tgt_len[b]], tgt_mask[b:b + 1, :tgt_len[b]])
        for b in range(3)
    )
    torch.testing.assert_close(model.recurrent_input_moments(src, src_mask, tgt_in, tgt_mask), total)


@pytest.mark.parametrize("norm", SUPPORTED_NORMS)
def test_every_supported_norm_trains(norm):
    model = _model(norm).float().train()
    src, src_mask, tgt_in, tgt_mask, *_ = _batch()
    logits = model(src, src_mask, tgt_in)
    loss = torch.nn.functional.cross_entropy(logits[tgt_mask], tgt_in[tgt_mask])
    loss.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
        assert p.grad.abs().sum() > 0, name


def test_dropout_only_in_training():
    model = _model("rmsnorm")
    src, src_mask, tgt_in, *_ = _batch()
    torch.testing.assert_close(model(src, src_mask, tgt_in), model(src, src_mask, tgt_in))
    model.train()
    assert not torch.allclose(model(src, src_mask, tgt_in), model(src, src_mask, tgt_in))


def test_init_center_and_padding_rows():
    model = _model("rmsnorm", init_std=0.01, init_center=0.2, hidden=40)
    w = model.attention.state_proj.proj.weight.detach()  # (80, 40): not square -> N(0.2, 0.01)
    assert abs(w.mean().item() - 0.2) < 0.002 and abs(w.std().item() - 0.01) < 0.002
    assert torch.all(model.src_emb.weight[PAD] == 0) and torch.all(model.tgt_emb.weight[PAD] == 0)


def test_learns_to_copy():
    """Thirty Adam steps on one small batch drive the loss far down (the pieces fit together)."""
    torch.manual_seed(0)
    model = RNNSearch({**CFG, "dropout": 0.0, "init_std": 0.01, "hidden": 12, "emb": 12}, V, PAD,
                      build_normalization("rmsnorm"))
    src = torch.randint(4, V, (8, 5))
    tgt_in, tgt_out = torch.cat([torch.full((8, 1), BOS), src], 1), torch.cat([src, torch.full((8, 1), 3)], 1)
    mask = torch.ones(8, 5, dtype=torch.bool)
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    losses = []
    for _ in range(30):
        loss = torch.nn.functional.cross_entropy(model(src, mask, tgt_in).reshape(-1, V), tgt_out.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.3 * losses[0], losses[::5]


def test_config_errors_are_clear():
    with pytest.raises(ValueError, match="missing \\['tie_embeddings'\\].*unknown \\['tie'\\]"):
        RNNSearch({**{k: v for k, v in CFG.items() if k != "tie_embeddings"}, "tie": True}, V, PAD,
                  build_normalization("none"))
    with pytest.raises(ValueError, match="dropout must be in"):
        RNNSearch({**CFG, "dropout": 1.0}, V, PAD, build_normalization("none"))


def test_table3_theano_rmsnorm_is_the_offset_variant(compose):
    """Table 3's Th columns ran the authors' Theano layer_norm (rmsnorm README.md:121-130):
    x / sqrt(mean(x^2) + 1e-5) * s + b, the offset b kept. norm.bias=true on the paper recipe gives it."""
    cfg = compose(["task=rnnsearch", "scale=paper", "norm=rmsnorm", "norm.bias=true"])
    norm = build_normalization(cfg.norm.name, cfg.norm, SUPPORTED_NORMS, "rnnsearch").act(6).double()
    torch.manual_seed(0)
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5)
        norm.bias.uniform_(-0.5, 0.5)
    x = torch.randn(3, 6, dtype=torch.float64)
    theano = x / torch.sqrt((x * x).mean(-1, keepdim=True) + 1e-5) * norm.weight + norm.bias
    torch.testing.assert_close(norm(x), theano, rtol=1e-12, atol=1e-12)
