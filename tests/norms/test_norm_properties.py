"""Property tests (hypothesis): the invariances of Table 1 and the gradient claims of Sec. 4.2.

Tensors come from a drawn seed (drawing every element through hypothesis would be slow and adds
nothing here); the drawn quantities are the sizes, the scale factors, p and the seed. eps = 0 so the
invariances are exact; `assume` skips draws whose statistic is too close to 0 for float64 to say.
"""
from __future__ import annotations

import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from rmsnorm_repro.norms import build_normalization, functional as fn

DT = torch.float64
PROPERTY = settings(max_examples=30, deadline=None)

seeds = st.integers(0, 2**31 - 1)
scales = st.floats(0.05, 20.0)
sizes = st.integers(2, 20)
ps = st.sampled_from([0.0625, 0.125, 0.5, 1.0])
# The row-wise norms of Table 1 as (norm name, factory options): RMSNorm, pRMSNorm, LayerNorm.
row_norms = st.sampled_from([("rmsnorm", {}), ("prmsnorm", {"p": 0.125}), ("prmsnorm", {"p": 0.5}), ("layernorm", {})])


def randn(*shape: int, seed: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=DT)


def build(name: str, options: dict, dim: int, seed: int) -> torch.nn.Module:
    """The factory's activation norm with eps = 0, a bias, and random gain and bias."""
    norm = build_normalization(name, {**options, "eps": 0.0, "bias": True}).act(dim).double()
    with torch.no_grad():
        norm.weight.copy_(1 + randn(dim, seed=seed + 1))
        norm.bias.copy_(randn(dim, seed=seed + 2))
    return norm


def well_conditioned(norm: torch.nn.Module, x: torch.Tensor) -> bool:
    """Every row's statistic (RMS of the first k features, or LayerNorm's std) is not tiny."""
    k = getattr(norm, "k", None)
    stat = x[..., :k].pow(2).mean(-1).sqrt() if k is not None else x.std(-1, unbiased=False)
    return bool((stat > 1e-3 * x.abs().amax(-1)).all())


def relative_change(new: torch.Tensor, old: torch.Tensor) -> float:
    return float((new - old).detach().norm() / old.detach().norm())


# --- Table 1, row-wise norms -----------------------------------------------------------------
@PROPERTY
@given(kind=row_norms, n=st.integers(1, 6), dim=sizes, seed=seeds, data=st.data())
def test_rescaling_any_case_leaves_rms_prms_and_layernorm_unchanged(kind, n, dim, seed, data):
    """Data re-scaling, single-case re-scaling and weight-matrix re-scaling all scale rows of a."""
    norm, x = build(*kind, dim, seed), randn(n, dim, seed=seed)
    assume(well_conditioned(norm, x))
    factors = torch.tensor(data.draw(st.lists(scales, min_size=n, max_size=n)), dtype=DT).unsqueeze(-1)
    torch.testing.assert_close(norm(factors * x), norm(x), rtol=1e-10, atol=1e-10)


@PROPERTY
@given(n=st.integers(1, 6), dim=sizes, shift=st.floats(-5.0, 5.0), seed=seeds)
def test_recentering_the_summed_inputs_leaves_layernorm_unchanged(n, dim, shift, seed):
    """Weight-matrix re-centering adds the same amount to every summed input of a case."""
    norm, x = build("layernorm", {}, dim, seed), randn(n, dim, seed=seed)
    assume(well_conditioned(norm, x))
    torch.testing.assert_close(norm(x + shift), norm(x), rtol=1e-10, atol=1e-10)


@PROPERTY
@given(p=ps, n=st.integers(1, 6), dim=sizes, shift=st.floats(0.1, 5.0), sign=st.sampled_from([-1, 1]), seed=seeds)
def test_recentering_the_summed_inputs_changes_rms_and_prms(p, n, dim, shift, sign, seed):
    """RMSNorm has no mean to subtract: a shift of every summed input shows in its output."""
    norm, x = build("prmsnorm", {"p": p}, dim, seed), randn(n, dim, seed=seed)
    assume(x.std(-1).min() > 0.1)  # a constant row is the one case a shift just re-scales
    assert relative_change(norm(x + sign * shift), norm(x)) > 1e-3


# --- Table 1, BatchNorm ----------------------------------------------------------------------
@PROPERTY
@given(n=st.integers(3, 12), dim=sizes, seed=seeds, data=st.data())
def test_batchnorm_ignores_per_unit_scale_and_shift_over_the_batch(n, dim, seed, data):
    """Weight-vector re-scaling and data re-centering: each unit's summed inputs change by one affine map."""
    norm = build_normalization("batchnorm", {"eps": 1e-300}).act(dim).double().train()
    x = randn(n, dim, seed=seed)
    assume(bool((x.std(0) > 1e-2).all()))
    scale = torch.tensor(data.draw(st.lists(scales, min_size=dim, max_size=dim)), dtype=DT)
    shift = randn(dim, seed=seed + 3)
    torch.testing.assert_close(norm(scale * x + shift), norm(x), rtol=1e-10, atol=1e-10)


