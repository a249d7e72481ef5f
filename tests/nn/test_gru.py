"""NormGRUCell / NormGRU against step-by-step references written from the formulas (float64)."""
import pytest
import torch

from rmsnorm_repro.nn import NormGRU, NormGRUCell, nematus_init_, nematus_matrix
from rmsnorm_repro.norms import build_normalization

I, H = 5, 6


def _randomize_norms(cell: NormGRUCell, gen: torch.Generator) -> None:
    """Gains and offsets away from 1 and 0, so that a misplaced norm cannot go unnoticed."""
    with torch.no_grad():
        for name in ("norm_input_gates", "norm_input_cand", "norm_state_gates", "norm_state_cand"):
            for p in getattr(cell, name).parameters():
                p.copy_(torch.rand(p.shape, generator=gen, dtype=p.dtype) + 0.5)
        cell.input_proj.bias.copy_(torch.randn(3 * H, generator=gen, dtype=torch.float64))


def _ref_norm(kind: str, a, norm):
    if kind == "rmsnorm":  # x / (RMS + eps) * g, eps outside the sqrt (the authors' PyTorch default)
        return a / (a.pow(2).mean(-1, keepdim=True).sqrt() + 1e-8) * norm.weight
    if kind == "layernorm":
        mu = a.mean(-1, keepdim=True)
        var = (a - mu).pow(2).mean(-1, keepdim=True)
        return (a - mu) / torch.sqrt(var + 1e-5) * norm.weight + norm.bias
    return a  # none, weightnorm: no activation norm


def _ref_step(kind: str, cell: NormGRUCell, x, h):
    """The module docstring's equations, written out with explicit weights per gate."""
    W, b, U = cell.input_proj.weight, cell.input_proj.bias, cell.state_proj.weight
    Wr, Wz, Wc = W[:H], W[H:2 * H], W[2 * H:]
    Ur, Uz, Uc = U[:H], U[H:2 * H], U[2 * H:]
    a_g = _ref_norm(kind, torch.cat([x @ Wr.T + b[:H], x @ Wz.T + b[H:2 * H]], -1), cell.norm_input_gates)
    a_c = _ref_norm(kind, x @ Wc.T + b[2 * H:], cell.norm_input_cand)
    s_g = _ref_norm(kind, torch.cat([h @ Ur.T, h @ Uz.T], -1), cell.norm_state_gates)
    s_c = _ref_norm(kind, h @ Uc.T, cell.norm_state_cand)
    r = torch.sigmoid(a_g[:, :H] + s_g[:, :H])
    z = torch.sigmoid(a_g[:, H:] + s_g[:, H:])
    n = torch.tanh(a_c + r * s_c)
    return z * h + (1 - z) * n


def _cell(kind: str, seed: int = 0) -> NormGRUCell:
    torch.manual_seed(seed)
    cell = NormGRUCell(I, H, build_normalization(kind)).double()
    nematus_init_(cell, std=0.3)  # a larger std than 0.01 so the gates do not all sit at 0.5
    _randomize_norms(cell, torch.Generator().manual_seed(seed + 1))
    return cell


@pytest.mark.parametrize("kind", ["rmsnorm", "layernorm", "none", "weightnorm"])
def test_cell_step_matches_formulas(kind):
    cell = _cell(kind)
    x, h = torch.randn(4, I, dtype=torch.float64), torch.randn(4, H, dtype=torch.float64)
    a_g, a_c = cell.input_part(x)
    torch.testing.assert_close(cell.step(a_g, a_c, h), _ref_step(kind, cell, x, h), rtol=1e-12, atol=1e-12)


def test_weightnorm_projections_are_reparameterized():
    cell = _cell("weightnorm")
    for proj in (cell.input_proj, cell.state_proj):
        g, v = proj.parametrizations.weight.original0, proj.parametrizations.weight.original1
        torch.testing.assert_close(proj.weight, g * v / v.norm(dim=1, keepdim=True))
    assert sum(p.numel() for p in cell.norm_state_gates.parameters()) == 0  # no activation norm


