"""Fused RMSNorm paths (norms/fused) against the reference formulas, and the impl selection.

The CPU extension is built once per machine (cached under ~/.cache/torch_extensions); where it
cannot be built, the kernel tests skip with the reason and the fallback tests still run.
"""
import json
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from rmsnorm_repro.norms import RMSNorm, build_normalization, fused
from rmsnorm_repro.norms import functional as fn
from rmsnorm_repro.norms.fused import cpu

DT = torch.float64


def make(shape, bias, weight=True, seed=0, dtype=DT):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=g, dtype=dtype)
    d = shape[-1]
    w = (1 + 0.5 * torch.randn(d, generator=g, dtype=dtype)).requires_grad_() if weight else None
    b = torch.randn(d, generator=g, dtype=dtype).requires_grad_() if bias else None
    return x, w, b


def forward_backward(x, w, b, p, eps, eps_inside, impl, dy_seed=1):
    x = x.detach().clone().requires_grad_()
    y = fn.rms_norm(x, w, b, p, eps, eps_inside, impl=impl)
    dy = torch.randn(y.shape, generator=torch.Generator().manual_seed(dy_seed), dtype=DT).to(y.dtype)
    inputs = [t for t in (x, w, b) if t is not None]
    return [y, *torch.autograd.grad(y, inputs, dy)]


SHAPES = {
    "2d": (7, 33),           # k = ceil(33 p) is no integer multiple of anything
    "3d": (2, 3, 20),
    "dim1": (5, 1),
    "wide": (3, 300),
}


@pytest.mark.parametrize("shape", SHAPES.values(), ids=SHAPES.keys())
@pytest.mark.parametrize("p", [1.0, 0.3, 0.0625])
@pytest.mark.parametrize("eps_inside", [False, True])
@pytest.mark.parametrize("affine", ["gain", "gain+bias", "none"])
def test_fused_equals_reference_float64(ext, shape, p, eps_inside, affine):
    x, w, b = make(shape, bias="bias" in affine, weight=affine != "none")
    fast = forward_backward(x, w, b, p, 1e-5, eps_inside, "fused")
    ref = forward_backward(x, w, b, p, 1e-5, eps_inside, "reference")
    for a, r in zip(fast, ref):
        torch.testing.assert_close(a, r, rtol=1e-12, atol=1e-12)


def _forward_backward_of_view(view, w, b, impl):
    """Like forward_backward, for a view of a leaf: gradients reach the leaf through the view."""
    base = view._base.detach().clone().requires_grad_()
    x = base.as_strided(view.shape, view.stride(), view.storage_offset())
    y = fn.rms_norm(x, w, b, 0.5, 1e-8, False, impl=impl)
    dy = torch.randn(y.shape, generator=torch.Generator().manual_seed(1), dtype=DT)
    inputs = [t for t in (base, w, b) if t is not None]
    return [y, *torch.autograd.grad(y, inputs, dy)]


@pytest.mark.parametrize("view", ["transposed", "gate block", "gate block over time", "3d slice"])
def test_non_contiguous_input(ext, view):
    """Strided inputs equal the reference; rows at one fixed stride (a GRU's gate block of U h for one
    step, or of W x for all T steps at once) are read in place, other layouts are copied first."""
    x, _, _ = make((40, 12), bias=False)
    x = {"transposed": x.t(), "gate block": x[:, 3:9], "gate block over time": x.view(4, 10, 12)[..., 3:9],
         "3d slice": x.view(4, 10, 12)[:, ::2, 2:8]}[view]
    assert not x.is_contiguous()
    _, w, b = make((1, x.shape[-1]), bias=True, seed=2)
    for a, r in zip(_forward_backward_of_view(x, w, b, "fused"), _forward_backward_of_view(x, w, b, "reference")):
        torch.testing.assert_close(a, r, rtol=1e-12, atol=1e-12)
    with torch.profiler.profile() as prof:
        y = fn.rms_norm(x, w, b, 0.5, 1e-8, False, impl="fused")
        y.backward(torch.ones_like(y))
    copies = [e.name for e in prof.events() if e.name in ("aten::contiguous", "aten::copy_", "aten::clone")]
    assert bool(copies) == (view == "transposed")


def _dx_allocations(backward) -> int:
    """How many fresh tensors the fused op's backward node allocates itself in `backward()` (dx:
    aten::empty called by the node, not the zeros of the gain's partial sums)."""
    with torch.profiler.profile() as prof:
        backward()
    return sum(1 for e in prof.events()
               if e.name == "aten::empty" and e.cpu_parent is not None and e.cpu_parent.name == "rmsnorm_repro::rms_norm_backward")


