"""Part 1 of the GPU check (bench/gpu_check.py): exactness on the device.

The Triton RMSNorm kernel in fp32 / bf16 / fp16 (and a float32 gain beside bf16 / fp16 activations,
autocast's mix), forward and every gradient against the float64 reference of the same rounded inputs; the
RMSNorm module's choice of kernel (norms/fused `kernel`), under autocast too; the Triton GRU transition and
LSTM step (nn/triton_gru.py, nn/triton_lstm.py: the recurrent tasks' steps on CUDA) against float64. On CPU
(--tiny) the kernels run interpreted (TRITON_INTERPRET=1). `autograd_nodes` is the one walk over a result's
autograd graph (which Functions it went through), for the check and the kernel tests.
"""
from __future__ import annotations

import torch

from ..nn import NormGRUCell, NormLSTM, triton_gru
from ..norms import RMSNorm, build_normalization, formulas, fused
from ..norms.fused import triton_rmsnorm

EXACT_DTYPES = {torch.float32: 2e-5, torch.bfloat16: 2e-2, torch.float16: 3e-3}  # error / max |reference|
STEP_NORMS = ("none", "layernorm", "rmsnorm", "prmsnorm")
STEP_PRECISIONS = ("fp32", "bf16")  # train.precision (fp32 with train.tf32); under bf16 autocast every norm computes in fp32
DEADLINE_S = 450  # stop starting new parts after this (the whole check: about 8 minutes)


# 1. Exactness ----------------------------------------------------------------------------------------
EXACT_CASES = [  # shape, p, eps_inside, affine ("gain", "gain+bias", "none"), zero row
    ((7, 33), 1.0, False, "gain+bias", True),
    ((2, 3, 20), 0.3, True, "gain", False),
    ((5, 1), 1.0, False, "none", False),
    ((64, 4096), 0.0625, False, "gain", True),
    ((16, 1000), 1.0, True, "gain+bias", False),
]
# eps 1e-3: a zero row's scale 1 / eps must stay finite in float16 (max 65504; eps 1e-5 would not)
EPS = 1e-3


def _case(shape, dtype, param_dtype, affine, zero_row, device, seed=0):
    g = torch.Generator().manual_seed(seed)
    d = shape[-1]
    x = torch.randn(*shape, generator=g)
    if zero_row:
        x.view(-1, d)[0] = 0.0
    w = (1 + 0.5 * torch.randn(d, generator=g)) if affine != "none" else None
    b = torch.randn(d, generator=g) if affine == "gain+bias" else None
    dy = torch.randn(*shape, generator=g)
    to = lambda t, dt: None if t is None else t.to(device=device, dtype=dt)  # noqa: E731
    return to(x, dtype), to(w, param_dtype), to(b, param_dtype), to(dy, dtype)


def _max_rel_err(got: list[torch.Tensor], want: list[torch.Tensor]) -> float:
    worst = 0.0
    for a, r in zip(got, want):
        scale = max(r.abs().max().item(), 1e-30)
        worst = max(worst, (a.double() - r).abs().max().item() / scale)
    return worst


