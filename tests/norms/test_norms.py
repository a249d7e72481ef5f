"""Every norm against a float64 reference written from the formulas of docs/paper.md section 1.

The references below share no code with rmsnorm_repro.norms: each is the paper's formula written
out with explicit sums, so a bug in the library cannot hide in both. Forward outputs and gradients
are compared with the references; torch.autograd.gradcheck checks each norm's own backward.
"""
from __future__ import annotations

import math
import random
from fractions import Fraction

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.autograd import gradcheck
from torch.func import functional_call

from rmsnorm_repro.norms import (
    ChannelNorm, FeatureBatchNorm, L2Norm, LayerNorm, RMSNorm, StepBatchNorm, build_normalization, functional as fn,
)
from rmsnorm_repro.norms import formulas

DT = torch.float64
EPS = 0.01  # large enough that putting eps inside or outside the sqrt changes the output visibly
P_VALUES = (0.0625, 0.125, 0.5, 1.0)

# A few seeded random shapes, 2-D and 3-D. The feature sizes are picked so that dim * p is not an
# integer for some p (7 * 0.5 = 3.5 -> k = 4; 10 * 0.125 = 1.25 -> k = 2; 24 * 0.0625 = 1.5 -> k = 2).
_rng = random.Random(1910)
SHAPES = [tuple(_rng.randint(1, 4) for _ in range(lead)) + (dim,) for lead, dim in ((1, 16), (2, 24), (1, 10), (2, 7))]


# --- references ------------------------------------------------------------------------------
def ref_k(dim: int, p: float) -> int:
    """k = ceil(n * p), at least 1, in exact decimal arithmetic."""
    return max(1, math.ceil(Fraction(str(p)) * dim))


def ref_rms(x: Tensor, g: Tensor, b: Tensor | None, k: int, eps: float, eps_inside: bool) -> Tensor:
    """a / RMS(a[:k]) * g (+ b), RMS(a[:k]) = sqrt(sum_{i<k} a_i^2 / k); eps inside or outside the sqrt."""
    mean_square = (x[..., :k] * x[..., :k]).sum(-1, keepdim=True) / k
    denom = torch.sqrt(mean_square + eps) if eps_inside else torch.sqrt(mean_square) + eps
    y = x / denom * g
    return y if b is None else y + b


def ref_layer(x: Tensor, g: Tensor | None, b: Tensor | None, eps: float) -> Tensor:
    """(a - mu) / sqrt(sigma^2 + eps) * g + b, mu and sigma^2 (biased) over the last dimension."""
    n = x.shape[-1]
    mu = x.sum(-1, keepdim=True) / n
    var = ((x - mu) ** 2).sum(-1, keepdim=True) / n
    y = (x - mu) / torch.sqrt(var + eps)
    y = y if g is None else y * g
    return y if b is None else y + b


def ref_l2(x: Tensor, g: Tensor, b: Tensor | None, eps: float) -> Tensor:
    """a / (||a||_2 + eps) * g (+ b)."""
    y = x / (torch.sqrt((x * x).sum(-1, keepdim=True)) + eps) * g
    return y if b is None else y + b


def ref_batch(x: Tensor, g: Tensor, b: Tensor, eps: float, mean: Tensor | None = None, var: Tensor | None = None) -> Tensor:
    """(a - mean) / sqrt(var + eps) * g + b per feature (last dim); batch statistics unless given."""
    rows = x.reshape(-1, x.shape[-1])
    if mean is None:
        mean = rows.sum(0) / rows.shape[0]
        var = ((rows - mean) ** 2).sum(0) / rows.shape[0]
    return (x - mean) / torch.sqrt(var + eps) * g + b


def ref_weight(v: Tensor, g: Tensor) -> Tensor:
    """w_i = g_i v_i / ||v_i||, one norm per output unit (over all other axes of v)."""
    norms = torch.sqrt((v * v).reshape(v.shape[0], -1).sum(1))
    return v * (g.reshape(-1) / norms).reshape(-1, *([1] * (v.dim() - 1)))


# --- helpers ---------------------------------------------------------------------------------
def randn(*shape: int, seed: int = 0) -> Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=DT)


def affine(dim: int, bias: bool, seed: int = 1) -> tuple[Tensor, Tensor | None]:
    """A random gain around 1 and, if asked, a random bias."""
    return 1 + 0.5 * randn(dim, seed=seed), (randn(dim, seed=seed + 1) if bias else None)


def module_fn(module: nn.Module, names: tuple[str, ...]):
    """The module as a function of (x, *params), for gradcheck and reference gradients."""
    return lambda x, *params: functional_call(module, dict(zip(names, params)), (x,))


