"""The Triton GRU transition (nn/triton_gru.py) without a GPU.

Exactness: the kernels run under TRITON_INTERPRET=1 on CPU tensors (in a subprocess: Triton reads the
variable when the kernels are defined), the transition against the float64 cell op by op, then the NormGRU
layer and the RNNSearch decoder on that path against the same models op by op. Host work per time step:
the launches are stubbed and the aten ops a step runs are counted with a dispatch mode, the budget a GPU
step pays on the host (tests/nn/test_gru.py counts the op-by-op step the same way).
"""
import textwrap

import pytest
import torch

triton = pytest.importorskip("triton", reason="Triton is not installed (it ships with CUDA builds of torch)")

import triton.language as tl  # noqa: E402
from triton_testing import AtenOps, Launches, compile_for_gpu, interpreted  # noqa: E402

from rmsnorm_repro.nn import NormGRU, NormGRUCell, fused_gru, triton_gru  # noqa: E402
from rmsnorm_repro.norms import build_normalization  # noqa: E402

I, H = 5, 6


COMMON = textwrap.dedent("""
    import copy, json, torch
    from rmsnorm_repro.nn import NormGRU, NormGRUCell, fused_gru, nematus_init_, triton_gru
    from rmsnorm_repro.norms import build_normalization
    triton_gru.CPU_TENSORS = True  # CPU tensors stand in for CUDA ones ...
    fused_gru.load = lambda: None  # ... which the C++ kernels must not take

    def cell_of(name, options, dtype, seed=0):
        torch.manual_seed(seed)
        cell = NormGRUCell(5, 6, build_normalization(name, options)).to(dtype)
        nematus_init_(cell, std=0.3)
        with torch.no_grad():  # gains and biases away from 1 and 0: a misplaced one cannot hide
            for p in cell.parameters():
                if p.dim() == 1:
                    p.copy_(torch.rand_like(p) + 0.5)
        return cell

    def rel_err(got, want):
        return ((got.double() - want).abs().max() / want.abs().max().clamp_min(1e-30)).item()
""")

CELL = COMMON + textwrap.dedent("""
    B, H = 9, 6  # 9 rows: more than the interpreter's 4 backward programs, one of them gets none
    TOL = {torch.float64: 1e-12, torch.float32: 2e-5, torch.bfloat16: 2e-2, torch.float16: 3e-3}
    NORMS = [("none", {}), ("layernorm", {}), ("rmsnorm", {}), ("prmsnorm", {"p": 0.25}),
             ("rmsnorm", {"bias": True}), ("rmsnorm", {"eps_inside": True}),
             ("prmsnorm", {"p": 0.25, "eps_inside": True})]
    # (norm, inputs' dtype (a_gates, a_cand, s), h's dtype, the cell's (gains') dtype)
    CASES = ([(norm, torch.float64, torch.float64, torch.float64) for norm in NORMS]
             + [(("rmsnorm", {"bias": True}), torch.float32, torch.float32, torch.float32),
                (("layernorm", {}), torch.float32, torch.float32, torch.float32),
                (("rmsnorm", {}), torch.bfloat16, torch.bfloat16, torch.float32),
                (("layernorm", {}), torch.float16, torch.float16, torch.float32),
                (("prmsnorm", {"p": 0.25}), torch.bfloat16, torch.bfloat16, torch.bfloat16),
                (("rmsnorm", {"bias": True}), torch.bfloat16, torch.float32, torch.float32),  # autocast
                (("layernorm", {}), torch.float16, torch.float32, torch.float32),  # autocast
                (("none", {}), torch.float16, torch.float32, torch.float32)])  # autocast

    def transition(cell, fused, dtype, h_dtype, scale=1.0, zero=True):
        \"\"\"h' and the gradients at a_gates, a_cand, h, s and every gain and bias. a_gates and a_cand are
        slices of one wider tensor and h half of a wider state, as NormGRU hands them over; row 0 of h is 0
        (a first step), so is its s = U h.\"\"\"
        NormGRUCell.fused = fused
        gen = torch.Generator().manual_seed(1)
        a = torch.randn(B, 3 * H + 3, generator=gen, dtype=torch.float64).to(dtype).requires_grad_()
        h2 = torch.randn(B, 2 * H, generator=gen, dtype=torch.float64)
        if zero:
            h2[0] = 0.0
        h2 = h2.to(h_dtype).requires_grad_()
        s = (2 * h2[:, H:].detach().double() @ cell.state_proj.weight.detach().double().t()).to(dtype).requires_grad_()
        dy = (torch.randn(B, H, generator=gen, dtype=torch.float64) * scale).to(torch.promote_types(dtype, h_dtype))
        out = cell.combine(a[:, :2 * H], a[:, 2 * H:3 * H], h2[:, H:], s)
        norms = [p for name, p in cell.named_parameters() if name.startswith("norm_state")]
        grads = torch.autograd.grad(out, [a, h2, s, *norms], dy.to(out.dtype))
        return [out, *grads]

    rows = []
    for (name, options), dtype, h_dtype, cell_dtype in CASES:
        cell = cell_of(name, options, cell_dtype)
        reference = copy.deepcopy(cell).double()
        calls = []
        real = triton_gru.combine
        triton_gru.combine = lambda *args: calls.append(1) or real(*args)
        got = transition(cell, True, dtype, h_dtype)
        triton_gru.combine = real
        taken = calls and got[0].grad_fn.name() == "_GRUCellFunctionBackward"
        op_by_op = transition(cell, False, dtype, h_dtype)  # the dtypes the kernel must return
        want = transition(reference, False, torch.float64, torch.float64)
        errs = [rel_err(g, w) for g, w in zip(got, want)]
        same_dtypes = [g.dtype for g in got] == [o.dtype for o in op_by_op]
        rows.append({"case": f"{name} {options} {dtype}/{h_dtype}/{cell_dtype}", "err": max(errs), "taken": bool(taken),
                     "ok": bool(taken) and same_dtypes and len(got) == len(want) and max(errs) <= TOL[dtype]})

    # float16 at the recipes' eps 1e-8 outside the root, gradients as GradScaler scales them: the zero row's
    # gradient at s saturates as the op-by-op path's does (formulas.saturate_zero_rows), finite everywhere
    cell = cell_of("rmsnorm", {}, torch.float32)
    reference = cell_of("rmsnorm", {"impl": "reference"}, torch.float32)  # formulas.rms_norm, op by op
    got = transition(cell, True, torch.float16, torch.float16, scale=256.0)
    want = transition(reference, False, torch.float16, torch.float16, scale=256.0)
    ds, ds_want = got[3], want[3]
    pinned = ds_want[0].abs() == torch.finfo(torch.float16).max
    saturated = bool(got[0].grad_fn.name() == "_GRUCellFunctionBackward" and all(g.isfinite().all() for g in got)
                     and pinned.any() and torch.equal(ds[0][pinned], ds_want[0][pinned]))
    print(json.dumps({"rows": rows, "saturated": saturated}))
""")


