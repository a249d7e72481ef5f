"""The Triton RMSNorm kernel (norms/fused/triton_rmsnorm.py) without a GPU.

Exactness: the kernels run under TRITON_INTERPRET=1 (in a subprocess: Triton reads the variable when the
kernels are defined) against the float64 reference. Host work per call: the launches are stubbed and
the aten ops the Function runs are counted with a dispatch mode, the budget a GPU call pays on the host.
"""
import textwrap

import pytest
import torch

triton = pytest.importorskip("triton", reason="Triton is not installed (it ships with CUDA builds of torch)")

from triton_testing import AtenOps, Launches, interpreted  # noqa: E402

from rmsnorm_repro.norms import formulas, fused  # noqa: E402
from rmsnorm_repro.norms.fused import triton_rmsnorm  # noqa: E402

INTERPRETED = textwrap.dedent("""
    import json, torch
    from rmsnorm_repro.norms import formulas
    from rmsnorm_repro.norms.fused import triton_rmsnorm as T
    TOL = {torch.float64: 1e-12, torch.float32: 2e-5, torch.bfloat16: 2e-2, torch.float16: 3e-3}
    rows = []
    # shape (9 rows: more than the interpreter's 4 backward programs, one of them gets none), p, eps inside,
    # affine (0 none, 1 gain, 2 gain + bias), zero row, x dtype, parameter dtype, gain trained
    CASES = [((9, 33), 1.0, False, 2, True, torch.float64, torch.float64, True),
             ((2, 3, 20), 0.3, True, 1, True, torch.float64, torch.float64, True),
             ((4, 1), 1.0, False, 0, False, torch.float64, torch.float64, True),
             ((6, 64), 0.0625, False, 2, True, torch.float64, torch.float64, True),
             ((6, 64), 0.0625, True, 2, False, torch.float64, torch.float64, False),
             ((0, 16), 1.0, False, 2, False, torch.float64, torch.float64, True),
             ((9, 48), 1.0, False, 2, True, torch.float32, torch.float32, True),
             ((9, 48), 0.25, False, 1, True, torch.bfloat16, torch.float32, True),
             ((9, 48), 1.0, True, 2, True, torch.bfloat16, torch.bfloat16, True),
             ((9, 48), 0.5, False, 1, True, torch.float16, torch.float32, True)]
    for shape, p, eps_inside, affine, zero_row, dtype, pdtype, train_gain in CASES:
        g = torch.Generator().manual_seed(0)
        d = shape[-1]
        x = torch.randn(*shape, generator=g, dtype=torch.float64)
        if zero_row:
            x.view(-1, d)[0] = 0.0
        x = x.to(dtype)
        w = (1 + 0.5 * torch.randn(d, generator=g, dtype=torch.float64)).to(pdtype) if affine else None
        b = torch.randn(d, generator=g, dtype=torch.float64).to(pdtype) if affine == 2 else None
        dy = torch.randn(*shape, generator=g, dtype=torch.float64).to(dtype)
        k = formulas.partial_k(d, p)
        outs = []
        for run, cast in ((lambda *a: T.rms_norm(*a), lambda t: t),
                          (lambda *a: formulas.rms_norm(*a), lambda t: None if t is None else t.double())):
            xi = cast(x).clone().requires_grad_()
            wi = None if w is None else cast(w).clone().requires_grad_(train_gain)
            bi = None if b is None else cast(b).clone().requires_grad_()
            y = run(xi, wi, bi, k, 1e-3, eps_inside)  # eps 1e-3: a zero row's scale stays finite in float16
            leaves = [t for t in (xi, wi, bi) if t is not None and t.requires_grad]
            outs.append([y, *torch.autograd.grad(y, leaves, cast(dy))] if y.numel() else [y])
        (got, want) = outs
        same_dtypes = got[0].dtype == dtype and all(a.dtype == l.dtype for a, l in
                                                   zip(got[1:], [t for t in (x, w, b) if t is not None]))
        err = max([0.0] + [((a.double() - r).abs().max() / r.abs().max().clamp_min(1e-30)).item()
                           for a, r in zip(got, want) if r.numel()])
        rows.append({"case": f"{shape} p={p} inside={eps_inside} affine={affine} {dtype}/{pdtype}",
                     "err": err, "ok": err <= TOL[dtype] and same_dtypes and len(got) == len(want)})
    # float16 at the recipes' eps 1e-8 outside the root: a zero row's gradient saturates as the reference's does
    x = torch.randn(6, 40, dtype=torch.float64).half()
    x[3] = 0.0
    w, dy = torch.rand(40) + 0.5, (torch.randn(6, 40) * 256).half()
    grads = []
    for run in (T.rms_norm, formulas.rms_norm):
        xi = x.clone().requires_grad_()
        grads.append(torch.autograd.grad(run(xi, w, None, 40, 1e-8, False), xi, dy)[0])
    saturated = bool(grads[0].isfinite().all() and torch.equal(grads[0][3], grads[1][3])
                     and (grads[0][3].abs() == formulas.FLOAT16_MAX).all()
                     and torch.allclose(grads[0].float(), grads[1].float(), rtol=2e-3, atol=1e-2))
    print(json.dumps({"rows": rows, "saturated": saturated}))
""")