def test_backward_overwrites_only_a_gradient_nobody_else_holds(ext):
    """dx may reuse dy's buffer only when autograd hands over the last reference to it: a fresh
    gradient (from y * c) is reused, the caller's dy and a gradient two branches share are left
    intact, and every case equals the reference."""
    x, w, b = make((6, 16), bias=True)
    c = torch.randn(6, 16, dtype=DT)
    dy = torch.randn(6, 16, dtype=DT)
    dy_before = dy.clone()
    grads = {}
    for impl in ("fused", "reference"):
        xg = x.clone().requires_grad_()
        y = fn.rms_norm(xg, w, b, 0.5, 1e-5, False, impl=impl)
        given = torch.autograd.grad(y, (xg, w, b), dy, retain_graph=True)
        shared = torch.autograd.grad((y * c + y.sin()).sum(), (xg, w, b), retain_graph=True)
        fresh = torch.autograd.grad((y * c).sum(), (xg, w, b), retain_graph=True)
        grads[impl] = (*given, *shared, *fresh)
        if impl == "fused":
            assert _dx_allocations(lambda: torch.autograd.grad((y * c).sum(), xg, retain_graph=True)) == 0
            assert _dx_allocations(lambda: torch.autograd.grad(y, xg, dy, retain_graph=True)) == 1
    assert torch.equal(dy, dy_before)
    for a, r in zip(grads["fused"], grads["reference"]):
        torch.testing.assert_close(a, r, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("eps_inside", [False, True])
@pytest.mark.parametrize("p", [1.0, 0.4])
def test_gradcheck_fused_op(ext, p, eps_inside):
    x, w, b = make((4, 10), bias=True)
    x.requires_grad_()
    k = fn.partial_k(10, p)
    assert torch.autograd.gradcheck(lambda x, w, b: ext.rms_norm(x, w, b, k, 1e-3, eps_inside), (x, w, b))


@pytest.mark.parametrize("eps_inside", [False, True])
def test_zero_rows(ext, eps_inside):
    """A row whose statistic is 0 (e.g. h0 = 0 in a GRU): finite, exact, and still differentiable."""
    x, w, b = make((4, 12), bias=True)
    x[1] = 0.0
    x[2, :6] = 0.0  # statistic zero (k = 6) but the tail is not
    fast = forward_backward(x, w, b, 0.5, 1e-3, eps_inside, "fused")
    ref = forward_backward(x, w, b, 0.5, 1e-3, eps_inside, "reference")
    for a, r in zip(fast, ref):
        assert torch.isfinite(a).all()
        torch.testing.assert_close(a, r, rtol=1e-12, atol=1e-12)
    # eps = 1 keeps the finite differences around the non-smooth point small enough to check.
    x.requires_grad_()
    assert torch.autograd.gradcheck(lambda x, w, b: ext.rms_norm(x, w, b, 6, 1.0, eps_inside), (x, w, b), atol=1e-5)


def test_partial_statistic_ignores_features_past_k(ext):
    x, w, _ = make((3, 16), bias=False)
    k = fn.partial_k(16, 0.25)
    changed = x.clone()
    changed[:, k:] = 100 * torch.randn(3, 16 - k, dtype=DT)
    y, y2 = (fn.rms_norm(t, w, None, 0.25, impl="fused") for t in (x, changed))
    torch.testing.assert_close(y2[:, :k], y[:, :k], rtol=0, atol=0)
    # the tail is scaled by the same statistic
    torch.testing.assert_close(y2[:, k:] / changed[:, k:], y[:, k:] / x[:, k:], rtol=1e-12, atol=0)


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 2e-5), (torch.bfloat16, 3e-2)])
def test_low_precision_close_to_float64(ext, dtype, tol):
    x, w, b = make((6, 64), bias=True)
    ref = forward_backward(x, w, b, 1.0, 1e-8, False, "reference")
    fast = forward_backward(x.to(dtype), w.detach().to(dtype).requires_grad_(), b.detach().to(dtype).requires_grad_(),
                            1.0, 1e-8, False, "fused")
    for a, r in zip(fast, ref):
        assert a.dtype == dtype
        torch.testing.assert_close(a.double(), r, rtol=tol, atol=tol * r.abs().max().item())