def exactness(device: str = "cuda", dtypes=tuple(EXACT_DTYPES), cases=EXACT_CASES) -> list[dict]:
    """One row per (case, dtype, parameter dtype): the Triton kernel's worst error against float64."""
    rows = []
    for dtype in dtypes:
        mixes = [dtype] + ([torch.float32] if dtype in (torch.bfloat16, torch.float16) else [])
        for param_dtype in mixes:
            for shape, p, eps_inside, affine, zero_row in cases:
                x, w, b, dy = _case(shape, dtype, param_dtype, affine, zero_row, device)
                k = formulas.partial_k(shape[-1], p)
                leaves = [t.detach().clone().requires_grad_() for t in (x, w, b) if t is not None]
                xi, wi, bi = leaves[0], (leaves[1] if w is not None else None), (leaves[-1] if b is not None else None)
                y = triton_rmsnorm.rms_norm(xi, wi, bi, k, EPS, eps_inside)
                got = [y, *torch.autograd.grad(y, leaves, dy)]
                ref_leaves = [t.detach().double().requires_grad_() for t in (x, w, b) if t is not None]
                rw = ref_leaves[1] if w is not None else None
                rb = ref_leaves[-1] if b is not None else None
                yr = formulas.rms_norm(ref_leaves[0], rw, rb, k, EPS, eps_inside)
                want = [yr, *torch.autograd.grad(yr, ref_leaves, dy.double())]
                # the op-by-op reference in the same dtype: what this precision can do at all (a row of
                # d = 1 makes dx a difference of nearly equal terms)
                low_leaves = [t.detach().clone().requires_grad_() for t in (x, w, b) if t is not None]
                yl = formulas.rms_norm(low_leaves[0], low_leaves[1] if w is not None else None,
                                       low_leaves[-1] if b is not None else None, k, EPS, eps_inside)
                ref_err = _max_rel_err([yl, *torch.autograd.grad(yl, low_leaves, dy.to(yl.dtype))], want)
                dtypes_ok = y.dtype == dtype and all(gr.dtype == t.dtype for gr, t in zip(got[1:], (x, w, b)))
                err = _max_rel_err(got, want)
                rows.append({"shape": "x".join(map(str, shape)), "dtype": str(dtype).replace("torch.", ""),
                             "params": str(param_dtype).replace("torch.", ""), "p": p, "eps_inside": eps_inside,
                             "affine": affine, "zero_row": zero_row, "max_rel_err": err, "reference_err": ref_err,
                             "tol": EXACT_DTYPES[dtype],
                             "ok": bool((err <= EXACT_DTYPES[dtype] or err <= 4 * ref_err) and dtypes_ok)})
    return rows


def module_checks(device: str = "cuda") -> list[dict]:
    """The RMSNorm module on the device: which kernel it chose, and autocast's dtype."""
    rows = []
    norm = RMSNorm(64).to(device)  # eps outside the root: torch's rms_norm computes another formula
    x = torch.randn(8, 64, device=device)
    y = norm(x)
    expected = fused.kernel("auto", device, x.dtype, x.dtype, 64, 64, False, False)[0]
    rows.append({"check": "RMSNorm(64) on the device chooses", "value": norm.kernel_name,
                 "ok": bool(norm.kernel_name == expected and torch.allclose(y, formulas.rms_norm(x, norm.weight, None, 64, 1e-8, False), rtol=1e-5, atol=1e-5))})
    inside = RMSNorm(64, eps_inside=True).to(device)  # the recipes' placement: torch's own rms_norm on CUDA
    y = inside(x)
    expected = fused.kernel("auto", device, x.dtype, x.dtype, 64, 64, True, False)[0]
    rows.append({"check": "RMSNorm(64, eps_inside=True) on the device chooses", "value": inside.kernel_name,
                 "ok": bool(inside.kernel_name == expected and (device != "cuda" or expected == "torch")
                            and torch.allclose(y, formulas.rms_norm(x, inside.weight, None, 64, 1e-8, True), rtol=1e-5, atol=1e-5))})
    if device == "cuda":  # CPU autocast is covered by tests/test_fused.py
        with torch.autocast("cuda", dtype=torch.bfloat16):
            h = torch.nn.functional.linear(x, torch.eye(64, device=device))
            y = norm(h)
        ref = formulas.rms_norm(h.double(), norm.weight.double(), None, 64, 1e-8, False)
        ok = y.dtype == torch.bfloat16 and _max_rel_err([y], [ref]) < 2e-2
        rows.append({"check": "under autocast (bf16 activations, fp32 gain)", "value": f"{norm.kernel_name}, {y.dtype}", "ok": bool(ok)})
    triton_gru.CPU_TENSORS = device == "cpu"  # --tiny: the recurrent kernels interpreted on CPU tensors, here only
    try:
        return rows + gru_checks(device) + lstm_checks(device)
    finally:
        triton_gru.CPU_TENSORS = False


