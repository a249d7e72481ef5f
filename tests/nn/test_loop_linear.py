"""LoopLinear: the recurrent layers' outputs and gradients equal those of calling each layer per step.

The reference is the same model with LoopLinear replaced by the plain call (autograd adding up one
weight gradient per step), in float64, with dropout on and the same random draws.
"""
import pytest
import torch
from torch import nn

from rmsnorm_repro.nn import LoopLinear, NormGRU, NormLSTM
from rmsnorm_repro.norms import build_normalization
from rmsnorm_repro.tasks.translation.rnnsearch import RNNSearch


def _outputs_and_grads(module: nn.Module, forward, seed: int = 0):
    module.zero_grad(set_to_none=True)
    torch.manual_seed(seed)  # the same dropout masks in both runs
    out = forward()
    loss = sum((o * torch.linspace(-1, 2, o.numel(), dtype=o.dtype).view_as(o)).sum() for o in out)
    loss.backward()
    return [o.detach() for o in out], {n: p.grad for n, p in module.named_parameters() if p.grad is not None}


def _same_as_plain_calls(monkeypatch, module: nn.Module, forward):
    got = _outputs_and_grads(module, forward)
    with monkeypatch.context() as m:
        m.setattr(LoopLinear, "__call__", lambda self, layer, x: layer(x))
        want = _outputs_and_grads(module, forward)
    for a, b in zip(got[0], want[0]):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-13)
    assert got[1].keys() == want[1].keys() and got[1]
    for name in want[1]:
        torch.testing.assert_close(got[1][name], want[1][name], rtol=1e-10, atol=1e-12, msg=name)


@pytest.mark.parametrize("norm", ["rmsnorm", "layernorm", "none", "weightnorm"])
def test_gru_layer(monkeypatch, norm):
    torch.manual_seed(1)
    gru = NormGRU(5, 6, build_normalization(norm), bidirectional=True, recurrent_dropout=0.3).double().train()
    x = torch.randn(3, 7, 5, dtype=torch.float64)
    mask = torch.arange(7)[None] < torch.tensor([7, 4, 2])[:, None]
    _same_as_plain_calls(monkeypatch, gru, lambda: gru(x, mask))


@pytest.mark.parametrize("norm", ["rmsnorm", "batchnorm"])
def test_lstm_layer(monkeypatch, norm):
    torch.manual_seed(2)
    lstm = NormLSTM(3, 4, build_normalization(norm), max_steps=8, bidirectional=True).double().train()
    x = torch.randn(2, 6, 3, dtype=torch.float64)
    mask = torch.arange(6)[None] < torch.tensor([6, 3])[:, None]
    _same_as_plain_calls(monkeypatch, lstm, lambda: lstm(x, mask))


@pytest.mark.parametrize("norm", ["rmsnorm", "weightnorm"])
def test_rnnsearch_decoder(monkeypatch, norm):
    """Every per-step projection of the conditional GRU (both GRUs' state sides, GRU2's input side,
    the attention's query, with biases on the state side) goes through LoopLinear."""
    torch.manual_seed(3)
    cfg = dict(emb=8, hidden=6, dropout=0.2, tie_embeddings=False, init_std=0.3, init_center=0.0)
    model = RNNSearch(cfg, 17, 0, build_normalization(norm)).double().train()
    src, tgt_in = torch.randint(1, 17, (3, 5)), torch.randint(1, 17, (3, 4))
    src_mask = torch.arange(5)[None] < torch.tensor([5, 2, 4])[:, None]
    _same_as_plain_calls(monkeypatch, model, lambda: [model(src, src_mask, tgt_in)])


def test_layer_with_and_without_bias_and_unused_steps():
    torch.manual_seed(4)
    for bias in (True, False):
        layer = nn.Linear(3, 5, bias=bias).double()
        xs = [torch.randn(2, 3, dtype=torch.float64, requires_grad=True) for _ in range(4)]
        linear = LoopLinear(6)  # steps 4 and 5 never called
        for t, x in enumerate(xs):
            linear.t = t
            y = linear(layer, x)
            torch.testing.assert_close(y, layer(x))
            (y * (t + 1)).sum().backward(retain_graph=True)
        got = [p.grad.clone() for p in layer.parameters()] + [x.grad.clone() for x in xs]
        layer.zero_grad()
        for x in xs:
            x.grad = None
        for t, x in enumerate(xs):
            (layer(x) * (t + 1)).sum().backward()
        want = [p.grad for p in layer.parameters()] + [x.grad for x in xs]
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b)


def test_plain_call_without_autograd_and_one_call_per_step():
    layer = nn.Linear(3, 4)
    linear = LoopLinear(2)
    with torch.no_grad():
        assert torch.equal(linear(layer, torch.ones(1, 3)), layer(torch.ones(1, 3)))
    assert not linear._layers  # nothing kept for a backward that will not come
    linear(layer, torch.ones(1, 3))
    with pytest.raises(RuntimeError, match="called twice at step 0"):
        linear(layer, torch.ones(1, 3))



def test_forward_hooks_still_see_every_call():
    layer = nn.Linear(3, 4)
    seen = []
    layer.register_forward_hook(lambda mod, inp, out: seen.append(out))
    linear = LoopLinear(2)
    for t in range(2):
        linear.t = t
        linear(layer, torch.ones(1, 3))
    assert len(seen) == 2