def test_threads_do_not_change_the_result(ext):
    """dgain comes from per-chunk partial sums; chunking over rows must match the 1-thread result."""
    x, w, b = make((64, 1024), bias=True)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = forward_backward(x, w, b, 1.0, 1e-8, False, "fused")
        torch.set_num_threads(2)
        two = forward_backward(x, w, b, 1.0, 1e-8, False, "fused")
    finally:
        torch.set_num_threads(before)
    for a, r in zip(one, two):
        torch.testing.assert_close(a, r, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_streaming_stores_give_the_same_result(ext, dtype):
    """Outputs over the streaming threshold are written with non-temporal stores (x86): forward and
    backward must equal the normal stores bit for bit, on rows that start unaligned (d = 33, a gate
    block), with pRMSNorm's two backward segments, dx written over a fresh dy, and 2 threads."""
    x, w, b = make((64, 33), bias=True, dtype=dtype)
    block = make((48, 120), bias=False, dtype=dtype)[0][:, 20:90]
    wb = make((1, 70), bias=False, seed=3, dtype=dtype)[1]
    cases = [lambda: forward_backward(x, w, b, 0.3, 1e-8, False, "fused"),
             lambda: forward_backward(block, wb, None, 1.0, 1e-8, True, "fused"),
             lambda: _fresh_gradient_case(x, w, b)]
    before, threads = ext.stream_min_bytes(), torch.get_num_threads()
    try:
        for n_threads in (1, 2):
            torch.set_num_threads(n_threads)
            ext.set_stream_min_bytes(1 << 62)
            normal = [case() for case in cases]
            ext.set_stream_min_bytes(0)
            streamed = [case() for case in cases]
            for a, r in zip(sum(streamed, []), sum(normal, [])):
                assert torch.equal(a, r)
    finally:
        ext.set_stream_min_bytes(before)
        torch.set_num_threads(threads)


def _fresh_gradient_case(x, w, b):
    xg = x.detach().clone().requires_grad_()
    y = fn.rms_norm(xg, w, b, 0.5, 1e-5, False, impl="fused")
    return [y, *torch.autograd.grad((y * 3).sum(), (xg, w, b))]  # dy is autograd's own: dx is written over it


def test_streaming_threshold_comes_from_the_last_level_cache(ext):
    llc = cpu.last_level_cache_bytes()
    if llc is None:
        assert ext.stream_min_bytes() == (1 << 63) - 1  # unknown cache: nothing streams
    else:
        assert ext.stream_min_bytes() == llc // 4


def test_auto_selects_the_fused_kernel_and_logs_it_once(ext, caplog, monkeypatch):
    # what other tests in this process chose (float16 on CPU: the reference) is not this model's choice
    monkeypatch.setattr(fused, "_used", {})
    fused.clear_caches()
    norms = build_normalization("rmsnorm", {"impl": "auto", "eps": 1e-8})
    layer = norms.act(32).double()
    x = torch.randn(4, 32, dtype=DT)
    with caplog.at_level(logging.INFO, logger="rmsnorm_repro.norms.fused"):
        y = layer(x)
        layer(x)
    assert norms.describe()["impl_used"] == "fused-cpu"
    assert fused.resolve("auto", "cpu") == "fused-cpu"
    if fused.implementations_used("auto") == ["fused-cpu"] and caplog.records:
        # the line is logged on the first use in the process: at most once here
        assert sum("fused-cpu" in r.getMessage() for r in caplog.records) <= 1
    torch.testing.assert_close(y, fn.rms_norm(x, layer.weight, None, 1.0, 1e-8), rtol=1e-12, atol=1e-12)


def test_channels_norm_uses_the_selected_impl(ext):
    torch.manual_seed(0)
    x = torch.randn(2, 3, 4, 5, dtype=DT)
    fast = build_normalization("prmsnorm", {"p": 0.25, "impl": "fused"}).channels(3).double()
    ref = build_normalization("prmsnorm", {"p": 0.25, "impl": "reference"}).channels(3).double()
    torch.testing.assert_close(fast(x), ref(x), rtol=1e-12, atol=1e-12)


def test_reference_impl_and_bad_impl():
    assert fused.resolve("reference", "cpu") == "reference"
    layer = RMSNorm(8, impl="reference")
    x = torch.randn(2, 8)
    torch.testing.assert_close(layer(x), fn.rms_norm(x, layer.weight))
    assert build_normalization("rmsnorm", {"impl": "reference"}).describe()["impl_used"] == "reference"
    with pytest.raises(ValueError, match="norm.impl must be one of"):
        RMSNorm(8, impl="fast")
    with pytest.raises(ValueError, match="norm.impl must be one of"):
        build_normalization("rmsnorm", {"impl": "cuda"})


@pytest.mark.parametrize("dtype", [torch.bfloat16])
def test_float32_parameters_beside_low_precision_x(ext, dtype):
    """Autocast's mix (bf16 activations, float32 gain and bias): the kernel reads the gain in float32
    and returns x's dtype, as F.layer_norm does; dgain and dbias come back in float32; all close to
    the float64 reference of the same rounded inputs. (float16 takes the reference on CPU.)"""
    x, w, b = make((6, 40), bias=True)
    x = x.to(dtype)
    xg = x.detach().clone().requires_grad_()
    wf, bf = (t.detach().float().requires_grad_() for t in (w, b))
    y = fn.rms_norm(xg, wf, bf, 0.5, 1e-6, False, impl="fused")
    assert y.dtype == dtype
    dy = torch.randn(y.shape, generator=torch.Generator().manual_seed(1)).to(dtype)
    grads = torch.autograd.grad(y, (xg, wf, bf), dy)
    assert [g.dtype for g in grads] == [dtype, torch.float32, torch.float32]
    y_ref = fn.rms_norm(x.double(), w, b, 0.5, 1e-6)  # float64, from the same rounded x
    ref = [y_ref, *torch.autograd.grad(y_ref, (w, b), dy.double())]
    tol = 1e-2
    torch.testing.assert_close(y.double(), ref[0], rtol=tol, atol=tol)
    for got, want in zip(grads[1:], ref[1:]):
        torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5 * want.abs().max().item())