GRU_CASES = [("rmsnorm", {"eps": EPS}), ("prmsnorm", {"p": 0.25, "eps_inside": True, "bias": True}), ("layernorm", {}),
             ("none", {})]  # eps 1e-3 outside the root: the zero row's gradient stays finite in fp16, as in part 1
# (a_gates, a_cand and s; h): fp32, bf16 autocast's mix, fp16
GRU_DTYPES = [(torch.float32, torch.float32), (torch.bfloat16, torch.float32), (torch.float16, torch.float16)]


def gru_checks(device: str = "cuda") -> list[dict]:
    """The Triton GRU transition (nn/triton_gru.py) on the device: h' and every gradient (a_gates, a_cand,
    h, s, the state-side gains and biases) against the float64 cell op by op, with float32 gains beside
    fp32, bf16 (autocast's mix: a float32 h) and fp16 inputs, a zero state row; hidden 1000 on CUDA (the
    RNNSearch's), 12 on CPU (--tiny, interpreted)."""
    rows, B, H = [], 16, 1000 if device == "cuda" else 12
    for name, options in GRU_CASES:
        torch.manual_seed(0)
        cell = NormGRUCell(8, H, build_normalization(name, options)).to(device)
        with torch.no_grad():  # gains and biases away from 1 and 0: a misplaced one cannot hide
            for p in cell.parameters():
                if p.dim() == 1:
                    p.copy_(torch.rand_like(p) + 0.5)
        reference = NormGRUCell(8, H, build_normalization(name, {**options, "impl": "reference"})).double().to(device)
        reference.load_state_dict(cell.state_dict())
        reference.fused = False
        norms = lambda c: [p for n, p in c.named_parameters() if n.startswith("norm_state")]  # noqa: E731
        worst, dtypes_ok = 0.0, True
        for dtype, h_dtype in GRU_DTYPES:
            g = torch.Generator().manual_seed(1)
            a, h, dy = (torch.randn(B, n, generator=g, dtype=torch.float64) for n in (3 * H, H, H))
            h[0] = 0.0
            s = h @ torch.randn(3 * H, H, generator=g, dtype=torch.float64).t() / H ** 0.5  # row 0: U h0 = 0
            leaves = [t.to(device, dt).requires_grad_() for t, dt in ((a, dtype), (h, h_dtype), (s, dtype))]
            out = triton_gru.combine(cell, leaves[0][:, :2 * H], leaves[0][:, 2 * H:], leaves[1], leaves[2])
            if out is None:
                return rows + [{"check": f"GRU transition (Triton) {name}", "value": "not taken", "ok": False}]
            got = [out, *torch.autograd.grad(out, leaves + norms(cell), dy.to(device, out.dtype))]
            ref_leaves = [t.detach().double().requires_grad_() for t in leaves]
            want_out = reference.combine(ref_leaves[0][:, :2 * H], ref_leaves[0][:, 2 * H:], *ref_leaves[1:])
            want = [want_out, *torch.autograd.grad(want_out, ref_leaves + norms(reference), dy.to(device))]
            worst = max(worst, _max_rel_err(got, want) / EXACT_DTYPES[dtype])  # in units of the tolerance
            dtypes_ok &= out.dtype == torch.promote_types(dtype, h_dtype) and all(
                gr.dtype == t.dtype for gr, t in zip(got[1:], leaves + norms(cell)))
        described = f"{name} {options}" if options else name
        rows.append({"check": f"GRU transition (Triton), {described}: fp32, bf16 autocast, fp16 against float64",
                     "value": f"worst error {worst:.2f} of tolerance", "ok": bool(worst <= 1.0 and dtypes_ok)})
    return rows


