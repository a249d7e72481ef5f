"""The Triton LSTM step (nn/triton_lstm.py) without a GPU: the kernels under TRITON_INTERPRET=1 (CPU tensors
standing in for CUDA ones) against NormLSTM op by op, their routing, a step's aten ops and launches counted
with the launches stubbed, and both kernels built for a GPU (tests/triton_testing.py)."""
import textwrap

import pytest
import torch

triton = pytest.importorskip("triton", reason="Triton is not installed (it ships with CUDA builds of torch)")

import triton.language as tl  # noqa: E402
from triton_testing import AtenOps, Launches, compile_for_gpu, interpreted  # noqa: E402

from rmsnorm_repro.nn import triton_gru, triton_lstm  # noqa: E402
from rmsnorm_repro.nn.lstm import LSTMDirection, NormLSTM  # noqa: E402
from rmsnorm_repro.norms import build_normalization  # noqa: E402

LAYERS = textwrap.dedent("""
    import copy, json, torch
    from rmsnorm_repro.nn import triton_gru
    from rmsnorm_repro.nn.lstm import LSTMDirection, NormLSTM
    from rmsnorm_repro.norms import build_normalization
    triton_gru.CPU_TENSORS = True  # CPU tensors stand in for CUDA ones

    from rmsnorm_repro.bench.gpu import autograd_nodes

    def graph_names(out):
        return {node.name() for node in autograd_nodes(out)}

    def run(lstm, fused, dtype=torch.float64, autocast=None):
        \"\"\"Outputs and last states, the input's and every parameter's gradient; whether the kernel ran.\"\"\"
        LSTMDirection.fused = fused
        lstm.zero_grad()
        gen = torch.Generator().manual_seed(2)
        x = torch.randn(3, 4, 3, generator=gen, dtype=torch.float64).to(dtype).requires_grad_()
        mask = torch.ones(3, 4, dtype=torch.bool)
        mask[1, 2:] = mask[2, 3:] = False
        with torch.autocast("cpu", dtype=autocast or torch.bfloat16, enabled=autocast is not None):
            out, last = lstm(x, mask)
        y = torch.cat([out.flatten(), last.flatten()])
        (y * torch.linspace(-1, 2, y.numel(), dtype=y.dtype)).sum().backward()
        return "_LSTMStepFunctionBackward" in graph_names(y), [y.detach(), x.grad, *[p.grad for p in lstm.parameters()]]

    def rel_err(got, want):
        return max(((g.double() - w.double()).abs().max() / w.double().abs().max().clamp_min(1e-30)).item()
                   for g, w in zip(got, want) if w is not None)

    def model(name, options, learn_h0):
        torch.manual_seed(0)
        lstm = NormLSTM(3, 5, build_normalization(name, options), max_steps=8, bidirectional=True, learn_h0=learn_h0)
        with torch.no_grad():  # gains and biases away from 1 and 0: a misplaced one cannot hide
            for p in lstm.parameters():
                if p.dim() == 1:
                    p.add_(torch.rand_like(p) * 0.5)
        return lstm

    rows = {}
    # float64: the kernel against the same model op by op (h0 learned, or 0: a zero state row at step 0)
    for (name, options), learn_h0 in (((("none", {}), True)), (("layernorm", {}), False), (("rmsnorm", {}), False),
                                       (("prmsnorm", {"p": 0.25, "eps_inside": True, "bias": True}), True)):
        lstm = model(name, options, learn_h0).double()
        (taken, got), (taken_ref, want) = run(lstm, True), run(lstm, False)
        rows[f"{name} {options} float64"] = {"ok": taken and not taken_ref and rel_err(got, want) < 1e-12
                                                     and all((g is None) == (w is None) for g, w in zip(got, want)),
                                              "err": rel_err(got, want)}
    # autocast (s in bfloat16 / float16 beside float32 gx, c, h and gains), from a zero state: against float64
    # within tol or twice the op-by-op path's error, in the op-by-op step's dtypes. float16 at eps 1e-8 outside
    # the root: the zero row's gradient saturates, every gradient stays finite
    for (name, options), dtype, tol in ((("rmsnorm", {}), torch.bfloat16, 3e-2),
                                        (("layernorm", {}), torch.float16, 1e-2),
                                        (("rmsnorm", {}), torch.float16, 1e-2)):
        lstm = model(name, options, False)
        reference = copy.deepcopy(lstm).double()
        taken, got = run(lstm, True, torch.float32, dtype)
        _, op_by_op = run(lstm, False, torch.float32, dtype)
        _, want = run(reference, False)
        same_dtypes = [g.dtype for g in got if g is not None] == [o.dtype for o in op_by_op if o is not None]
        finite = all(g.isfinite().all() for g in got if g is not None)
        err, op_by_op_err = rel_err(got, want), rel_err(op_by_op, want)  # bf16 products dominate both
        ok = taken and same_dtypes and finite and err <= max(tol, 2 * op_by_op_err)
        rows[f"{name} autocast {dtype}"] = {"ok": ok, "err": err, "op_by_op_err": op_by_op_err}
    print(json.dumps(rows))
""")


