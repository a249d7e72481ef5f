"""The fused CPU GRU transition (nn/fused_gru.py, gru_cell_cpu.cpp) against the same cell op by op.

Float64 runs the kernel's double instantiation, so a formula slip shows at 1e-12; float32 checks the path
training takes (SLEEF's sigmoid and tanh) within float32 rounding.
"""
import pytest
import torch

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


@pytest.mark.parametrize("name", ["rmsnorm", "layernorm"])
def test_fused_layer_over_padded_batches_equals_op_by_op(name):
    torch.manual_seed(0)
    layer = NormGRU(I, H, build_normalization(name), bidirectional=True).double()
    x = torch.randn(B, 6, I, dtype=torch.float64, requires_grad=True)
    mask = torch.ones(B, 6, dtype=torch.bool)
    mask[1, 4:] = mask[3, 2:] = False
    results = []
    for fused in (True, False):
        NormGRUCell.fused = fused
        layer.zero_grad()
        x.grad = None
        out, last = layer(x, mask)
        (out.sum() + last.pow(2).sum()).backward()
        results.append([out, last, x.grad, *(p.grad for p in layer.parameters())])
    for got, want in zip(*results):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


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