def assert_same_function(ours, reference, inputs: tuple[Tensor, ...], gradcheck_too: bool = True) -> None:
    """Same forward and same gradients as the reference, and ours passes gradcheck.

    gradcheck's fast mode compares random projections v^T J u of the numerical and analytical
    Jacobians: as strict for a wrong backward, and ~100x cheaper than building both Jacobians.
    """
    inputs = tuple(t.detach().clone().requires_grad_(True) for t in inputs)
    y, y_ref = ours(*inputs), reference(*inputs)
    torch.testing.assert_close(y, y_ref, rtol=1e-12, atol=1e-12)
    probe = randn(*y.shape, seed=99)  # a random upstream gradient
    grads = torch.autograd.grad((y * probe).sum(), inputs)
    grads_ref = torch.autograd.grad((y_ref * probe).sum(), inputs)
    for grad, grad_ref in zip(grads, grads_ref):
        torch.testing.assert_close(grad, grad_ref, rtol=1e-10, atol=1e-12)
    if gradcheck_too:
        assert gradcheck(ours, inputs, fast_mode=True)


# --- RMSNorm / pRMSNorm ----------------------------------------------------------------------
@pytest.mark.parametrize("bias", [False, True], ids=["nobias", "bias"])
@pytest.mark.parametrize("eps_inside", [False, True], ids=["eps_out", "eps_in"])
@pytest.mark.parametrize("p", P_VALUES)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_rmsnorm_matches_reference(shape, p, eps_inside, bias):
    dim = shape[-1]
    k = ref_k(dim, p)
    x, (g, b) = randn(*shape), affine(dim, bias)
    norm = RMSNorm(dim, p=p, eps=EPS, eps_inside=eps_inside, bias=bias).double()
    assert norm.k == fn.partial_k(dim, p) == k
    names = ("weight", "bias") if bias else ("weight",)
    inputs = (x, g, b) if bias else (x, g)

    def reference(x, g, b=None):
        return ref_rms(x, g, b, k, EPS, eps_inside)

    assert_same_function(module_fn(norm, names), reference, inputs)
    assert_same_function(lambda x, g, b=None: fn.rms_norm(x, g, b, p, EPS, eps_inside), reference, inputs)


@pytest.mark.parametrize("dim,p,k", [(10, 0.125, 2), (7, 0.5, 4), (24, 0.0625, 2), (3, 0.0625, 1), (100, 0.07, 7), (1, 1.0, 1)])
def test_partial_k_is_ceil(dim, p, k):
    assert fn.partial_k(dim, p) == ref_k(dim, p) == k


def test_prmsnorm_statistic_ignores_features_beyond_k():
    dim, p = 10, 0.125  # k = ceil(1.25) = 2
    norm = RMSNorm(dim, p=p).double()
    x = randn(5, dim)
    perturbed = x.clone()
    perturbed[:, 2:] = 100 * randn(5, dim - 2, seed=7)
    y, y_perturbed = norm(x), norm(perturbed)
    torch.testing.assert_close(y_perturbed[:, :2], y[:, :2], rtol=0, atol=0)
    # The same factor divides the untouched and the perturbed features.
    torch.testing.assert_close(y_perturbed[:, 2:] / perturbed[:, 2:], y[:, 2:] / x[:, 2:], rtol=1e-14, atol=0)
    # ...while feature k - 1 does take part in the statistic (k is not floor(1.25) = 1).
    moved = x.clone()
    moved[:, 1] *= 3
    assert not torch.allclose(norm(moved)[:, 0], y[:, 0])


@pytest.mark.parametrize("eps_inside", [False, True])
def test_rmsnorm_tiny_and_huge_rows(eps_inside):
    """Rows whose RMS is near eps, ordinary and large: where the eps placement matters most.

    No gradcheck here: its finite-difference step (1e-6) is as large as the tiny row itself.
    """
    x = randn(3, 12) * torch.tensor([[1e-6], [1.0], [1e3]], dtype=DT)
    g, _ = affine(12, False)

    def reference(x, g):
        return ref_rms(x, g, None, 12, 1e-8, eps_inside)

    norm = RMSNorm(12, eps_inside=eps_inside).double()
    assert_same_function(module_fn(norm, ("weight",)), reference, (x, g), gradcheck_too=False)