def test_bfloat16_rows_compute_in_float32_and_round_like_torch(ext):
    """The bf16 loads and stores (vectorized, branch-free) are torch's conversions: bf16 x in, the float32
    kernel's result on the widened values, rounded to nearest even as torch casts; NaN stays NaN."""
    x, w, _ = make((7, 300), bias=False)
    x = x.detach().to(torch.bfloat16)
    x[2, 5] = float("nan")
    x[3] = torch.tensor([3.3895e38, -1.0e-40, 0.0] * 100).to(torch.bfloat16)  # near max, subnormal, zero
    dy = torch.randn(x.shape, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    results = []
    for xs, dys in ((x, dy), (x.float(), dy.float())):
        xg, wg = xs.clone().requires_grad_(), w.detach().float().requires_grad_()
        y = fn.rms_norm(xg, wg, None, 0.5, 1e-6, False, impl="fused")
        results.append([y, *torch.autograd.grad(y, (xg, wg), dys)])
    (y16, dx16, dw16), (y32, dx32, dw32) = results
    for got, want in ((y16, y32.to(torch.bfloat16)), (dx16, dx32.to(torch.bfloat16))):
        assert torch.equal(got.isnan(), want.isnan()) and got[2].isnan().all()  # (NaN payloads may differ)
        assert torch.equal(got.nan_to_num().view(torch.int16), want.nan_to_num().view(torch.int16))  # bitwise
    torch.testing.assert_close(dw16, dw32, rtol=0, atol=0, equal_nan=True)


def test_module_under_autocast_returns_x_dtype_like_layer_norm(ext):
    torch.manual_seed(0)
    lin, norm = torch.nn.Linear(16, 32), RMSNorm(32, impl="auto")
    x = torch.randn(5, 16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        h = lin(x)
        y = norm(h)
        ln = torch.nn.functional.layer_norm(h, (32,), torch.ones(32), torch.zeros(32))
    assert norm.kernel_name == "fused-cpu" and y.dtype == ln.dtype == torch.bfloat16
    y.float().sum().backward()
    assert norm.weight.grad.dtype == torch.float32
    torch.testing.assert_close(y.double(), fn.rms_norm(h.double(), norm.weight.double()), rtol=1e-2, atol=1e-2)


def test_unsupported_mixes_take_the_reference(ext):
    x = torch.randn(3, 8, dtype=torch.float32)
    w = torch.ones(8, dtype=torch.float64)  # no autocast mix: torch promotes
    assert fn.rms_norm(x, w, impl="fused").dtype == torch.float64
    assert fused.kernel("fused", "cpu", torch.float32, torch.float64, 8, 8, False, False)[0] == "reference"
    assert fused.kernel("fused", "cpu", torch.bfloat16, None, 8, 8, False, False)[0] == "reference"  # gain and bias of two dtypes
    assert fused.kernel("fused", "cpu", torch.bfloat16, torch.float32, 8, 8, False, False)[0] == "fused-cpu"
    assert fused.kernel("fused", "cpu", torch.float16, torch.float16, 8, 8, False, False)[0] == "reference"  # not compiled in


def test_missing_compiler_falls_back_with_a_warning(monkeypatch):
    monkeypatch.setenv("CXX", "/nonexistent/c++")
    with pytest.warns(UserWarning, match=r"no C\+\+ compiler found.*reference"):
        assert cpu.load.__wrapped__() is None
    # what a machine without a compiler sees from here on
    monkeypatch.setattr(cpu, "load", lambda: None)
    monkeypatch.setattr(fused, "_used", {})
    fused.clear_caches()
    try:
        assert fused.resolve("auto", "cpu") == "reference"
        assert fused.resolve("fused", "cpu") == "reference"
        x = torch.randn(3, 8)
        torch.testing.assert_close(fn.rms_norm(x, None, impl="auto"), fn.rms_norm(x, None))
        assert build_normalization("rmsnorm", {"impl": "auto"}).describe()["impl_used"] == "reference"
    finally:
        fused.clear_caches()


def test_failing_build_falls_back_with_a_warning(monkeypatch, tmp_path):
    monkeypatch.setenv("CXX", "false")  # a "compiler" that exists and always fails
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    with pytest.warns(UserWarning, match="failed.*reference"):
        assert cpu.load.__wrapped__() is None


TRITON_CHECK = textwrap.dedent("""
    import json, torch
    from rmsnorm_repro.norms import functional as fn
    from rmsnorm_repro.norms.fused import triton_rmsnorm as T
    worst = 0.0
    for shape, p, eps_inside, affine in [((5, 33), 1.0, False, 2), ((2, 3, 20), 0.3, True, 1), ((4, 1), 1.0, False, 0),
                                         ((6, 12), 0.5, False, 2), ((6, 12), 0.0625, True, 2)]:
        g = torch.Generator().manual_seed(0)
        x = torch.randn(*shape, generator=g, dtype=torch.float64)
        x[0] = 0.0  # a zero row
        d = shape[-1]
        w = torch.randn(d, generator=g, dtype=torch.float64).requires_grad_() if affine else None
        b = torch.randn(d, generator=g, dtype=torch.float64).requires_grad_() if affine == 2 else None
        dy = torch.randn(*shape, generator=g, dtype=torch.float64)
        outs = []
        for run in (lambda x: T.rms_norm(x, w, b, fn.partial_k(d, p), 1e-3, eps_inside),
                    lambda x: fn.rms_norm(x, w, b, p, 1e-3, eps_inside)):
            xi = x.clone().requires_grad_()
            y = run(xi)
            outs.append([y, *torch.autograd.grad(y, [t for t in (xi, w, b) if t is not None], dy)])
        worst = max([worst] + [(a - r).abs().max().item() for a, r in zip(*outs)])
    print(json.dumps({"max_abs_err": worst}))
""")


def test_triton_kernel_under_interpreter():
    pytest.importorskip("triton", reason="Triton is not installed (it ships with CUDA builds of torch)")
    env = {**os.environ, "TRITON_INTERPRET": "1", "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", TRITON_CHECK], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1])["max_abs_err"] < 1e-12


