"""The fused CPU GRU transition (nn/fused_gru.py, gru_cell_cpu.cpp) against the same cell op by op.

Float64 runs the kernel's double instantiation, so a formula slip shows at 1e-12; float32 checks the path
training takes (SLEEF's sigmoid and tanh) within float32 rounding.
"""
import pytest
import torch

from rmsnorm_repro.bench.gpu import autograd_nodes
from rmsnorm_repro.nn import NormGRU, NormGRUCell, fused_gru, nematus_init_
from rmsnorm_repro.norms import build_normalization

B, I, H = 5, 7, 24

NORMS = [("rmsnorm", {}), ("prmsnorm", {"p": 0.0625}), ("rmsnorm", {"eps_inside": True, "bias": True}),
         ("layernorm", {}), ("none", {}), ("weightnorm", {})]
TOLERANCE = {torch.float64: {"rtol": 1e-12, "atol": 1e-12}, torch.float32: {"rtol": 2e-5, "atol": 2e-6}}


@pytest.fixture(autouse=True)
def kernel():
    if fused_gru.load() is None:
        pytest.skip("no C++ toolchain here: the GRU cells run op by op")
    yield
    NormGRUCell.fused = True


def _cell(name, options, dtype, seed=0):
    torch.manual_seed(seed)
    cell = NormGRUCell(I, H, build_normalization(name, options)).to(dtype)
    nematus_init_(cell, std=0.3)
    with torch.no_grad():  # gains and biases away from 1 and 0: a misplaced one cannot hide
        for p in cell.parameters():
            if p.dim() == 1:
                p.copy_(torch.rand_like(p) + 0.5)
    return cell


def _inputs(dtype, seed=1):
    """a_gates and a_cand as slices of one wider tensor and h as half of a wider state, as NormGRU hands
    them over (the kernel reads strided rows in place)."""
    gen = torch.Generator().manual_seed(seed)
    a = torch.randn(B, 3 * H + 3, generator=gen, dtype=dtype).requires_grad_()
    h2 = torch.randn(B, 2 * H, generator=gen, dtype=dtype).requires_grad_()
    s = (2 * torch.randn(B, 3 * H, generator=gen, dtype=dtype)).requires_grad_()
    return a, h2, s


def _transition(cell, fused, dtype):
    NormGRUCell.fused = fused
    cell.zero_grad()
    a, h2, s = _inputs(dtype)
    out = cell.combine(a[:, :2 * H], a[:, 2 * H:3 * H], h2[:, H:], s)
    (out * torch.linspace(-1, 2, out.numel(), dtype=dtype).view_as(out)).sum().backward()
    grads = {name: p.grad for name, p in cell.named_parameters() if p.grad is not None}
    return out, {"a": a.grad, "h": h2.grad, "s": s.grad, **grads}


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("name,options", NORMS)
def test_fused_transition_equals_the_cell_op_by_op(name, options, dtype):
    cell = _cell(name, options, dtype)
    out, grads = _transition(cell, True, dtype)
    assert "GRUCombine" in out.grad_fn.name()  # the kernel ran
    ref_out, ref_grads = _transition(cell, False, dtype)
    assert "GRUCombine" not in ref_out.grad_fn.name()
    torch.testing.assert_close(out, ref_out, **TOLERANCE[dtype])
    assert grads.keys() == ref_grads.keys()  # every norm gain and bias gets its gradient
    for key in grads:
        torch.testing.assert_close(grads[key], ref_grads[key], **TOLERANCE[dtype], msg=key)


def _layer_run(layer, x, mask, loop, fused):
    """Outputs and every gradient of a NormGRU layer, through the whole-loop kernel (loop), the per-step
    fused transition (fused) or op by op; recurrent dropout draws the same mask each time."""
    NormGRU.fused_loop, NormGRUCell.fused = loop, fused
    layer.zero_grad()
    h0 = torch.linspace(-1, 1, x.shape[0] * 2 * H, dtype=x.dtype).view(x.shape[0], 2 * H).requires_grad_()
    x.grad = None
    torch.manual_seed(5)
    out, last = layer(x, mask, h0)
    (out * torch.linspace(-1, 2, out.numel(), dtype=x.dtype).view_as(out)).sum().backward(retain_graph=True)
    last.pow(2).sum().backward()
    return out, [out, last, x.grad, h0.grad, *(p.grad for p in layer.parameters())]