def test_kernels_equal_the_float64_reference_under_the_interpreter():
    """Forward and every gradient against float64: zero rows, p < 1, no rows at all, more rows than
    backward programs, a frozen gain, fp32 / bf16 / fp16 x with fp32 gains."""
    result = interpreted(INTERPRETED)
    rows = result["rows"]
    assert len(rows) == 10 and all(r["ok"] for r in rows), rows
    assert result["saturated"]  # float16: a zero row's gradient clamped like formulas.saturate_zero_rows


SHARED_GRADIENTS = textwrap.dedent("""
    import json, torch
    from rmsnorm_repro.norms import formulas
    from rmsnorm_repro.norms.fused import triton_rmsnorm as T
    g = torch.Generator().manual_seed(0)
    x, c, e0 = (torch.randn(6, 16, generator=g, dtype=torch.float64) for _ in range(3))
    w = (torch.rand(16, generator=g, dtype=torch.float64) + 0.5).requires_grad_()
    dy = torch.randn(6, 16, generator=g, dtype=torch.float64)
    dy_before, results = dy.clone(), {}
    for name, norm in (("triton", T.rms_norm), ("reference", formulas.rms_norm)):
        xi, e = x.clone().requires_grad_(), e0.clone().requires_grad_()
        w.grad = None
        y = norm(xi, w, None, 16, 1e-5, False)
        kept = []
        grads = list(torch.autograd.grad(y, (xi, w), dy, retain_graph=True))  # the caller's dy
        grads += torch.autograd.grad((y * c).sum(), (xi, w), retain_graph=True)  # a fresh gradient
        ((y + e) * c).sum().backward(retain_graph=True)  # one gradient for y and for the leaf e
        grads += [xi.grad, w.grad, e.grad]
        xi.grad = w.grad = None
        handle = y.register_hook(lambda grad: kept.append(grad))  # a hook keeps y's gradient
        (y * c).sum().backward()
        handle.remove()
        grads += [xi.grad, kept[0]]
        results[name] = grads
    err = max((a - r).abs().max().item() for a, r in zip(results["triton"], results["reference"]))
    print(json.dumps({"err": err, "dy_intact": torch.equal(dy, dy_before)}))
""")


def test_backward_leaves_every_gradient_it_is_given_intact():
    """The caller's dy, a fresh gradient, one shared with a leaf's branch and one a hook keeps: none is
    overwritten (dx has a buffer of its own), and every gradient equals the reference's."""
    result = interpreted(SHARED_GRADIENTS)
    assert result["dy_intact"], result
    assert result["err"] < 1e-12, result