def test_transition_equals_the_float64_cell_under_the_interpreter():
    """h' and every gradient (a_gates, a_cand, h, s, the state-side gains and biases) against the float64
    cell op by op: every norm kind the kernel computes, eps inside and outside the root, a zero state row,
    strided inputs, more rows than backward programs; float32, bfloat16 / float16 with float32 or their
    own gains, and autocast's mixture (bfloat16 / float16 inputs beside a float32 h), each output in the
    dtype the op-by-op path gives. float16 at eps 1e-8: the zero row's gradient saturates, not inf."""
    result = interpreted(CELL)
    rows = result["rows"]
    assert len(rows) == 15 and all(r["ok"] for r in rows), rows
    assert result["saturated"]


MODELS = COMMON + textwrap.dedent("""
    from rmsnorm_repro.tasks.translation.rnnsearch import RNNSearch
    NormGRU.fused_loop = RNNSearch.fused_loop = False  # the CPU loops off: every step through combine()

    from rmsnorm_repro.bench.gpu import autograd_nodes

    def graph_names(out):
        return {node.name() for node in autograd_nodes(out)}

    def compare(run, model):
        results = []
        for fused in (True, False):
            NormGRUCell.fused = fused
            model.zero_grad()
            out, leaves = run(model)
            taken = "_GRUCellFunctionBackward" in graph_names(out)
            (out * torch.linspace(-1, 2, out.numel(), dtype=out.dtype).view_as(out)).sum().backward()
            results.append((taken, [out.detach(), *[l.grad for l in leaves],
                                    *[p.grad for p in model.parameters()]]))
        (taken, got), (taken_ref, want) = results
        return {"taken": taken and not taken_ref,
                "err": max(rel_err(g, w) for g, w in zip(got, want) if w is not None),
                "grads": all((g is None) == (w is None) for g, w in zip(got, want))}

    def layer_run(model):
        gen = torch.Generator().manual_seed(2)
        x = torch.randn(3, 4, 5, generator=gen, dtype=torch.float64).requires_grad_()
        mask = torch.ones(3, 4, dtype=torch.bool)
        mask[1, 2:] = mask[2, 3:] = False
        out, last = model(x, mask)
        return torch.cat([out.flatten(), last.flatten()]), [x]

    def rnnsearch_run(model):
        gen = torch.Generator().manual_seed(1)
        src, tgt = torch.randint(1, 30, (3, 4), generator=gen), torch.randint(1, 30, (3, 3), generator=gen)
        src_mask = torch.ones(3, 4, dtype=torch.bool)
        src_mask[1, 2:] = False
        torch.manual_seed(3)  # dropout draws the same masks each run
        return model(src, src_mask, tgt), []

    rows = {}
    for name, options in (("rmsnorm", {}), ("layernorm", {})):
        torch.manual_seed(0)
        layer = NormGRU(5, 6, build_normalization(name, options), bidirectional=True).double()
        nematus_init_(layer, std=0.3)
        rows[f"NormGRU {name}"] = compare(layer_run, layer)
    torch.manual_seed(0)
    config = {"emb": 8, "hidden": 6, "dropout": 0.2, "tie_embeddings": False, "init_std": 0.3, "init_center": 0.0}
    model = RNNSearch(config, 30, 0, build_normalization("prmsnorm", {"p": 0.5, "bias": True})).double().train()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 1:
                p.add_(torch.rand_like(p) * 0.5)
    rows["RNNSearch prmsnorm"] = compare(rnnsearch_run, model)
    model.eval()
    outs, calls, real = [], [], triton_gru.combine
    triton_gru.combine = lambda *args: (lambda out: calls.append(out is not None) or out)(real(*args))
    for fused in (True, False):  # evaluation: the kernel's forward alone, without autograd
        NormGRUCell.fused = fused
        with torch.no_grad():
            outs.append(rnnsearch_run(model)[0])
    rows["RNNSearch without gradients"] = {"taken": bool(calls) and all(calls), "grads": True, "err": rel_err(*outs)}
    print(json.dumps(rows))
""")