def test_rmsnorm_defaults_are_the_authors_pytorch_file():
    norm = RMSNorm(8)
    assert (norm.p, norm.eps, norm.eps_inside, norm.bias) == (1.0, 1e-8, False, None)
    x = randn(4, 8)
    torch.testing.assert_close(norm.double()(x), ref_rms(x, torch.ones(8, dtype=DT), None, 8, 1e-8, False))


@pytest.mark.parametrize("eps_inside", [False, True])
def test_rmsnorm_of_a_zero_row_is_zero_with_finite_gradient(eps_inside):
    """An all-zero row (a GRU's U h0 with h0 = 0) must not poison training with NaN gradients.

    Near 0, y = x / (RMS(x) + eps) * g = x / eps * g + O(|x|^2) (inside: x / sqrt(eps) * g), so the
    exact derivative there is g / eps (g / sqrt(eps)).
    """
    norm = RMSNorm(6, eps=1e-3, eps_inside=eps_inside).double()
    with torch.no_grad():
        norm.weight.copy_(affine(6, False)[0])
    x = torch.zeros(2, 6, dtype=DT, requires_grad=True)
    y = norm(x)
    assert torch.equal(y, torch.zeros(2, 6, dtype=DT))
    probe = randn(2, 6, seed=5)
    (grad,) = torch.autograd.grad((y * probe).sum(), x)
    scale = 1e-3**0.5 if eps_inside else 1e-3
    torch.testing.assert_close(grad, probe * norm.weight.detach() / scale)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_rmsnorm_eps_inside_equals_torch_rmsnorm(shape):
    dim = shape[-1]
    ours, theirs = RMSNorm(dim, eps=EPS, eps_inside=True).double(), nn.RMSNorm(dim, eps=EPS).double()
    with torch.no_grad():
        ours.weight.copy_(affine(dim, False)[0])
        theirs.weight.copy_(ours.weight)
    x = randn(*shape)
    torch.testing.assert_close(ours(x), theirs(x), rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("eps", [1e-5, 0.1])
def test_rmsnorm_equals_layernorm_on_zero_mean_inputs(eps):
    """The paper's remark: with mean 0, LayerNorm's variance is the mean square, so the two agree."""
    x = randn(3, 5, 16)
    x = x - x.mean(-1, keepdim=True)
    rms, ln = RMSNorm(16, eps=eps, eps_inside=True).double(), LayerNorm(16, eps=eps, bias=False).double()
    with torch.no_grad():
        rms.weight.copy_(affine(16, False)[0])
        ln.weight.copy_(rms.weight)
    torch.testing.assert_close(rms(x), ln(x), rtol=1e-12, atol=1e-12)
    assert not torch.allclose(rms(x + 1), ln(x + 1))  # and only then


@pytest.mark.parametrize(
    "make,match",
    [
        (lambda: RMSNorm(8, p=0.0), r"\(0, 1\]"),
        (lambda: RMSNorm(8, p=1.5), r"\(0, 1\]"),
        (lambda: RMSNorm(8, p=-0.1), r"\(0, 1\]"),
        (lambda: RMSNorm(0), r">= 1"),
        (lambda: RMSNorm(8, eps=-1e-8), r">= 0"),
        (lambda: fn.rms_norm(torch.ones(2, 8), None, p=2.0), r"\(0, 1\]"),
        (lambda: fn.rms_norm(torch.ones(2, 8), None, eps=-1.0), r">= 0"),
        (lambda: fn.partial_k(8, 0.0), r"\(0, 1\]"),
        (lambda: LayerNorm(0), r">= 1"),
        (lambda: LayerNorm(4, eps=-1.0), r">= 0"),
        (lambda: L2Norm(0), r">= 1"),
        (lambda: L2Norm(4, eps=-1.0), r">= 0"),
    ],
)
def test_out_of_range_arguments_name_the_allowed_range(make, match):
    with pytest.raises(ValueError, match=match):
        make()


@pytest.mark.parametrize("impl", ["reference", "auto"])
def test_rmsnorm_checks_its_arguments_and_computes_k_once_when_built(monkeypatch, impl):
    """The forward of a built norm (activations, conv maps after their first map) checks nothing."""
    norms = build_normalization("prmsnorm", {"p": 0.25, "impl": impl})
    act, channels = norms.act(8), norms.channels(3)
    x, maps = torch.randn(2, 8), torch.randn(2, 3, 4, 4)
    first = act(x), channels(maps)

    def per_call(*args):
        raise AssertionError("an argument check or k computed per call")

    monkeypatch.setattr(formulas, "check_norm_args", per_call)
    monkeypatch.setattr(formulas, "partial_k", per_call)
    torch.testing.assert_close((act(x), channels(maps)), first, rtol=0, atol=0)


# --- LayerNorm, L2-Norm ----------------------------------------------------------------------
@pytest.mark.parametrize("bias", [False, True], ids=["nobias", "bias"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_layernorm_matches_reference_and_torch(shape, bias):
    dim = shape[-1]
    x, (g, b) = randn(*shape), affine(dim, bias)
    norm = LayerNorm(dim, eps=EPS, bias=bias).double()
    inputs, names = ((x, g, b), ("weight", "bias")) if bias else ((x, g), ("weight",))
    assert_same_function(module_fn(norm, names), lambda x, g, b=None: ref_layer(x, g, b, EPS), inputs)
    theirs = nn.LayerNorm(dim, eps=EPS, bias=bias).double()
    torch.testing.assert_close(module_fn(norm, names)(*inputs), module_fn(theirs, names)(*inputs), rtol=0, atol=0)


@pytest.mark.parametrize("bias", [False, True], ids=["nobias", "bias"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_l2norm_matches_reference(shape, bias):
    dim = shape[-1]
    x, (g, b) = randn(*shape), affine(dim, bias)
    norm = L2Norm(dim, eps=EPS, bias=bias).double()
    inputs, names = ((x, g, b), ("weight", "bias")) if bias else ((x, g), ("weight",))
    assert_same_function(module_fn(norm, names), lambda x, g, b=None: ref_l2(x, g, b, EPS), inputs)


def test_l2norm_is_rmsnorm_divided_by_sqrt_n():
    x = randn(4, 9)
    torch.testing.assert_close(L2Norm(9, eps=0).double()(x) * 3, RMSNorm(9, eps=0).double()(x))


# --- BatchNorm -------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(8, 6), (3, 5, 6)], ids=str)
def test_feature_batchnorm_train_and_eval_match_reference(shape):
    dim, eps, momentum = shape[-1], 1e-3, 0.3
    norm = FeatureBatchNorm(dim, eps=eps, momentum=momentum).double()
    g, b = affine(dim, True)
    names = ("weight", "bias")
    # Train mode: batch statistics over every leading index, per feature.
    assert_same_function(module_fn(norm, names), lambda x, g, b: ref_batch(x, g, b, eps), (randn(*shape), g, b))
    # Running statistics, written out: mean <- (1 - m) mean + m batch_mean; var with the unbiased batch variance.
    norm = FeatureBatchNorm(dim, eps=eps, momentum=momentum).double().train()
    mean, var = torch.zeros(dim, dtype=DT), torch.ones(dim, dtype=DT)
    for step in range(3):
        batch = 2 + step + randn(*shape, seed=10 + step)
        norm(batch)
        rows = batch.reshape(-1, dim)
        n = rows.shape[0]
        batch_mean = rows.sum(0) / n
        mean = (1 - momentum) * mean + momentum * batch_mean
        var = (1 - momentum) * var + momentum * ((rows - batch_mean) ** 2).sum(0) / (n - 1)
    torch.testing.assert_close(norm.running_mean, mean)
    torch.testing.assert_close(norm.running_var, var)
    norm.eval()
    assert_same_function(
        module_fn(norm, names), lambda x, g, b: ref_batch(x, g, b, eps, mean, var), (randn(*shape, seed=3), g, b)
    )


def test_batchnorm_channels_use_batch_and_spatial_statistics():
    norm = build_normalization("batchnorm", {"eps": 1e-3}).channels(3).double()
    x, (g, b) = randn(4, 3, 5, 2), affine(3, True)

    def reference(x, g, b):  # per channel over N, H, W: the channel axis moved last
        return ref_batch(x.permute(0, 2, 3, 1), g, b, 1e-3).permute(0, 3, 1, 2)

    assert_same_function(module_fn(norm, ("weight", "bias")), reference, (x, g, b))


def test_step_batchnorm_keeps_statistics_per_time_step():
    dim, steps = 4, 3
    norm = StepBatchNorm(dim, max_steps=steps, eps=1e-5, momentum=1.0).double().train()  # momentum 1: stats = last batch
    batches = [10.0 * t + (1 + t) * randn(16, dim, seed=t) for t in range(steps)]
    for t, batch in enumerate(batches):
        norm(batch, t)
    for t, batch in enumerate(batches):
        torch.testing.assert_close(norm.stats[t].running_mean, batch.mean(0))
        torch.testing.assert_close(norm.stats[t].running_var, batch.var(0))
    with torch.no_grad():
        norm.weight.copy_(affine(dim, True)[0])
        norm.bias.copy_(affine(dim, True)[1])
    norm.eval()
    x = randn(5, dim, seed=20)
    for t in range(steps + 2):  # steps past max_steps reuse the last step's statistics
        s = norm.stats[min(t, steps - 1)]
        torch.testing.assert_close(norm(x, t), ref_batch(x, norm.weight, norm.bias, 1e-5, s.running_mean, s.running_var))
    sequence = randn(steps, 5, dim, seed=21)
    torch.testing.assert_close(norm.forward_sequence(sequence), torch.stack([norm(s, t) for t, s in enumerate(sequence)]))


def test_step_batchnorm_trains_with_batch_statistics_of_its_step():
    norm = StepBatchNorm(4, max_steps=2).double().train()
    x, (g, b) = randn(8, 4), affine(4, True)
    for t in (0, 1):
        fn_t = lambda x, g, b, t=t: functional_call(norm, {"weight": g, "bias": b}, (x, t))  # noqa: E731
        assert_same_function(fn_t, lambda x, g, b: ref_batch(x, g, b, 1e-5), (x, g, b))


# --- WeightNorm, none ------------------------------------------------------------------------
WN_NAMES = ("parametrizations.weight.original0", "parametrizations.weight.original1", "bias")


def test_weightnorm_linear_matches_reference():
    layer = build_normalization("weightnorm").linear(6, 4).double()
    x, g, v, b = randn(3, 2, 6), 0.5 + randn(4, 1, seed=2).abs(), randn(4, 6, seed=3), randn(4, seed=4)
    assert_same_function(module_fn(layer, WN_NAMES), lambda x, g, v, b: x @ ref_weight(v, g).T + b, (x, g, v, b))


def test_weightnorm_conv_matches_reference():
    layer = build_normalization("weightnorm").conv2d(2, 3, 3, padding=1).double()
    x, g, v, b = randn(2, 2, 4, 4), 0.5 + randn(3, 1, 1, 1, seed=2).abs(), randn(3, 2, 3, 3, seed=3), randn(3, seed=4)
    reference = lambda x, g, v, b: F.conv2d(x, ref_weight(v, g), b, padding=1)  # noqa: E731
    assert_same_function(module_fn(layer, WN_NAMES), reference, (x, g, v, b))


def test_weightnorm_starts_at_the_plain_layer():
    """g is initialized to ||v||, so a fresh layer computes what its unnormalized weights would."""
    layer = build_normalization("weightnorm").linear(5, 3).double()
    v = layer.parametrizations.weight.original1
    x = randn(2, 5)
    torch.testing.assert_close(layer(x), x @ v.T + layer.bias)


def test_none_is_identity_with_plain_layers():
    norms = build_normalization("none")
    x = randn(2, 3, 5)
    assert torch.equal(norms.act(5)(x), x)
    assert torch.equal(norms.channels(3)(x.reshape(2, 3, 5, 1)), x.reshape(2, 3, 5, 1))
    linear = norms.linear(5, 4).double()
    torch.testing.assert_close(linear(x), x @ linear.weight.T + linear.bias)
    assert list(dict(linear.named_parameters())) == ["weight", "bias"]


# --- conv maps (ChannelNorm) -----------------------------------------------------------------
@pytest.mark.parametrize("axes", ["hw", "chw"])
@pytest.mark.parametrize("name,options", [("rmsnorm", {}), ("prmsnorm", {"p": 0.125, "eps_inside": True}), ("layernorm", {})])
def test_channel_norm_axes_match_reference(name, options, axes):
    norm = build_normalization(name, {"eps": EPS, "conv_axes": axes, **options}).channels(3).double()
    assert isinstance(norm, ChannelNorm) and norm.axes == axes
    n, c, h, w = 2, 3, 4, 5
    x, (g, b) = randn(n, c, h, w), affine(c, True)

    def reference(x, g, b):
        rows = x.reshape(n, c, h * w) if axes == "hw" else x.reshape(n, c * h * w)
        if name == "layernorm":
            y = ref_layer(rows, None, None, EPS)
        else:
            y = ref_rms(rows, torch.ones(()), None, ref_k(rows.shape[-1], options.get("p", 1.0)), EPS, options.get("eps_inside", False))
        return y.reshape(n, c, h, w) * g.view(1, c, 1, 1) + b.view(1, c, 1, 1)

    assert_same_function(module_fn(norm, ("weight", "bias")), reference, (x, g, b))


def test_channel_norm_rejects_unknown_axes():
    with pytest.raises(ValueError, match="'hw' or 'chw'"):
        build_normalization("rmsnorm", {"conv_axes": "c"}).channels(3)