# Host work per call ------------------------------------------------------------------------------------
@pytest.fixture
def stubbed(monkeypatch):
    """The dispatch's Triton function on a mocked CUDA machine, its two kernels stubbed, and the
    per-call checks (supports, the environment lookup, triton's size helpers) made to fail if anything
    calls them."""
    forward, backward = Launches(), Launches()
    monkeypatch.setattr(triton_rmsnorm, "_rmsnorm_forward", forward)
    monkeypatch.setattr(triton_rmsnorm, "_rmsnorm_backward", backward)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(fused, "_used", {})  # what this mock chooses is not what the process ran
    fused.clear_caches()
    name, run = fused.kernel("auto", "cuda", torch.float32, torch.float32, 512, 512, False, True)
    assert name == "triton"

    def per_call_check(*args):
        raise AssertionError("a per-call check ran")

    monkeypatch.setattr(triton_rmsnorm, "supports", per_call_check)
    monkeypatch.setattr(triton_rmsnorm, "_interpreting", per_call_check)
    # triton's constexpr functions cost microseconds a call on the host: sizes are computed once per width
    monkeypatch.setattr(triton, "next_power_of_2", per_call_check)
    monkeypatch.setattr(triton, "cdiv", per_call_check)
    triton_rmsnorm._block.cache_clear()
    yield run, forward, backward
    fused.clear_caches()


ALLOCATING = {"empty", "empty_like", "empty_strided", "zeros", "zeros_like", "new_empty", "new_zeros", "sum", "_to_copy",
              "clone", "contiguous"}


def test_one_call_is_two_launches_and_five_buffers(stubbed):
    """fwd+bwd of RMSNorm with gain and bias: one launch each way; y, the statistics, dx, the partial sums
    and their total are the only buffers (no memset: every program writes all of its part; the old path
    made 8 and filled 2), gain's and bias's gradients come out of one sum."""
    run, forward, backward = stubbed
    x = torch.randn(80, 512, requires_grad=True)
    w, b = torch.ones(512, requires_grad=True), torch.zeros(512, requires_grad=True)
    dy = torch.randn(80, 512)
    with AtenOps() as counted:
        y = run(x, w, b, 512, 1e-8, False)
        torch.autograd.grad(y, (x, w, b), dy)
    assert (forward.count, backward.count) == (1, 1)
    allocations = {op: n for op, n in counted.ops.items() if op in ALLOCATING}
    assert sum(allocations.values()) == 5, counted.ops
    assert not {"fill_", "zero_", "zeros"} & set(counted.ops), counted.ops
    assert sum(counted.ops.values()) <= 12, counted.ops  # with the views (reshape, the gradients' rows)


def test_device_properties_are_read_once_per_device(monkeypatch):
    reads = []

    class Properties:
        multi_processor_count = 132

    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: reads.append(device) or Properties())
    triton_rmsnorm._backward_programs.cache_clear()
    try:
        device = torch.device("cuda", 0)
        assert [triton_rmsnorm._backward_programs(device) for _ in range(3)] == [528] * 3
        assert len(reads) == 1
    finally:
        triton_rmsnorm._backward_programs.cache_clear()


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
def test_kernels_build_for_a_gpu(dtype):
    """Both kernels built for H100 without one (tests/triton_testing.py): float16's backward reads the
    saturation bound, a global the interpreter accepted as a plain float and a GPU build rejected."""
    import triton.language as tl
    from triton_testing import compile_for_gpu

    x = f"*{dtype}"
    common = dict(X=x, W="*fp32", N="i32", D="i32", K="i32", BLOCK=512, ACC=tl.float32)
    forward = compile_for_gpu(triton_rmsnorm._rmsnorm_forward, **common, B="*fp32", Y=x, STATS="*fp32", eps="fp32",
                              EPS_INSIDE=False, HAS_W=True, HAS_B=True)
    backward = compile_for_gpu(triton_rmsnorm._rmsnorm_backward, **common, DY=x, STATS="*fp32", DX=x, PARTIAL="*fp32",
                               ROWS="i32", HAS_W=True, HAS_DW=True, HAS_DB=True, SATURATE=dtype == "fp16")
    assert forward.asm["cubin"] and backward.asm["cubin"]