def test_layer_and_decoder_on_the_triton_path_equal_them_op_by_op():
    """A bidirectional NormGRU over a padded batch (RMSNorm, LayerNorm) and RNNSearch teacher-forced with
    dropout (pRMSNorm with bias: encoder GRUs and both decoder GRUs) with every transition on the Triton
    path, against the same models op by op in float64: outputs, the input's and every parameter's gradient;
    and the RNNSearch in evaluation, without autograd."""
    rows = interpreted(MODELS)
    assert len(rows) == 4 and all(r["taken"] and r["grads"] and r["err"] < 1e-12 for r in rows.values()), rows


def _cell(name, options=None, dtype=torch.float32):
    torch.manual_seed(0)
    return NormGRUCell(I, H, build_normalization(name, options or {})).to(dtype)


def _inputs(dtype=torch.float32, h_dtype=None):
    a, s = torch.randn(4, 3 * H, dtype=dtype), torch.randn(4, 3 * H, dtype=dtype)
    h = torch.randn(4, H, dtype=h_dtype or dtype)
    return a[:, :2 * H], a[:, 2 * H:], h, s


def test_the_cell_takes_the_kernel_only_where_it_applies(monkeypatch):
    """CUDA (mocked: CPU tensors under the interpreter's flag) with a norm the kernel computes and dtypes
    the op-by-op path would round the same way; anything else runs op by op."""
    cell = _cell("rmsnorm")
    assert triton_gru.combine(cell, *_inputs()) is None  # a CPU tensor: not CUDA
    monkeypatch.setattr(triton_gru, "_interpreting", lambda: True)
    assert triton_gru.combine(cell, *_inputs()) is None  # interpreted, but a CPU run does not ask for it
    monkeypatch.setattr(triton_gru, "CPU_TENSORS", True)
    called = []
    monkeypatch.setattr(triton_gru._GRUCellFunction, "apply", lambda *args: called.append(args) or "kernel")
    for name, options in (("rmsnorm", {}), ("prmsnorm", {"p": 0.25}), ("layernorm", {}), ("none", {}),
                          ("weightnorm", {}), ("rmsnorm", {"eps_inside": True, "bias": True})):
        assert triton_gru.combine(_cell(name, options), *_inputs()) == "kernel", name
    assert triton_gru.combine(_cell("rmsnorm"), *_inputs(torch.bfloat16, torch.float32)) == "kernel"  # autocast
    assert called[-1][-1] is torch.float32  # h' in the promoted dtype, as the op-by-op path returns it
    assert triton_gru.combine(_cell("rmsnorm", {"impl": "reference"}), *_inputs()) is None  # the formulas asked for
    assert triton_gru.combine(_cell("l2norm"), *_inputs()) is None  # a norm the kernel does not compute
    assert triton_gru.combine(_cell("batchnorm"), *_inputs()) is None
    a_gates, a_cand, h, s = _inputs()
    assert triton_gru.combine(cell, a_gates.bfloat16(), a_cand, h, s) is None  # a mixture autocast never makes
    assert triton_gru.combine(cell, a_gates, a_cand, h.double(), s) is None
    assert triton_gru.combine(_cell("rmsnorm", dtype=torch.float64), a_gates, a_cand, h, s) is None  # float64 gains
    assert triton_gru.combine(cell, a_gates[:1], a_cand, h, s) is None  # a row the op-by-op path broadcasts
    assert triton_gru.combine(cell, a_gates, a_cand, h, s[:, :-1]) is None  # a shape the op-by-op path rejects
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    assert triton_gru.combine(cell, *_inputs()) is None  # torch.compile traces the ops instead
    monkeypatch.undo()
    monkeypatch.setattr(triton_gru, "runs_on", lambda t: True)
    monkeypatch.setattr(fused_gru, "load", lambda: None)  # as on CUDA: the C++ kernel does not take it
    monkeypatch.setattr(triton_gru._GRUCellFunction, "apply", lambda *args: "kernel")
    assert cell.combine(*_inputs()) == "kernel"  # the cell routes to it
    monkeypatch.setattr(NormGRUCell, "fused", False)  # the switch that turns every fused transition off
    assert isinstance(cell.combine(*_inputs()), torch.Tensor)