def test_kernel_bench_smoke(ext):
    from rmsnorm_repro.bench import kernels

    names = ["torch layer_norm", "torch rms_norm", "suite fused"]
    rows = kernels.run(shapes=((4, 16),), names=names, rounds=2, min_run_time=0.002)
    assert {(r["impl"], r["mode"]) for r in rows} == {(n, m) for n in names for m in ("fwd", "fwd+bwd")}
    for r in rows:
        assert r["ms"] > 0 and r["gb_s"] > 0
        if r["impl"] == "torch layer_norm":
            assert r["vs_layer_norm"] == 1.0
    assert "| 4x16 | fwd+bwd | suite fused |" in kernels.markdown(rows)


def test_step_bench_reads_the_paper_ratios():
    from rmsnorm_repro.bench import steps

    ratios = steps.paper_ratios("transformer")
    if not ratios:
        pytest.skip("results/paper/table4.csv is not in this checkout")
    assert ratios["Table 4"]["layernorm"] == 1.0
    assert 0.5 < ratios["Table 4"]["rmsnorm"] < 1.0  # the paper's RMSNorm is faster than its LayerNorm


def test_bench_targets_say_which_hold():
    from rmsnorm_repro.bench import kernels, steps

    def kernel_row(impl, ln, trms):
        return {"shape": "4096x512", "mode": "fwd+bwd", "impl": impl, "vs_layer_norm": ln, "vs_torch_rms_norm": trms}

    (line,) = kernels.target_lines([kernel_row("suite fused", 0.55, 0.25), kernel_row("suite fused pRMSNorm 6.25%", 0.6, 0.3)])
    assert "0.55x torch layer_norm (target <= 0.6x: holds)" in line
    assert "floor" not in line  # no floor row timed: none reported
    assert "0.25x torch rms_norm (target <= 0.2x: does not hold)" in line
    assert "pRMSNorm 0.60x (target <= RMSNorm's: does not hold)" in line
    (line,) = kernels.target_lines([kernel_row("suite fused", 0.7, 0.1), kernel_row(kernels.FLOOR, 0.65, 0.05)])
    assert "0.70x torch layer_norm (target <= 0.6x: does not hold; the floor x * 2 is at 0.65x, so no norm " \
           "reaches the target here)" in line

    def step_row(task, ratio, floor, overhead):
        return {"task": task, "norm": "rmsnorm", "vs_layernorm": ratio, "floor_vs_layernorm": floor,
                "overhead_vs_layernorm_overhead": overhead}

    rnn, transformer = steps.target_lines([step_row("rnnsearch", 0.85, 0.7, 0.4), step_row("transformer", 0.98, 0.97, None)])
    assert rnn == "rnnsearch: RMSNorm / LayerNorm 0.85 (target <= 0.90: holds); overhead / LayerNorm's 0.40 (target <= 0.5: holds)"
    assert "does not hold; out of reach here: no norm at all gives 0.97" in transformer
    assert "not measurable" in transformer


def test_compiled_graph_calls_the_kernel_as_custom_ops_on_cpu(ext):
    """impl=auto inside torch.compile on CPU: the fused kernel as opaque custom ops with an autograd
    formula (fused/ops.py), no graph break, the same results; impl=reference traces the formulas."""
    from torch._dynamo.testing import CompileCounterWithBackend

    x = torch.randn(3, 10, dtype=DT, requires_grad=True)
    w = (torch.rand(10, dtype=DT) + 0.5).requires_grad_()
    dy = torch.randn(3, 10, dtype=DT)
    want = [fn.rms_norm(x, w, None, 0.5, 1e-6, True)]
    want += torch.autograd.grad(want[0], (x, w), dy)
    for impl, has_op in (("auto", True), ("reference", False)):
        torch._dynamo.reset()
        counter = CompileCounterWithBackend("aot_eager")
        compiled = torch.compile(lambda x, w: fn.rms_norm(x, w, None, 0.5, 1e-6, True, impl=impl), fullgraph=True,
                                 backend=counter)
        y = compiled(x, w)
        got = [y, *torch.autograd.grad(y, (x, w), dy)]
        for a, r in zip(got, want):
            torch.testing.assert_close(a, r, rtol=1e-12, atol=1e-12)
        graph = "\n".join(str(n.target) for g in counter.graphs for n in g.graph.nodes)
        assert ("rmsnorm_repro.rms_norm_fwd" in graph) == has_op, graph


