"""Every norm under bf16 autocast (train.precision=bf16): statistics in float32, output in the activation's
dtype, gradients of float32 parameters in float32, and the values those of the float64 module on the same
(bf16-rounded) input to within bf16 rounding.

A bf16 statistic would show here: LayerNorm of rows with a large mean (variance by cancellation), and
RMSNorm/L2Norm of long rows (sums of squares rounded every step)."""
from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from rmsnorm_repro.norms import build_normalization

NORMS = [("rmsnorm", {}), ("rmsnorm", {"impl": "reference"}), ("prmsnorm", {"p": 0.0625}),
         ("prmsnorm", {"p": 0.0625, "impl": "reference", "eps_inside": True}), ("layernorm", {}), ("l2norm", {}),
         ("batchnorm", {})]
IDS = [f"{name}-{'-'.join(f'{k}={v}' for k, v in opts.items()) or 'default'}" for name, opts in NORMS]
BF16_TOL = 2e-2  # relative to the largest reference value; bf16 keeps 8 bits (2**-8 = 0.4%)


def modules(name: str, options: dict) -> dict[str, tuple[nn.Module, torch.Tensor, tuple]]:
    """The norm's modules with a bf16 input each (what a layer before them returns under autocast)."""
    norm = build_normalization(name, options)
    gen = torch.Generator().manual_seed(0)
    rows = 3.0 + torch.randn(6, 4, 1024, generator=gen)  # offset: cancellation if LayerNorm's variance were bf16
    conv = torch.randn(4, 8, 5, 5, generator=gen) + 2.0
    out = {"act": (norm.act(1024), rows, ()), "channels": (norm.channels(8), conv, ()),
           "step_norm": (norm.step_norm(1024, 3), rows[:, 0], (1,))}
    for module, _, _ in out.values():
        for p in module.parameters():  # gains and biases away from 1 and 0, so a cast of them would show
            p.data.uniform_(0.5, 1.5, generator=gen)
    return {k: (m, x.to(torch.bfloat16), args) for k, (m, x, args) in out.items()}


def relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    return ((got.double() - want).abs().max() / want.abs().max()).item()


@pytest.mark.parametrize("name,options", NORMS, ids=IDS)
@pytest.mark.parametrize("kind", ["act", "channels", "step_norm"])
def test_norm_under_bf16_autocast_is_float32_math_in_bf16_out(name, options, kind):
    module, x, args = modules(name, options)[kind]
    reference = copy.deepcopy(module).double()
    x64 = x.double().requires_grad_()
    want = reference(x64, *args)
    dy = torch.randn(want.shape, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    want.backward(dy.double())  # random: sums of ones make some gradients exactly 0 (a batchnorm gain's)

    x = x.requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = module(x, *args)
    assert y.dtype == torch.bfloat16, f"{name} {kind} returns {y.dtype} for bf16 activations"
    assert relative_error(y, want) < BF16_TOL
    y.backward(dy)
    assert x.grad.dtype == torch.bfloat16
    assert relative_error(x.grad, x64.grad) < BF16_TOL
    for (pname, p), p64 in zip(module.named_parameters(), reference.parameters()):
        assert p.grad.dtype == torch.float32, pname
        assert relative_error(p.grad, p64.grad) < BF16_TOL, pname


@pytest.mark.parametrize("name", ["rmsnorm", "layernorm", "l2norm"])
def test_bf16_statistics_would_fail_this_tolerance(name):
    """The check above can fail: the same norm with its statistics computed in bf16 is outside it."""
    module, x, _ = modules(name, {})["act"]
    want = copy.deepcopy(module).double()(x.double())
    xb = x.to(torch.bfloat16)
    if name == "layernorm":  # variance as E[x^2] - E[x]^2, every op rounded to bf16
        mean = xb.mean(-1, keepdim=True)
        var = (xb * xb).mean(-1, keepdim=True) - mean * mean
        y = (xb - mean) * torch.rsqrt(var + 1e-5)
    else:  # running sum of squares in bf16
        square_sum = torch.zeros(x.shape[:-1] + (1,), dtype=torch.bfloat16)
        for j in range(x.shape[-1]):
            square_sum = square_sum + xb[..., j:j + 1] ** 2
        scale = x.shape[-1] if name == "rmsnorm" else 1
        y = xb / (square_sum / scale).sqrt()
    y = y * module.weight.to(torch.bfloat16)
    assert relative_error(y, want) > BF16_TOL