# Host work per time step --------------------------------------------------------------------------------
def _per_step(run, monkeypatch) -> tuple[dict[str, float], float, float]:
    """(aten ops, forward launches, backward launches) a time step costs, forward and backward, with every
    GRU transition on the Triton path (mocked CUDA, launches stubbed): run(steps) over 8 steps minus over 4,
    over 4 (as tests/nn/test_gru.py counts the op-by-op step)."""
    monkeypatch.setattr(triton_gru, "runs_on", lambda t: True)
    monkeypatch.setattr(fused_gru, "load", lambda: None)
    counts = []
    for steps in (4, 8):
        forward, backward = Launches(), Launches()
        monkeypatch.setattr(triton_gru, "_gru_forward", forward)
        monkeypatch.setattr(triton_gru, "_gru_backward", backward)
        torch.manual_seed(0)
        with AtenOps() as counted:
            run(steps)
        counts.append((counted.ops, forward.count, backward.count))
    (ops4, f4, b4), (ops8, f8, b8) = counts
    return {op: (ops8[op] - ops4[op]) / 4 for op in ops8 if ops8[op] != ops4[op]}, (f8 - f4) / 4, (b8 - b4) / 4


def _layer(norm):
    def run(steps):
        gru = NormGRU(I, H, build_normalization(norm))
        x, mask = torch.randn(3, steps, I), torch.ones(3, steps, dtype=torch.bool)
        gru(x, mask)[0].sum().backward()
    return run


def _decoder(norm, monkeypatch):
    """RNNSearch's teacher-forced decoder step by step (the CPU loop off, as on CUDA) from an encoded state."""
    from rmsnorm_repro.tasks.translation.rnnsearch import RNNSearch

    monkeypatch.setattr(RNNSearch, "fused_loop", False)
    config = {"emb": 8, "hidden": H, "dropout": 0.0, "tie_embeddings": False, "init_std": 0.3, "init_center": 0.0}

    def run(steps):
        model = RNNSearch(config, 30, 0, build_normalization(norm)).train()
        with torch.no_grad():
            state = model.encode(torch.randint(1, 30, (3, 5)), torch.ones(3, 5, dtype=torch.bool))
        states, contexts, _ = model.decoder_states(state, torch.randn(3, steps, 8))
        (states.sum() + contexts.sum()).backward()
    return run


# aten ops a step costs on the Triton path, forward and backward. The GRU layer: the state product, its
# input's detach and its gradient (t, mm), h' and the four gradient buffers (empty), the step's input
# gradient at h added up (add); with a norm's gain or bias: the partials' sum and split, and autograd adding
# each trained gain's and bias's gradient into its total (one add each: LayerNorm 4, RMSNorm 2), as op by op.
# The decoder: two transitions, the attention, GRU2's input projection and norms, all but the transitions op
# by op (op by op: 114, 142, 149).
LAYER_STEP = {"none": 12, "layernorm": 19, "rmsnorm": 17}
DECODER_STEP = {"none": 72, "layernorm": 98, "rmsnorm": 97}