@pytest.mark.parametrize("p,eps_inside,affine", [(1.0, False, "gain+bias"), (0.3, True, "gain"), (0.5, False, "none")])
def test_custom_ops_equal_the_reference_with_and_without_the_kernel(ext, monkeypatch, p, eps_inside, affine):
    """The ops' own torch fallback (no compiler) computes the kernel's math: both against float64."""
    from rmsnorm_repro.norms.fused import ops

    x, w, b = make((2, 3, 20), bias="bias" in affine, weight=affine != "none")
    x[0, 0] = 0.0  # a zero row
    ref = forward_backward(x, w, b, p, 1e-5, eps_inside, "reference")
    k = fn.partial_k(20, p)

    def through_ops():
        xi = x.clone().requires_grad_()
        y = ops.rms_norm(xi, w, b, k, 1e-5, eps_inside)
        dy = torch.randn(y.shape, generator=torch.Generator().manual_seed(1), dtype=DT)
        return [y, *torch.autograd.grad(y, [t for t in (xi, w, b) if t is not None], dy)]

    for a, r in zip(through_ops(), ref):
        torch.testing.assert_close(a, r, rtol=1e-12, atol=1e-12)
    monkeypatch.setattr(cpu, "load", lambda: None)
    for a, r in zip(through_ops(), ref):
        torch.testing.assert_close(a, r, rtol=1e-10, atol=1e-10)


def test_custom_ops_pass_torch_library_opcheck(ext):
    from rmsnorm_repro.norms.fused import ops

    x = torch.randn(4, 12, dtype=DT, requires_grad=True)
    w = torch.rand(12, dtype=DT).requires_grad_()
    torch.library.opcheck(ops.rms_norm_fwd, (x, w, None, 6, 1e-5, False),
                          test_utils=("test_schema", "test_autograd_registration", "test_faketensor"))


def test_double_backward_is_refused_clearly(ext):
    x, w, _ = make((3, 8), bias=False)
    x.requires_grad_()
    y = fn.rms_norm(x, w, impl="fused")
    with pytest.raises(RuntimeError, match="differentiable once"):
        torch.autograd.grad(y.sum(), x, create_graph=True)


# The build cache, prepare() -------------------------------------------------------------------------
def test_build_key_follows_the_source_and_torch_not_the_checkout(tmp_path, monkeypatch):
    """Two checkouts with the same source and torch share one build; another source or torch gets its own."""
    copy = tmp_path / "checkout2" / cpu.SOURCE.name
    copy.parent.mkdir()
    copy.write_bytes(cpu.SOURCE.read_bytes())
    assert cpu.build_key(copy) == cpu.build_key(cpu.SOURCE)
    copy.write_bytes(cpu.SOURCE.read_bytes() + b"\n// changed\n")
    assert cpu.build_key(copy) != cpu.build_key(cpu.SOURCE)
    assert cpu.build_key(cpu.SOURCE, ("-DX",)) != cpu.build_key(cpu.SOURCE)
    header = tmp_path / "rows.h"  # a header the source includes (the GRU kernels share gru_rows.h)
    header.write_text("// one\n")
    with_header = cpu.build_key(cpu.SOURCE, headers=(header,))
    assert with_header != cpu.build_key(cpu.SOURCE)
    header.write_text("// two\n")
    assert cpu.build_key(cpu.SOURCE, headers=(header,)) != with_header
    key = cpu.build_key(cpu.SOURCE)
    monkeypatch.setattr(torch, "__version__", torch.__version__ + "+other")
    assert cpu.build_key(cpu.SOURCE) != key


def test_the_build_compiles_a_copy_and_names_no_checkout(ext):
    directory = os.path.dirname(ext.__file__)
    assert os.path.basename(directory).endswith(cpu.build_key())
    with open(os.path.join(directory, cpu.SOURCE.name), "rb") as f:
        assert f.read() == cpu.SOURCE.read_bytes()
    with open(os.path.join(directory, "build.ninja")) as f:
        assert str(cpu.SOURCE.parent) not in f.read()  # another checkout's process writes the same build.ninja


def test_prepare_loads_the_kernel_before_the_first_call(ext):
    assert fused.prepare("cpu") == "fused-cpu"
    assert build_normalization("rmsnorm").prepare(torch.device("cpu")) == "fused-cpu"
    assert build_normalization("prmsnorm", {"impl": "reference"}).prepare("cpu") == "reference"
    assert build_normalization("layernorm").prepare("cpu") is None  # no kernel of its own: nothing to do
    # a fresh process loads the cached build in well under the 30-60 s of a build, whichever PATH it has
    # (a SLURM job's starts with the venv's bin/ and its ninja; a plain shell may find the system's first)
    code = "import time, torch; t = time.perf_counter(); from rmsnorm_repro.norms import fused; " \
           "print(fused.prepare('cpu'), time.perf_counter() - t)"
    plain = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if p != str(Path(sys.executable).parent))
    for path in (f"{Path(sys.executable).parent}{os.pathsep}{plain}", plain):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                             env={**os.environ, "PATH": path})
        name, seconds = out.stdout.split()
        assert name == "fused-cpu" and float(seconds) < 15, out.stderr[-2000:]