def lstm_checks(device: str = "cuda") -> list[dict]:
    """The Triton LSTM step (nn/triton_lstm.py) on the device: a padded NormLSTM's outputs and the input's and
    every parameter's gradient from a zero state, fp32 and under bf16 autocast (and fp16 autocast on CUDA:
    train.precision=fp16), against float64 op by op (within the tolerance, or 4 times the error of the
    op-by-op path in the same precision); hidden 256 on CUDA, 6 on CPU (--tiny, interpreted)."""
    rows, B, H = [], 16 if device == "cuda" else 4, 256 if device == "cuda" else 6
    for name, options in (("rmsnorm", {"eps": EPS}), ("layernorm", {})):
        torch.manual_seed(0)
        lstm = NormLSTM(8, H, build_normalization(name, options), max_steps=5).to(device)
        reference = NormLSTM(8, H, build_normalization(name, {**options, "impl": "reference"}), max_steps=5)
        reference.load_state_dict(lstm.state_dict())
        reference = reference.double().to(device)
        g = torch.Generator().manual_seed(1)
        x = torch.randn(B, 5, 8, generator=g, dtype=torch.float64).to(device)
        mask = torch.ones(B, 5, dtype=torch.bool, device=device)
        mask[3, 2:] = False

        def run(model, fused, dtype, autocast):
            model.fwd.fused = fused
            xi = x.to(dtype).requires_grad_()
            with torch.autocast(device, dtype=autocast or torch.bfloat16, enabled=autocast is not None):
                out, last = model(xi, mask)
            y = torch.cat([out.flatten(), last.flatten()])
            taken = any(node.name() == "_LSTMStepFunctionBackward" for node in autograd_nodes(y))
            dy = torch.linspace(-1, 1, y.numel(), device=device, dtype=y.dtype)
            return taken, [y, *torch.autograd.grad(y, [xi, *model.parameters()], dy)]

        _, want = run(reference, False, torch.float64, None)
        worst, taken_all = 0.0, True
        for autocast in (None, torch.bfloat16) + ((torch.float16,) if device == "cuda" else ()):
            tol = EXACT_DTYPES[autocast or torch.float32]
            taken, got = run(lstm, True, torch.float32, autocast)
            _, op_by_op = run(lstm, False, torch.float32, autocast)
            worst = max(worst, _max_rel_err(got, want) / max(tol, 4 * _max_rel_err(op_by_op, want)))
            taken_all &= taken
        mixes = "fp32, bf16 autocast" + (", fp16 autocast" if device == "cuda" else "")
        rows.append({"check": f"LSTM step (Triton), {name}: {mixes} against float64",
                     "value": f"worst error {worst:.2f} of tolerance" if taken_all else "not taken",
                     "ok": bool(taken_all and worst <= 1.0)})
    return rows


def autograd_nodes(out: torch.Tensor) -> set:
    """The autograd nodes behind out (which Functions a result went through: the tests ask it too)."""
    seen, todo = set(), [out.grad_fn]
    while todo:
        node = todo.pop()
        if node is not None and node not in seen:
            seen.add(node)
            todo += [next_fn for next_fn, _ in node.next_functions]
    return seen


def markdown(exact: list[dict], checks: list[dict]) -> list[str]:
    """Part 1's lines: the Triton kernel's cases against float64, then the module and recurrent-cell checks."""
    out = []
    if exact:
        bad = [r for r in exact if not r["ok"]]
        out.append(f"{len(exact) - len(bad)} of {len(exact)} cases within tolerance: error = max |got - float64 "
                   "reference| / max |reference| over y and every gradient, at most fp32 2e-5, bf16 2e-2, fp16 3e-3, or at "
                   "most 4 times the error of the op-by-op reference run in the same dtype; y and gradients in the "
                   f"inputs' dtypes; eps {EPS}.")
        out += ["", "| shape | dtype | params | p | eps inside | affine | zero row | max rel err | same-dtype reference's | ok |",
                "|---|---|---|---|---|---|---|---:|---:|---|"]
        out += [f"| {r['shape']} | {r['dtype']} | {r['params']} | {r['p']} | {r['eps_inside']} | {r['affine']} | "
                f"{r['zero_row']} | {r['max_rel_err']:.1e} | {r['reference_err']:.1e} | {'yes' if r['ok'] else 'NO'} |"
                for r in exact]
        out.append("")
    out += [f"- {c['check']}: {c['value']} ({'ok' if c['ok'] else 'WRONG'})" for c in checks]
    return out