def test_layer_on_the_triton_path_equals_it_op_by_op():
    """A bidirectional NormLSTM over a padded batch with every step on the Triton path: outputs, last states,
    the input's and every parameter's gradient against the same model op by op at 1e-12 in float64 (none,
    LayerNorm, RMSNorm, pRMSNorm with eps inside and a bias; a learned h0 or a zero state row), and under
    bf16 / fp16 autocast against float64 (within the tolerance, or twice the op-by-op path's error), in the
    op-by-op step's dtypes, finite from a zero state in fp16."""
    rows = interpreted(LAYERS)
    assert len(rows) == 7 and all(r["ok"] for r in rows.values()), rows


def _direction(name, options=None):
    torch.manual_seed(0)
    return NormLSTM(3, 4, build_normalization(name, options or {}), max_steps=6).fwd


def test_the_direction_takes_the_kernel_only_where_it_applies(monkeypatch):
    """CUDA (mocked: CPU tensors under the interpreter's flag) with norms the kernel computes; per-step
    BatchNorm, L2Norm, norm.impl=reference and torch.compile run op by op; so does a step whose dtypes
    the op-by-op path would round otherwise."""
    h = torch.zeros(2, 4)
    assert triton_lstm.step_function(_direction("rmsnorm"), h) is None  # a CPU tensor: not CUDA
    monkeypatch.setattr(triton_gru, "runs_on", lambda t: True)
    for name in ("none", "rmsnorm", "prmsnorm", "layernorm", "weightnorm"):
        assert triton_lstm.step_function(_direction(name), h) is not None, name
    for name, options in (("batchnorm", {}), ("l2norm", {}), ("rmsnorm", {"impl": "reference"})):
        assert triton_lstm.step_function(_direction(name, options), h) is None, name
    called = []
    monkeypatch.setattr(triton_lstm._LSTMStepFunction, "apply", lambda *args: called.append(args) or "kernel")
    step = triton_lstm.step_function(_direction("rmsnorm"), h)
    keep = torch.ones(2, 1, dtype=torch.bool)
    gx, s, c = torch.randn(2, 16), torch.randn(2, 16), torch.zeros(2, 4)
    assert step(gx, s.bfloat16(), c, h, keep) == "kernel"  # autocast's mix
    assert called[-1][-1] == (torch.float32, torch.float32)
    assert step(gx.double(), s, c, h, keep) is None  # a mixture autocast never makes
    assert step(gx.bfloat16(), s.half(), c, h, keep) is None  # gx and s of two low dtypes
    assert step(gx[:1], s, c, h, keep) is None  # a row the op-by-op path broadcasts
    assert step(gx, s, c, h, keep[:1]) is None
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    assert triton_lstm.step_function(_direction("rmsnorm"), h) is None
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: False)
    direction = _direction("rmsnorm")
    x, mask = torch.randn(3, 2, 3), torch.ones(3, 2, dtype=torch.bool)
    called.clear()
    monkeypatch.setattr(triton_lstm._LSTMStepFunction, "apply", lambda *args: called.append(args) or (h, c))
    direction(x, mask)
    assert len(called) == 3  # the direction routes every step to it
    called.clear()
    monkeypatch.setattr(LSTMDirection, "fused", False)  # the switch that turns it off
    direction(x, mask)
    assert not called


def _per_step(norm, monkeypatch, fused=True) -> tuple[dict[str, float], float, float]:
    """(aten ops, forward launches, backward launches) an LSTM step costs forward and backward (mocked CUDA,
    launches stubbed): a run of 8 steps minus a run of 4, over 4."""
    monkeypatch.setattr(triton_gru, "runs_on", lambda t: True)
    monkeypatch.setattr(LSTMDirection, "fused", fused)
    counts = []
    for steps in (4, 8):
        forward, backward = Launches(), Launches()
        monkeypatch.setattr(triton_lstm, "_lstm_forward", forward)
        monkeypatch.setattr(triton_lstm, "_lstm_backward", backward)
        torch.manual_seed(0)
        lstm = NormLSTM(5, 6, build_normalization(norm), max_steps=8)
        x, mask = torch.randn(3, steps, 5), torch.ones(3, steps, dtype=torch.bool)
        with AtenOps() as counted:
            lstm(x, mask)[0].sum().backward()
        counts.append((counted.ops, forward.count, backward.count))
    (ops4, f4, b4), (ops8, f8, b8) = counts
    return {op: (ops8[op] - ops4[op]) / 4 for op in ops8 if ops8[op] != ops4[op]}, (f8 - f4) / 4, (b8 - b4) / 4