# The module: implementation chosen once ---------------------------------------------------------------
def test_module_chooses_its_kernel_once_and_again_after_a_move(ext, monkeypatch):
    calls = []
    choose = fused.kernel

    def counting(*args):
        calls.append(args)
        return choose(*args)

    monkeypatch.setattr(fused, "kernel", counting)
    layer = RMSNorm(16, p=0.5, bias=True)
    x = torch.randn(3, 16)
    for _ in range(3):
        layer(x)
    assert len(calls) == 1 and layer.kernel_name == "fused-cpu"
    layer.double()  # moved / cast: chosen again at the next call
    assert layer.kernel_name is None
    y = layer(x.double())
    assert len(calls) == 2 and calls[-1][2] == torch.float64
    torch.testing.assert_close(y, fn.rms_norm(x.double(), layer.weight, layer.bias, 0.5), rtol=1e-12, atol=1e-12)
    with torch.autocast("cpu", dtype=torch.bfloat16):  # another dtype seen: chosen for it
        layer.float()(torch.nn.functional.linear(x, torch.eye(16)))
    assert calls[-1][2:] == (torch.bfloat16, torch.float32, 16, 8, False, True)  # dtypes, dim, k, eps placement, bias


@pytest.mark.parametrize("p,eps_inside,bias", [(1.0, False, False), (0.3, True, True), (0.0625, False, True)])
def test_module_equals_reference_float64(ext, p, eps_inside, bias):
    torch.manual_seed(0)
    fast = RMSNorm(33, p, 1e-5, eps_inside, bias).double()
    ref = RMSNorm(33, p, 1e-5, eps_inside, bias, impl="reference").double()
    with torch.no_grad():
        for layer in (fast, ref):
            layer.weight.copy_(torch.linspace(0.5, 1.5, 33, dtype=DT))
            if bias:
                layer.bias.copy_(torch.linspace(-1, 1, 33, dtype=DT))
    x = torch.randn(2, 5, 33, dtype=DT)
    dy = torch.randn(2, 5, 33, dtype=DT)
    outs = []
    for layer in (fast, ref):
        xi = x.clone().requires_grad_()
        y = layer(xi)
        outs.append([y, *torch.autograd.grad(y, [xi, *layer.parameters()], dy)])
    assert fast.kernel_name == "fused-cpu"
    for a, r in zip(*outs):
        torch.testing.assert_close(a, r, rtol=1e-12, atol=1e-12)


def test_module_copies_and_pickles(ext):
    import copy
    import pickle

    layer = RMSNorm(8)
    x = torch.randn(2, 8)
    y = layer(x)
    for other in (copy.deepcopy(layer), pickle.loads(pickle.dumps(layer))):
        assert other.kernel_name is None
        torch.testing.assert_close(other(x), y)
        assert other.kernel_name == "fused-cpu"


# Under torch.compile, torch.export and DDP --------------------------------------------------------------
class _Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(12, 12)
        self.norm = RMSNorm(12, p=0.5, eps=1e-6, bias=True)

    def forward(self, x):
        return torch.tanh(self.norm(self.lin(x)))


def _grads(model, x):
    model.zero_grad(set_to_none=True)
    y = model(x)
    y.square().sum().backward()
    return [y.detach(), *(p.grad.clone() for p in model.parameters())]


def test_module_under_compile_fullgraph_equals_eager(ext):
    torch.manual_seed(0)
    model, x = _Block().double(), torch.randn(5, 12, dtype=DT)
    eager = _grads(model, x)
    assert model.norm.kernel_name == "fused-cpu"
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")  # traces the reference: no graph break
    for a, r in zip(_grads(compiled, x), eager):
        torch.testing.assert_close(a, r, rtol=1e-10, atol=1e-10)


def test_module_exports_to_standard_ops(ext):
    torch.manual_seed(0)
    model, x = _Block(), torch.randn(5, 12)
    want = model(x)
    program = torch.export.export(model, (x,))
    assert not [n for n in program.graph.nodes if "rmsnorm" in str(n.target)]  # runs without the extension
    torch.testing.assert_close(program.module()(x), want, rtol=1e-5, atol=1e-6)