@pytest.fixture
def layer_paths():
    yield
    NormGRU.fused_loop = NormGRUCell.fused = True


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("name,options", NORMS)
def test_fused_layer_over_padded_batches_equals_op_by_op(name, options, dtype, layer_paths):
    """The whole-loop kernel, both directions, with padding (a padded step keeps the state) and recurrent
    dropout, against the per-step fused transition and against the layer op by op."""
    torch.manual_seed(0)
    layer = NormGRU(I, H, build_normalization(name, options), bidirectional=True, recurrent_dropout=0.3).to(dtype)
    with torch.no_grad():
        for p in layer.parameters():
            if p.dim() == 1:
                p.copy_(torch.rand_like(p) + 0.5)
    x = torch.randn(B, 6, I, dtype=dtype, requires_grad=True)
    mask = torch.ones(B, 6, dtype=torch.bool)
    mask[1, 4:] = mask[3, 2:] = False
    out, got = _layer_run(layer, x, mask, loop=True, fused=True)
    assert any("GRUSequence" in n.name() for n in autograd_nodes(out))  # the kernel ran
    for loop, fused in ((False, True), (False, False)):
        ref_out, want = _layer_run(layer, x, mask, loop, fused)
        assert not any("GRUSequence" in n.name() for n in autograd_nodes(ref_out))
        assert len(got) == len(want) and all(g is not None for g in got)
        # sums over T x B rows in another order, through 6 steps of pRMSNorm's 2-feature statistic in float32:
        # atol by each tensor's scale (float64 pins the formulas at 1e-12)
        atol = {torch.float64: 1e-12, torch.float32: 1e-5}[dtype]
        for i, (g, w) in enumerate(zip(got, want)):
            scale = max(1.0, float(w.detach().abs().max()))
            torch.testing.assert_close(g, w, rtol=TOLERANCE[dtype]["rtol"], atol=atol * scale,
                                       msg=f"output/gradient {i}")


def test_the_layer_loop_without_padding_or_gradients_and_under_hooks(layer_paths):
    """No padding (no mask handed over), evaluation without autograd, and a forward hook on a state
    projection (which must see every step's call, so that direction runs step by step)."""
    torch.manual_seed(0)
    layer = NormGRU(I, H, build_normalization("rmsnorm"), bidirectional=True).double().eval()
    x = torch.randn(B, 6, I, dtype=torch.float64)
    full = torch.ones(B, 6, dtype=torch.bool)
    with torch.no_grad():
        got = layer(x, full)
        NormGRU.fused_loop = False
        want = layer(x, full)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-12)
    calls = []
    layer.cells[1].state_proj.register_forward_hook(lambda *_: calls.append(1))
    assert fused_gru.sequence(layer.cells[1], *layer.cells[1].input_part(x.transpose(0, 1)), x.new_zeros(B, H),
                              None, None, True) is None
    NormGRU.fused_loop = True
    layer(x, full)
    assert len(calls) == 6


def test_the_cell_falls_back_where_the_kernel_does_not_apply():
    a, h2, s = _inputs(torch.float32)
    a_gates, a_cand, h = a[:, :2 * H], a[:, 2 * H:3 * H], h2[:, H:]
    reference = _cell("rmsnorm", {"impl": "reference"}, torch.float32)  # the user asked for the formulas
    assert fused_gru.combine(reference, a_gates, a_cand, h, s) is None
    l2 = _cell("l2norm", {}, torch.float32)  # a norm the kernel does not compute
    assert fused_gru.combine(l2, a_gates, a_cand, h, s) is None
    cell = _cell("rmsnorm", {}, torch.float32)
    assert fused_gru.combine(cell, a_gates.bfloat16(), a_cand.bfloat16(), h, s) is None  # mixed dtypes
    assert fused_gru.combine(cell, a_gates, a_cand, h, s) is not None