@PROPERTY
@given(n=st.integers(3, 12), dim=sizes, factor=st.floats(2.0, 20.0), seed=seeds)
def test_batchnorm_depends_on_the_scale_of_one_case(n, dim, factor, seed):
    norm = build_normalization("batchnorm", {"eps": 1e-300}).act(dim).double().train()
    x = randn(n, dim, seed=seed)
    assume(x[0].abs().mean() > 0.1)
    scaled = x.clone()
    scaled[0] *= factor
    assert relative_change(norm(scaled), norm(x)) > 1e-3


# --- Sec. 4.2: gradients of RMSNorm ----------------------------------------------------------
def rmsnorm_layer_grads(x: torch.Tensor, w: torch.Tensor, p: float, seed: int) -> tuple[torch.Tensor, ...]:
    """dL/dg, dL/db, dL/dW for L = ||RMSNorm(x W^T) - t||^2 with a fixed target t (eps = 0)."""
    dim = w.shape[0]
    g = (1 + randn(dim, seed=seed + 1)).requires_grad_(True)
    b = randn(dim, seed=seed + 2).requires_grad_(True)
    w = w.clone().requires_grad_(True)
    y = fn.rms_norm(x @ w.T, g, b, p=p, eps=0.0)
    loss = (y - randn(*y.shape, seed=seed + 3)).pow(2).sum()
    return torch.autograd.grad(loss, (g, b, w))


@PROPERTY
@given(p=ps, n=st.integers(1, 6), n_in=st.integers(1, 8), dim=sizes, delta=scales, seed=seeds)
def test_rmsnorm_gradients_under_input_and_weight_scaling(p, n, n_in, dim, delta, seed):
    """Sec. 4.2: dL/dg and dL/db are invariant to scaling x or W; dL/dW is invariant to scaling x
    and scales as 1/delta when W -> delta W (the implicit learning-rate adaptation)."""
    x, w = randn(n, n_in, seed=seed), randn(dim, n_in, seed=seed + 4)
    a = x @ w.T
    k = fn.partial_k(dim, p)
    assume(bool((a[:, :k].pow(2).mean(-1).sqrt() > 1e-2 * a.abs().amax(-1)).all()))
    dg, db, dw = rmsnorm_layer_grads(x, w, p, seed)
    tol = dict(rtol=1e-9, atol=1e-9)

    dg_x, db_x, dw_x = rmsnorm_layer_grads(delta * x, w, p, seed)
    torch.testing.assert_close(dg_x, dg, **tol)
    torch.testing.assert_close(db_x, db, **tol)
    torch.testing.assert_close(dw_x, dw, **tol)

    dg_w, db_w, dw_w = rmsnorm_layer_grads(x, delta * w, p, seed)
    torch.testing.assert_close(dg_w, dg, **tol)
    torch.testing.assert_close(db_w, db, **tol)
    torch.testing.assert_close(delta * dw_w, dw, **tol)


@PROPERTY
@given(n=st.integers(1, 6), dim=sizes, delta=scales, seed=seeds)
def test_rmsnorm_gradient_invariances_hold_to_order_eps_with_the_default_eps(n, dim, delta, seed):
    """With the default eps = 1e-8 outside the sqrt, the claims hold up to O(eps / RMS)."""
    x, w = randn(n, 8, seed=seed), randn(dim, 8, seed=seed + 4)
    a = x @ w.T
    assume(bool((a.pow(2).mean(-1).sqrt() > 0.1).all()))
    norm = build_normalization("rmsnorm").act(dim).double()
    target = randn(n, dim, seed=seed + 3)

    def grads(x, w):
        w = w.clone().requires_grad_(True)
        loss = (norm(x @ w.T) - target).pow(2).sum()
        return torch.autograd.grad(loss, (norm.weight, w))

    dg, dw = grads(x, w)
    dg_x, dw_x = grads(delta * x, w)
    dg_w, dw_w = grads(x, delta * w)
    scale = max(1.0, 1 / min(delta, 1.0))  # the error is eps / (delta * RMS) relative to the gradient
    tol = dict(rtol=1e-6 * scale, atol=1e-6 * scale)
    torch.testing.assert_close(dg_x, dg, **tol)
    torch.testing.assert_close(dw_x, dw, **tol)
    torch.testing.assert_close(dg_w, dg, **tol)
    torch.testing.assert_close(delta * dw_w, dw, **tol)