def test_module_under_ddp_equals_one_process(ext):
    """DDP's gradient hooks fire for the fused kernel's parameters like for any other (gloo, 1 rank)."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    torch.manual_seed(0)
    model, x = _Block().double(), torch.randn(6, 12, dtype=DT)
    want = _grads(model, x)
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        ddp = DistributedDataParallel(model)
        got = _grads(ddp, x)
    finally:
        dist.destroy_process_group()
    assert model.norm.kernel_name == "fused-cpu"
    for a, r in zip(got, want):
        torch.testing.assert_close(a, r, rtol=1e-12, atol=1e-12)


# On CUDA (mocked: the choice is made from device type, dtypes and the norm's form, no tensor) ---------
@pytest.fixture
def mocked_cuda(monkeypatch):
    """A machine with a GPU and Triton, as far as the dispatch can tell."""
    pytest.importorskip("triton", reason="Triton is not installed (it ships with CUDA builds of torch)")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(fused, "_used", {})  # what this mock chooses is not what the process ran
    fused.clear_caches()
    yield
    fused.clear_caches()


F32, BF16, F16, F64 = torch.float32, torch.bfloat16, torch.float16, torch.float64
CUDA_CHOICES = [  # impl, x dtype, parameter dtype, dim, k, eps inside, bias -> what runs
    ("auto", F32, F32, 512, 512, True, False, "torch"),        # torch.nn.RMSNorm's formula
    ("auto", BF16, BF16, 2048, 2048, True, False, "torch"),
    ("auto", BF16, F32, 1024, 1024, True, False, "torch"),     # autocast's mix
    ("auto", F32, F32, 1024, 1024, False, False, "triton"),    # the authors' x / (RMS + eps): not torch's formula
    ("auto", F32, F32, 1024, 64, True, False, "triton"),       # pRMSNorm: torch has no partial statistic
    ("auto", F32, F32, 1024, 1024, True, True, "triton"),      # a bias: one kernel, not two
    ("auto", F16, F16, 1024, 1024, True, False, "triton"),     # float16: a zero row's gradient kept finite
    ("auto", F16, F32, 1024, 1024, True, False, "triton"),
    ("fused", F32, F32, 512, 512, True, False, "triton"),      # fused: the suite's own kernel
    ("reference", F32, F32, 512, 512, True, False, "reference"),
    ("auto", F32, F64, 512, 512, True, False, "reference"),    # torch's promotion: the formulas
    ("auto", F32, F32, 70000, 64, False, False, "reference"),  # a row longer than one Triton program takes
]


@pytest.mark.parametrize("impl,dtype,param_dtype,dim,k,eps_inside,bias,expected", CUDA_CHOICES)
def test_auto_on_cuda_takes_torch_where_it_computes_the_formula(mocked_cuda, impl, dtype, param_dtype, dim, k,
                                                                 eps_inside, bias, expected):
    assert fused.kernel(impl, "cuda", dtype, param_dtype, dim, k, eps_inside, bias)[0] == expected


def test_cuda_without_triton_still_takes_torch_where_exact(mocked_cuda, monkeypatch):
    from rmsnorm_repro.norms.fused import triton_rmsnorm

    monkeypatch.setattr(triton_rmsnorm, "available", lambda: False)
    fused.clear_caches()
    assert fused.kernel("auto", "cuda", F32, F32, 512, 512, True, False)[0] == "torch"
    assert fused.kernel("auto", "cuda", F32, F32, 512, 512, False, False)[0] == "reference"
    assert fused.kernel("auto", "cuda", BF16, F32, 512, 512, True, False)[0] == "reference"  # no kernel for the mix outside autocast


@pytest.mark.parametrize("shape", [(7, 33), (2, 3, 20), (5, 1)])
def test_torch_path_equals_reference_float64(mocked_cuda, shape):
    """The function the dispatch takes for "torch", run on CPU tensors: forward and every gradient against
    the formulas in float64, zero row included (eps inside the root keeps it finite)."""
    name, run = fused.kernel("auto", "cuda", F64, F64, shape[-1], shape[-1], True, False)
    assert name == "torch"
    x, w, _ = make(shape, bias=False)
    x.view(-1, shape[-1])[0] = 0.0
    dy = torch.randn(shape, generator=torch.Generator().manual_seed(1), dtype=DT)
    outs = []
    for f in (run, lambda *a: fn.rms_norm(a[0], a[1], None, 1.0, 1e-6, True)):
        xi = x.clone().requires_grad_()
        y = f(xi, w, None, shape[-1], 1e-6, True)
        outs.append([y, *torch.autograd.grad(y, (xi, w), dy)])
    for a, r in zip(*outs):
        assert a.dtype == r.dtype
        torch.testing.assert_close(a, r, rtol=1e-12, atol=1e-12)


# CPU autocast has no rule for rms_norm (aten warns and takes its composite path); CUDA autocast runs it in float32
@pytest.mark.filterwarnings("ignore:Mismatch dtype between input and weight")
def test_torch_path_for_autocasts_mix_runs_triton_outside_autocast(mocked_cuda, monkeypatch):
    from rmsnorm_repro.norms.fused import triton_rmsnorm

    calls = []
    monkeypatch.setattr(triton_rmsnorm, "rms_norm_unchecked", lambda *a: calls.append(a) or a[0])
    _, run = fused.kernel("auto", "cuda", BF16, F32, 16, 16, True, False)
    lin, w = torch.nn.Linear(8, 16), 1 + 0.5 * torch.randn(16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        h = lin(torch.randn(4, 8))
        y = run(h, w, None, 16, 1e-6, True)
    assert not calls and h.dtype == y.dtype == torch.bfloat16
    torch.testing.assert_close(y.double(), fn.rms_norm(h.double(), w.double(), None, 1.0, 1e-6, True),
                               rtol=1e-2, atol=1e-2)
    run(h, w, None, 16, 1e-6, True)
    assert len(calls) == 1


def test_module_and_function_pass_their_form_to_the_choice(ext, monkeypatch):
    calls = []
    choose = fused.kernel
    monkeypatch.setattr(fused, "kernel", lambda *a: calls.append(a) or choose(*a))
    RMSNorm(12, p=0.5, eps_inside=True)(torch.randn(2, 12))
    fn.rms_norm(torch.randn(2, 10), torch.ones(10), torch.zeros(10), impl="auto")
    assert [c[4:] for c in calls] == [(12, 6, True, False), (10, 10, False, True)]


def test_cuda_autocast_runs_torchs_rms_norm_in_float32():
    """What the "torch" path under autocast relies on: aten::rms_norm has a CUDA autocast rule (float32,
    like layer_norm), so bfloat16 activations beside a float32 gain reach the fused kernel as float32."""
    assert "AutocastCUDA" in torch._C._dispatch_dump("aten::rms_norm")