# aten ops an LSTM step costs, forward and backward: op by op, and on the Triton path (the state product,
# its input's detach and gradient, h', c' and the four gradient buffers, the gradients at h and c added
# up; with a norm's gain or bias, the partials' sum and split and autograd adding each gain's and bias's
# gradient into its total)
OP_BY_OP_STEP = {"none": 52, "layernorm": 60, "rmsnorm": 62}
TRITON_STEP = {"none": 13, "layernorm": 20, "rmsnorm": 18}


@pytest.mark.parametrize("norm", ["none", "layernorm", "rmsnorm"])
def test_a_time_step_on_the_triton_path_is_one_launch_each_way(norm, monkeypatch):
    ops, forward, backward = _per_step(norm, monkeypatch, fused=False)
    assert (forward, backward) == (0, 0) and sum(ops.values()) <= OP_BY_OP_STEP[norm], ops
    ops, forward, backward = _per_step(norm, monkeypatch)
    assert (forward, backward) == (1, 1), (forward, backward)
    assert sum(ops.values()) <= TRITON_STEP[norm], ops
    assert not {"sigmoid", "tanh", "native_layer_norm", "mul", "where"} & set(ops), ops


# (n_h's mode, n_c's mode, eps inside, gains and biases, s's type, the rest's type, float16 saturation)
BUILDS = [(0, 0, False, False, "fp32", "fp32", False), (1, 1, False, True, "bf16", "fp32", False),
          (1, 2, True, True, "fp16", "fp32", True), (2, 2, False, True, "fp16", "fp16", True),
          (1, 1, False, True, "fp64", "fp64", False)]


@pytest.mark.parametrize("mode_h,mode_c,inside,affine,low,wide,saturate", BUILDS)
def test_kernels_build_for_a_gpu(mode_h, mode_c, inside, affine, low, wide, saturate):
    """Both kernels built for H100 without one (tests/triton_testing.py)."""
    x, p = f"*{low}", f"*{wide}"
    param = p if affine else None
    common = dict(GX=p, S=x, C=p, HS=p, M="*i1", GH=param, BH=param, GC=param, BC=param, sgx="i32", ss="i32",
                  sc="i32", sh="i32", sm="i32", HD="i32", KH="i32", KC="i32", eps_h="fp32", eps_c="fp32",
                  MODEH=mode_h, MODEC=mode_c, INSIDEH=inside, INSIDEC=inside, HAS_GH=affine, HAS_BH=affine,
                  HAS_GC=affine, HAS_BC=affine, BLOCK=256, ACC=tl.float64 if low == "fp64" else tl.float32)
    forward = compile_for_gpu(triton_lstm._lstm_forward, **common, H_OUT=p, C_OUT=p)
    acc = "*fp64" if low == "fp64" else "*fp32"
    backward = compile_for_gpu(triton_lstm._lstm_backward, **common, DH_OUT=p, DC_OUT=p, DGX=p, DS=x, DC=p, DH=p,
                               PARTIAL=acc if affine else None, N="i32", ROWS="i32", PARAMS=affine, SATURATE=saturate)
    assert forward.asm["cubin"] and backward.asm["cubin"]


@pytest.mark.parametrize("hidden", [240, 512])
def test_kernels_do_not_spill_at_the_readers_width(hidden):
    """At hidden 240 (the reader's LSTM) and 512, with the block and warps the Function picks, neither
    kernel spills registers to local memory on an H100 (read from the binary)."""
    from rmsnorm_repro.norms.fused.triton_rmsnorm import _block
    from triton_testing import resources

    block, warps = _block(hidden)[0], _block(4 * hidden)[1]
    p = "*fp32"
    common = dict(GX=p, S="*bf16", C=p, HS=p, M="*i1", GH=p, BH=p, GC=p, BC=p, sgx="i32", ss="i32", sc="i32",
                  sh="i32", sm="i32", HD="i32", KH="i32", KC="i32", eps_h="fp32", eps_c="fp32", MODEH=2, MODEC=1,
                  INSIDEH=False, INSIDEC=False, HAS_GH=True, HAS_BH=True, HAS_GC=True, HAS_BC=True, BLOCK=block,
                  ACC=tl.float32)
    forward = compile_for_gpu(triton_lstm._lstm_forward, warps, **common, H_OUT=p, C_OUT=p)
    backward = compile_for_gpu(triton_lstm._lstm_backward, warps, **common, DH_OUT=p, DC_OUT=p, DGX=p, DS="*bf16",
                               DC=p, DH=p, PARTIAL=p, N="i32", ROWS="i32", PARAMS=True, SATURATE=False)
    for kernel in (forward, backward):
        used = resources(kernel)
        assert used["REG"] > 0 and used["STACK"] == 0 and used["LOCAL"] == 0, used