@pytest.mark.parametrize("kind", ["rmsnorm", "layernorm"])
def test_bidirectional_layer_matches_reference_loop(kind):
    torch.manual_seed(3)
    gru = NormGRU(I, H, build_normalization(kind), bidirectional=True).double()
    nematus_init_(gru, std=0.3)
    for i, cell in enumerate(gru.cells):
        _randomize_norms(cell, torch.Generator().manual_seed(10 + i))
    x = torch.randn(2, 5, I, dtype=torch.float64)
    h0 = torch.randn(2, 2 * H, dtype=torch.float64)
    out, last = gru(x, torch.ones(2, 5, dtype=torch.bool), h0)

    fwd, h = [], h0[:, :H]
    for t in range(5):
        h = _ref_step(kind, gru.cells[0], x[:, t], h)
        fwd.append(h)
    bwd, hb = [None] * 5, h0[:, H:]
    for t in reversed(range(5)):
        hb = _ref_step(kind, gru.cells[1], x[:, t], hb)
        bwd[t] = hb
    expected = torch.cat([torch.stack(fwd, 1), torch.stack(bwd, 1)], -1)
    torch.testing.assert_close(out, expected, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(last, torch.cat([h, hb], -1), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("kind", ["rmsnorm", "none"])
def test_padding_does_not_change_results(kind):
    """Each sequence padded inside a batch (with junk in the pads) equals that sequence run alone."""
    torch.manual_seed(4)
    gru = NormGRU(I, H, build_normalization(kind), bidirectional=True).double()
    nematus_init_(gru, std=0.3)
    lengths = [5, 2, 4]
    x = torch.randn(3, 7, I, dtype=torch.float64)  # 2+ junk steps after every sequence
    mask = torch.arange(7)[None, :] < torch.tensor(lengths)[:, None]
    out, last = gru(x, mask)
    for b, n in enumerate(lengths):
        alone_out, alone_last = gru(x[b:b + 1, :n], torch.ones(1, n, dtype=torch.bool))
        torch.testing.assert_close(out[b, :n], alone_out[0], rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(last[b], alone_last[0], rtol=1e-10, atol=1e-12)
        assert torch.all(out[b, n:] == 0)


@pytest.mark.parametrize("kind", ["layernorm", "rmsnorm"])
def test_gradients_reach_every_parameter(kind):
    """Finite too: with h0 = 0 the first U h is an all-zero row, where a naive RMSNorm backward gives NaN."""
    torch.manual_seed(5)
    gru = NormGRU(I, H, build_normalization(kind), bidirectional=True, recurrent_dropout=0.2)
    mask = torch.ones(3, 4, dtype=torch.bool)
    mask[0, 2:] = False
    out, last = gru(torch.randn(3, 4, I), mask)
    (out.pow(2).sum() + last.sum()).backward()
    for name, p in gru.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0, name


def test_recurrent_dropout_only_in_training_and_shared_over_time():
    torch.manual_seed(6)
    gru = NormGRU(I, H, build_normalization("rmsnorm"), recurrent_dropout=0.5)
    x, mask = torch.randn(2, 3, I), torch.ones(2, 3, dtype=torch.bool)
    gru.eval()
    torch.testing.assert_close(gru(x, mask)[0], gru(x, mask)[0])
    gru.train()
    assert not torch.allclose(gru(x, mask)[0], gru(x, mask)[0])


def test_nematus_init():
    torch.manual_seed(7)
    cell = NormGRUCell(40, 30, build_normalization("rmsnorm"))
    U = cell.state_proj.weight.detach()
    for k in range(3):  # every 30x30 block of U is orthogonal
        block = U[30 * k: 30 * (k + 1)]
        torch.testing.assert_close(block @ block.T, torch.eye(30), atol=1e-5, rtol=0)
    W = cell.input_proj.weight.detach()
    assert abs(W.std().item() - 0.01) < 0.001 and abs(W.mean().item()) < 0.001
    assert torch.all(cell.input_proj.bias == 0)
    shifted = nematus_matrix(300, 200, std=0.01, center=0.2)
    assert abs(shifted.mean().item() - 0.2) < 0.001 and abs(shifted.std().item() - 0.01) < 0.001
    # under weightnorm the init sets g and v so that the effective weight is the same kind of matrix
    wn = NormGRUCell(40, 30, build_normalization("weightnorm"))
    block = wn.state_proj.weight.detach()[:30]
    torch.testing.assert_close(block @ block.T, torch.eye(30), atol=1e-5, rtol=0)


def test_bad_mask_shape_is_a_clear_error():
    gru = NormGRU(I, H, build_normalization("none"))
    with pytest.raises(ValueError, match="mask must have shape"):
        gru(torch.randn(2, 3, I), torch.ones(3, 2, dtype=torch.bool))


@pytest.mark.parametrize("kind", ["rmsnorm", "layernorm", "none"])
def test_state_side_biases_match_nematus_compat(kind):
    """bias_on="state": b_g and b_c are added to U_g h and U_c h before N3 / N4 (Nematus v0.3
    GRUStep with nematus_compat=True: `_get_gates_state`, `_get_proposal_state`), none on the input side."""
    torch.manual_seed(8)
    cell = NormGRUCell(I, H, build_normalization(kind), bias_on="state").double()
    nematus_init_(cell, std=0.3)
    gen = torch.Generator().manual_seed(9)
    with torch.no_grad():
        cell.state_proj.bias.copy_(torch.randn(3 * H, generator=gen, dtype=torch.float64))
    assert cell.input_proj.bias is None
    x, h = torch.randn(4, I, dtype=torch.float64), torch.randn(4, H, dtype=torch.float64)
    W, U, b = cell.input_proj.weight, cell.state_proj.weight, cell.state_proj.bias
    a_g = _ref_norm(kind, x @ W[:2 * H].T, cell.norm_input_gates)
    a_c = _ref_norm(kind, x @ W[2 * H:].T, cell.norm_input_cand)
    s_g = _ref_norm(kind, h @ U[:2 * H].T + b[:2 * H], cell.norm_state_gates)
    s_c = _ref_norm(kind, h @ U[2 * H:].T + b[2 * H:], cell.norm_state_cand)
    r, z = torch.sigmoid(a_g + s_g).chunk(2, -1)
    expected = z * h + (1 - z) * torch.tanh(a_c + r * s_c)
    torch.testing.assert_close(cell.step(*cell.input_part(x), h), expected, rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="bias_on"):
        NormGRUCell(I, H, build_normalization(kind), bias_on="both")


def test_uniform_init_as_order_embedding():
    """dist="uniform": non-square blocks U(-scale, scale) (ivendrov's norm_weight(scale=0.1)), square orthogonal."""
    torch.manual_seed(10)
    cell = NormGRUCell(300, 40, build_normalization("rmsnorm"))
    cell.reset_parameters(0.1, dist="uniform")
    W = cell.input_proj.weight.detach()
    assert W.abs().max() <= 0.1 and W.abs().max() > 0.099 and abs(W.std().item() - 0.1 / 3 ** 0.5) < 0.002
    block = cell.state_proj.weight.detach()[:40]
    torch.testing.assert_close(block @ block.T, torch.eye(40), atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="uniform"):
        nematus_matrix(3, 4, dist="xavier")


@pytest.mark.parametrize("impl", ["reference", "auto"])
def test_float16_autocast_with_grad_scaler_trains_from_a_zero_state(impl):
    """h0 = 0 makes U h0 an all-zero row for every norm on the state side (and, going backwards, for each
    padded sequence's first token): its gradient g dy / eps must not be inf in float16, or GradScaler
    skips every step and shrinks its scale (formulas.saturate_zero_rows). Gradients as in float64."""
    torch.manual_seed(0)
    gru = NormGRU(I, H, build_normalization("rmsnorm", {"impl": impl}), bidirectional=True)
    reference = NormGRU(I, H, build_normalization("rmsnorm", {"impl": "reference"}), bidirectional=True).double()
    reference.load_state_dict(gru.state_dict())
    x, mask = torch.randn(3, 4, I), torch.ones(3, 4, dtype=torch.bool)
    mask[1, 2:] = False
    scaler = torch.amp.GradScaler("cpu", init_scale=256.0)  # a scale these gradients fit: the 65536 default overflows W's
    optimizer = torch.optim.SGD(gru.parameters(), lr=1e-3)
    with torch.autocast("cpu", dtype=torch.float16):
        out, _ = gru(x, mask)
    scaler.scale(out.float().pow(2).mean()).backward()
    scaler.unscale_(optimizer)
    grads = {n: p.grad.clone() for n, p in gru.named_parameters()}
    scaler.step(optimizer)
    scaler.update()
    assert scaler.get_scale() == 256.0  # the step was taken, the scale kept (an inf halves it)
    reference(x.double(), mask)[0].pow(2).mean().backward()
    for name, p in reference.named_parameters():
        torch.testing.assert_close(grads[name].double(), p.grad, rtol=3e-2, atol=3e-2 * p.grad.abs().max().item())


def _aten_ops_per_step(norm: str) -> dict[str, float]:
    """aten ops a time step of the eager loop costs, forward and backward (the loop as it runs on CUDA,
    where the C++ loops do not apply): a run of 8 steps minus a run of 4, over 4."""
    from collections import Counter

    from torch.utils._python_dispatch import TorchDispatchMode

    class Ops(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops[func.overloadpacket.__name__] += 1
            return func(*args, **(kwargs or {}))

    counts = []
    for steps in (4, 8):
        torch.manual_seed(0)
        gru = NormGRU(I, H, build_normalization(norm))
        gru.fused_loop = gru.cells[0].fused = False
        x, mask = torch.randn(3, steps, I), torch.ones(3, steps, dtype=torch.bool)
        mode = Ops()
        mode.ops = Counter()
        with mode:
            gru(x, mask)[0].sum().backward()
        counts.append(mode.ops)
    return {op: (counts[1][op] - counts[0][op]) / 4 for op in counts[1] if counts[1][op] != counts[0][op]}


def test_eager_time_step_op_budget():
    """The budget of host work a time step pays on CUDA, one op each (views and detaches included): 33
    without a norm (the state product, its gradient, gates, lerp); the two state-side norms a step add 8
    with LayerNorm (native_layer_norm and its backward and their adds), 10 with RMSNorm's kernel (its
    outputs and statistics allocated beside each call). A change that adds ops to the step fails here."""
    none, ln, rms = (sum(_aten_ops_per_step(norm).values()) for norm in ("none", "layernorm", "rmsnorm"))
    assert none <= 33 and ln - none <= 8 and rms - none <= 10, (none, ln, rms)