@pytest.mark.parametrize("norm", ["none", "layernorm", "rmsnorm"])
def test_a_time_step_on_the_triton_path_is_one_launch_each_way(norm, monkeypatch):
    """Op by op a GRU layer's step costs 33 aten ops without a norm, 41 with LayerNorm, 43 with RMSNorm
    (tests/nn/test_gru.py); on the Triton path 12, 19 and 17 (LAYER_STEP), and one launch each way; the
    decoder's step (two transitions) two each way. A change that puts the gates or the state-side norms
    back into separate ops fails here."""
    ops, forward, backward = _per_step(_layer(norm), monkeypatch)
    assert (forward, backward) == (1, 1), (forward, backward)
    assert sum(ops.values()) <= LAYER_STEP[norm], ops
    assert not {"sigmoid", "tanh", "native_layer_norm", "mul", "lerp"} & set(ops), ops
    ops, forward, backward = _per_step(_decoder(norm, monkeypatch), monkeypatch)
    assert (forward, backward) == (2, 2), (forward, backward)
    assert sum(ops.values()) <= DECODER_STEP[norm], ops


# (N3's mode, N4's mode, eps inside, gains and biases, inputs' type, h's and the gains' type, float16
# saturation): none, RMSNorm, pRMSNorm eps inside, LayerNorm; float32, bfloat16 under autocast, float16, float64
BUILDS = [(0, 0, False, False, "fp32", "fp32", False), (1, 1, False, True, "bf16", "fp32", False),
          (1, 1, True, True, "fp16", "fp16", True), (2, 2, False, True, "fp16", "fp32", True),
          (1, 2, False, True, "fp64", "fp64", False)]


@pytest.mark.parametrize("mode3,mode4,inside,affine,low,wide,saturate", BUILDS)
def test_kernels_build_for_a_gpu(mode3, mode4, inside, affine, low, wide, saturate):
    """Both kernels built for H100 without one (tests/triton_testing.py): what the interpreter runs, a GPU
    build must accept too."""
    x, p = f"*{low}", f"*{wide}"
    param = p if affine else None
    common = dict(AG=x, AC=x, HS=p, S=x, G3=param, B3=param, G4=param, B4=param, sag="i32", sac="i32", sh="i32",
                  ss="i32", HD="i32", K3="i32", K4="i32", eps3="fp32", eps4="fp32", MODE3=mode3, MODE4=mode4,
                  INSIDE3=inside, INSIDE4=inside, HAS_G3=affine, HAS_B3=affine, HAS_G4=affine, HAS_B4=affine,
                  BLOCK=256, ACC=tl.float64 if low == "fp64" else tl.float32)
    forward = compile_for_gpu(triton_gru._gru_forward, **common, OUT=p)
    acc = "*fp64" if low == "fp64" else "*fp32"
    backward = compile_for_gpu(triton_gru._gru_backward, **common, DOUT=p, DAG=x, DAC=x, DH=p, DS=x,
                               PARTIAL=acc if affine else None, N="i32", ROWS="i32", PARAMS=affine, SATURATE=saturate)
    assert forward.asm["cubin"] and backward.asm["cubin"]


@pytest.mark.parametrize("affine,saturate", [(False, False), (True, True)])
def test_kernels_do_not_spill_at_the_suites_width(affine, saturate):
    """At hidden 1024 (the RNNSearch's and the order embedding's GRUs), with the block and warps the
    Function picks, neither kernel spills registers to local memory on an H100 (read from the binary)."""
    from rmsnorm_repro.norms.fused.triton_rmsnorm import _block
    from triton_testing import resources

    block, warps = _block(1024)
    param = "*fp32" if affine else None
    common = dict(AG="*bf16", AC="*bf16", HS="*fp32", S="*bf16", G3=param, B3=param, G4=param, B4=param, sag="i32",
                  sac="i32", sh="i32", ss="i32", HD="i32", K3="i32", K4="i32", eps3="fp32", eps4="fp32", MODE3=2,
                  MODE4=1, INSIDE3=False, INSIDE4=False, HAS_G3=affine, HAS_B3=affine, HAS_G4=affine,
                  HAS_B4=affine, BLOCK=block, ACC=tl.float32)
    forward = compile_for_gpu(triton_gru._gru_forward, warps, **common, OUT="*fp32")
    backward = compile_for_gpu(triton_gru._gru_backward, warps, **common, DOUT="*fp32", DAG="*bf16", DAC="*bf16",
                               DH="*fp32", DS="*bf16", PARTIAL="*fp32" if affine else None, N="i32", ROWS="i32",
                               PARAMS=affine, SATURATE=saturate)
    for kernel in (forward, backward):
        used = resources(kernel)
        assert used["REG"] > 0 and used["STACK"] == 0 and used["LOCAL"] == 0, used
