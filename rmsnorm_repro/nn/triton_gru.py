"""The GRU transition on CUDA in Triton: NormGRUCell.combine as one forward and one backward launch, the row
arithmetic of nn/gru_rows.h (the CPU kernels') with the norms as fused_gru.row_norm describes them.

Op by op a GRU layer's time step on CUDA costs 33 aten ops forward and backward without a norm, 41 with
LayerNorm, 43 with RMSNorm (tests/nn/test_gru.py), each microseconds of host time beside a few of GPU time:
the recurrent tasks are host-bound whatever the norm. Here the state-side norms N3 (the gates' 2H jointly)
and N4 (the candidate's H), both gates, the candidate and the interpolation are one kernel each way, and a
step costs 12, 19 and 17 ops (tests/nn/test_triton_gru.py counts them; docs/performance.md).

Kernels `_gru_forward` / `_gru_backward`. Forward: one program per row, every intermediate kept in
registers, only h' written. Backward: each program walks a block of rows, recomputes the row's forward
(cheaper than writing and reading the gates back) and writes the gradients at a_gates, a_cand, h and s,
keeping the gains' and biases' partial sums in registers; the host adds the partials in one sum.
Arithmetic in float32 (float64 for float64 inputs), rounded once into each output's dtype. Under autocast
a_gates, a_cand and s are bfloat16/float16 beside a float32 h and float32 gains; h' comes out in the
dtype the op-by-op path gives (their promotion). float16 s: an all-zero RMS statistic's gradient is
saturated as formulas.saturate_zero_rows does.

`combine(cell, ...)` returns h', or None where it does not apply: Triton not installed, not CUDA (`runs_on`),
inside torch.compile, shapes other than (B, 2H), (B, H), (B, H), (B, 3H) (`_rows_match`), a dtype or mixture
the op-by-op path would round differently (`_fits`), or a state-side norm fused_gru.row_norm cannot
describe; the cell then runs op by op.
"""
from __future__ import annotations

import torch
from torch import Tensor, nn

from ..norms import formulas
from ..norms.fused.triton_rmsnorm import _acc, _backward_programs, _block, _interpreting, triton
from .fused_gru import MODES, row_norm

DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
# True: CPU tensors take this module's and triton_lstm.py's kernels too where Triton interprets them
# (TRITON_INTERPRET=1): the tests and `make gpu-check --tiny` set it; a CPU run never takes them otherwise
CPU_TENSORS = False


def runs_on(t: Tensor) -> bool:
    """Whether the recurrent Triton kernels take tensors like t: CUDA ones (CPU ones: CPU_TENSORS)."""
    return t.is_cuda or (CPU_TENSORS and _interpreting())

if triton is not None:
    import triton.language as tl

    FLOAT16_MAX = tl.constexpr(formulas.FLOAT16_MAX)  # a constexpr: a kernel can read no other global

    @triton.jit
    def _stats(xa, xb, valid, head_a, head_b, D, K, eps, MODE: tl.constexpr, EPS_INSIDE: tl.constexpr):
        """A row's norm statistics (a, c) over its two halves xa, xb (0 outside the row): RMS: the scale
        and the backward's coefficient; LayerNorm: 1/sqrt(var + eps) and the mean (gru_rows.h norm_forward)."""
        if MODE == 1:
            ms = (tl.sum(tl.where(head_a, xa * xa, 0.0), axis=0) + tl.sum(tl.where(head_b, xb * xb, 0.0), axis=0)) / K
            if EPS_INSIDE:
                a = 1.0 / tl.sqrt(ms + eps)
                c = a * a * a / K
            else:
                rms = tl.sqrt(ms)
                a = 1.0 / (rms + eps)
                c = tl.where(rms > 0, a * a / (K * tl.maximum(rms, 1e-30)), 0.0)  # its limit at a zero row: 0
        elif MODE == 2:
            mean = (tl.sum(xa, axis=0) + tl.sum(xb, axis=0)) / D
            da, db = tl.where(valid, xa - mean, 0.0), tl.where(head_b, xb - mean, 0.0)  # head_b: xb's valid part
            a = 1.0 / tl.sqrt((tl.sum(da * da, axis=0) + tl.sum(db * db, axis=0)) / D + eps)
            c = mean
        else:
            a = 1.0
            c = 0.0
        return a, c

    @triton.jit
    def _xhat(x, a, c, MODE: tl.constexpr):
        """The normalized row before gain and bias."""
        if MODE == 1:
            return x * a
        elif MODE == 2:
            return (x - c) * a
        else:
            return x

    @triton.jit
    def _param(P, offsets, valid, HAS: tl.constexpr, default: tl.constexpr, ACC: tl.constexpr):
        """A gain or bias at `offsets`, or `default` where the norm has none (P is None then)."""
        if HAS:
            return tl.load(P + offsets, mask=valid, other=0.0).to(ACC)
        else:
            return tl.full(offsets.shape, default, ACC)

    @triton.jit
    def _tanh(x):
        e = tl.exp(-2.0 * tl.abs(x))  # never overflows
        t = (1.0 - e) / (1.0 + e)
        return tl.where(x < 0, -t, t)

    @triton.jit
    def _row(AG, AC, HS, S, G3, B3, G4, B4, row, sag, sac, sh, ss, HD, K3, K4, eps3, eps4, cols, valid,
             MODE3: tl.constexpr, MODE4: tl.constexpr, INSIDE3: tl.constexpr, INSIDE4: tl.constexpr,
             HAS_G3: tl.constexpr, HAS_B3: tl.constexpr, HAS_G4: tl.constexpr, HAS_B4: tl.constexpr,
             ACC: tl.constexpr):
        """One row's forward: the state's parts, the norms' statistics, the normalized candidate input nc,
        the gates r, z, the candidate n and h (all halves of BLOCK features, H of them real)."""
        s_r = tl.load(S + row * ss + cols, mask=valid, other=0.0).to(ACC)
        s_z = tl.load(S + row * ss + HD + cols, mask=valid, other=0.0).to(ACC)
        s_c = tl.load(S + row * ss + 2 * HD + cols, mask=valid, other=0.0).to(ACC)
        a3, c3 = _stats(s_r, s_z, valid, cols < K3, valid & (cols + HD < K3), 2 * HD, K3, eps3, MODE3, INSIDE3)
        a4, c4 = _stats(s_c, s_c * 0.0, valid, cols < K4, cols < 0, HD, K4, eps4, MODE4, INSIDE4)
        ng_r = (_xhat(s_r, a3, c3, MODE3) * _param(G3, cols, valid, HAS_G3, 1.0, ACC)
                + _param(B3, cols, valid, HAS_B3, 0.0, ACC))
        ng_z = (_xhat(s_z, a3, c3, MODE3) * _param(G3, HD + cols, valid, HAS_G3, 1.0, ACC)
                + _param(B3, HD + cols, valid, HAS_B3, 0.0, ACC))
        nc = (_xhat(s_c, a4, c4, MODE4) * _param(G4, cols, valid, HAS_G4, 1.0, ACC)
              + _param(B4, cols, valid, HAS_B4, 0.0, ACC))
        r = tl.sigmoid(tl.load(AG + row * sag + cols, mask=valid, other=0.0).to(ACC) + ng_r)
        z = tl.sigmoid(tl.load(AG + row * sag + HD + cols, mask=valid, other=0.0).to(ACC) + ng_z)
        n = _tanh(tl.load(AC + row * sac + cols, mask=valid, other=0.0).to(ACC) + r * nc)
        h = tl.load(HS + row * sh + cols, mask=valid, other=0.0).to(ACC)
        return s_r, s_z, s_c, a3, c3, a4, c4, nc, r, z, n, h

    @triton.jit
    def _gru_forward(AG, AC, HS, S, G3, B3, G4, B4, OUT, sag, sac, sh, ss, HD, K3, K4, eps3, eps4,
                     MODE3: tl.constexpr, MODE4: tl.constexpr, INSIDE3: tl.constexpr, INSIDE4: tl.constexpr,
                     HAS_G3: tl.constexpr, HAS_B3: tl.constexpr, HAS_G4: tl.constexpr, HAS_B4: tl.constexpr,
                     BLOCK: tl.constexpr, ACC: tl.constexpr):
        row = tl.program_id(0).to(tl.int64)
        cols = tl.arange(0, BLOCK)
        valid = cols < HD
        _, _, _, _, _, _, _, _, _, z, n, h = _row(AG, AC, HS, S, G3, B3, G4, B4, row, sag, sac, sh, ss, HD, K3, K4,
                                                  eps3, eps4, cols, valid, MODE3, MODE4, INSIDE3, INSIDE4, HAS_G3,
                                                  HAS_B3, HAS_G4, HAS_B4, ACC)
        tl.store(OUT + row * HD + cols, (n + z * (h - n)).to(OUT.dtype.element_ty), mask=valid)

    @triton.jit
    def _norm_backward(x, xhat, dy, g, a, c, head, valid, total, mean_dy, mean_dy_xhat, MODE: tl.constexpr):
        """One half of the gradient at a norm's input (gru_rows.h norm_backward), given the whole row's
        sums: total = sum(g dy x) (RMS), mean_dy = mean(g dy), mean_dy_xhat = mean(g dy xhat) (LayerNorm)."""
        if MODE == 1:
            return a * g * dy - tl.where(head, c * total * x, 0.0)
        elif MODE == 2:
            return a * (g * dy - mean_dy - xhat * mean_dy_xhat)
        else:
            return g * dy

    @triton.jit
    def _saturated(dx, x_a, x_b, head_a, head_b, MODE: tl.constexpr, SATURATE: tl.constexpr):
        """float16: an all-zero RMS statistic's gradient clamped to float16's range (formulas.saturate_zero_rows)."""
        if SATURATE and MODE == 1:
            zero = tl.maximum(tl.max(tl.where(head_a, tl.abs(x_a), 0.0), axis=0),
                              tl.max(tl.where(head_b, tl.abs(x_b), 0.0), axis=0)) == 0
            return tl.where(zero, tl.minimum(tl.maximum(dx, -FLOAT16_MAX), FLOAT16_MAX), dx)
        else:
            return dx

    @triton.jit
    def _gru_backward(DOUT, AG, AC, HS, S, G3, B3, G4, B4, DAG, DAC, DH, DS, PARTIAL, N, ROWS, sag, sac, sh, ss, HD,
                      K3, K4, eps3, eps4, MODE3: tl.constexpr, MODE4: tl.constexpr, INSIDE3: tl.constexpr,
                      INSIDE4: tl.constexpr, HAS_G3: tl.constexpr, HAS_B3: tl.constexpr, HAS_G4: tl.constexpr,
                      HAS_B4: tl.constexpr, PARAMS: tl.constexpr, SATURATE: tl.constexpr, BLOCK: tl.constexpr,
                      ACC: tl.constexpr):
        pid = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        valid = cols < HD
        g3_r = _param(G3, cols, valid, HAS_G3, 1.0, ACC)
        g3_z = _param(G3, HD + cols, valid, HAS_G3, 1.0, ACC)
        g4 = _param(G4, cols, valid, HAS_G4, 1.0, ACC)
        # the gains' and biases' partial sums: N3's gain (r, z halves), N4's gain, N3's bias (r, z), N4's bias
        dg3_r = tl.zeros([BLOCK], ACC)
        dg3_z = tl.zeros([BLOCK], ACC)
        dg4 = tl.zeros([BLOCK], ACC)
        db3_r = tl.zeros([BLOCK], ACC)
        db3_z = tl.zeros([BLOCK], ACC)
        db4 = tl.zeros([BLOCK], ACC)
        start = pid * ROWS
        for r0 in range(start, tl.minimum(start + ROWS, N)):
            row = tl.cast(r0, tl.int64)
            s_r, s_z, s_c, a3, c3, a4, c4, nc, r, z, n, h = _row(
                AG, AC, HS, S, G3, B3, G4, B4, row, sag, sac, sh, ss, HD, K3, K4, eps3, eps4, cols, valid, MODE3,
                MODE4, INSIDE3, INSIDE4, HAS_G3, HAS_B3, HAS_G4, HAS_B4, ACC)
            dy = tl.load(DOUT + row * HD + cols, mask=valid, other=0.0).to(ACC)
            dpre_n = dy * (1.0 - z) * (1.0 - n * n)
            dag_r = dpre_n * nc * r * (1.0 - r)  # also the gradient at N3's output, r half
            dag_z = dy * (h - n) * z * (1.0 - z)
            dnc = dpre_n * r  # the gradient at N4's output
            tl.store(DH + row * HD + cols, (dy * z).to(DH.dtype.element_ty), mask=valid)
            tl.store(DAC + row * HD + cols, dpre_n.to(DAC.dtype.element_ty), mask=valid)
            tl.store(DAG + row * 2 * HD + cols, dag_r.to(DAG.dtype.element_ty), mask=valid)
            tl.store(DAG + row * 2 * HD + HD + cols, dag_z.to(DAG.dtype.element_ty), mask=valid)
            # N4 backward
            head4 = cols < K4
            xhat_c = _xhat(s_c, a4, c4, MODE4)
            gdy = g4 * dnc
            ds_c = _norm_backward(s_c, xhat_c, dnc, g4, a4, c4, head4, valid, tl.sum(gdy * s_c, axis=0),
                                  tl.sum(gdy, axis=0) / HD, tl.sum(gdy * xhat_c, axis=0) / HD, MODE4)
            ds_c = _saturated(ds_c, s_c, s_c, head4, head4, MODE4, SATURATE)
            # N3 backward, over both halves
            head_r, head_z = cols < K3, valid & (cols + HD < K3)
            xhat_r, xhat_z = _xhat(s_r, a3, c3, MODE3), _xhat(s_z, a3, c3, MODE3)
            gdy_r, gdy_z = g3_r * dag_r, g3_z * dag_z
            total = tl.sum(gdy_r * s_r, axis=0) + tl.sum(gdy_z * s_z, axis=0)
            mean_dy = (tl.sum(gdy_r, axis=0) + tl.sum(gdy_z, axis=0)) / (2 * HD)
            mean_dy_xhat = (tl.sum(gdy_r * xhat_r, axis=0) + tl.sum(gdy_z * xhat_z, axis=0)) / (2 * HD)
            ds_r = _norm_backward(s_r, xhat_r, dag_r, g3_r, a3, c3, head_r, valid, total, mean_dy, mean_dy_xhat, MODE3)
            ds_z = _norm_backward(s_z, xhat_z, dag_z, g3_z, a3, c3, head_z, valid, total, mean_dy, mean_dy_xhat, MODE3)
            ds_r = _saturated(ds_r, s_r, s_z, head_r, head_z, MODE3, SATURATE)
            ds_z = _saturated(ds_z, s_r, s_z, head_r, head_z, MODE3, SATURATE)
            tl.store(DS + row * 3 * HD + cols, ds_r.to(DS.dtype.element_ty), mask=valid)
            tl.store(DS + row * 3 * HD + HD + cols, ds_z.to(DS.dtype.element_ty), mask=valid)
            tl.store(DS + row * 3 * HD + 2 * HD + cols, ds_c.to(DS.dtype.element_ty), mask=valid)
            if PARAMS:
                dg3_r += dag_r * xhat_r
                dg3_z += dag_z * xhat_z
                dg4 += dnc * xhat_c
                db3_r += dag_r
                db3_z += dag_z
                db4 += dnc
        if PARAMS:  # PARTIAL: (programs, 6H) laid out as [dgain3 (2H), dgain4 (H), dbias3 (2H), dbias4 (H)]
            base = PARTIAL + pid * 6 * HD
            tl.store(base + cols, dg3_r, mask=valid)
            tl.store(base + HD + cols, dg3_z, mask=valid)
            tl.store(base + 2 * HD + cols, dg4, mask=valid)
            tl.store(base + 3 * HD + cols, db3_r, mask=valid)
            tl.store(base + 4 * HD + cols, db3_z, mask=valid)
            tl.store(base + 5 * HD + cols, db4, mask=valid)


def _rows(x: Tensor) -> Tensor:
    """x itself where its rows lie at stride(0) with unit stride inside (a gate block sliced out of a wider
    projection, one step of a hoisted input part), else a contiguous copy."""
    return x if x.stride(-1) == 1 else x.contiguous()


class _GRUCellFunction(torch.autograd.Function):
    """Per call: forward allocates h' and saves its inputs (nothing else: the backward recomputes the
    row); backward allocates the four input gradients and, where a gain or bias is trained, one buffer of
    per-program partial sums added in one torch sum. Every buffer is `empty`: each program writes all of
    its part."""

    @staticmethod
    def forward(ctx, a_gates, a_cand, h, s, g3, b3, g4, b4, spec, out_dtype):
        a_gates, a_cand, h, s = _rows(a_gates), _rows(a_cand), _rows(h), _rows(s)
        n, hd = h.shape
        out = torch.empty((n, hd), dtype=out_dtype, device=h.device)
        block, warps = _block(hd)
        _, acc = _acc(out_dtype)
        if n > 0:
            _gru_forward[(n,)](a_gates, a_cand, h, s, g3, b3, g4, b4, out, a_gates.stride(0), a_cand.stride(0),
                               h.stride(0), s.stride(0), hd, *spec, BLOCK=block, ACC=acc, num_warps=warps)
        ctx.save_for_backward(a_gates, a_cand, h, s, g3, b3, g4, b4)
        ctx.spec = spec
        return out

    @staticmethod
    def backward(ctx, dout):
        a_gates, a_cand, h, s, g3, b3, g4, b4 = ctx.saved_tensors
        n, hd = h.shape
        if not dout.is_contiguous():
            dout = dout.contiguous()
        acc_torch, acc = _acc(dout.dtype)
        params = (g3, g4, b3, b4)
        trained = [p is not None and ctx.needs_input_grad[i] for p, i in zip(params, (4, 6, 5, 7))]
        programs = max(1, min(n, _backward_programs(h.device)))
        rows = -(-n // programs) if n else 1
        dag = torch.empty((n, 2 * hd), dtype=a_gates.dtype, device=h.device)
        dac = torch.empty((n, hd), dtype=a_cand.dtype, device=h.device)
        dh = torch.empty((n, hd), dtype=h.dtype, device=h.device)
        ds = torch.empty((n, 3 * hd), dtype=s.dtype, device=h.device)
        # the gains' and biases' per-program sums; with no rows no program runs and they are 0
        partial = ((torch.empty if n > 0 else torch.zeros)((programs, 6 * hd), dtype=acc_torch, device=h.device)
                   if any(trained) else None)
        block, warps = _block(hd)
        if n > 0:
            _gru_backward[(programs,)](dout, a_gates, a_cand, h, s, g3, b3, g4, b4, dag, dac, dh, ds, partial, n, rows,
                                       a_gates.stride(0), a_cand.stride(0), h.stride(0), s.stride(0), hd, *ctx.spec,
                                       PARAMS=partial is not None, SATURATE=s.dtype == torch.float16, BLOCK=block,
                                       ACC=acc, num_warps=warps)
        dg3, dg4, db3, db4 = parameter_gradients(partial, params, trained, [2 * hd, hd, 2 * hd, hd])
        return dag, dac, dh, ds, dg3, db3, dg4, db4, None, None


def parameter_gradients(partial: Tensor | None, params, trained: list[bool], widths: list[int]) -> list:
    """The gains' and biases' gradients from a backward kernel's per-program partial sums (programs, sum of
    widths), laid out as `params` in `widths`: one sum, each cast to its parameter's dtype; None where a
    parameter is absent or not trained."""
    grads = [None] * len(params)
    if partial is not None:
        for i, (p, want, part) in enumerate(zip(params, trained, partial.sum(0).split(widths))):
            if want:
                grads[i] = part if part.dtype is p.dtype else part.to(p.dtype)
    return grads


def _fits(a_gates: Tensor, a_cand: Tensor, h: Tensor, s: Tensor, params) -> torch.dtype | None:
    """h's dtype as the op-by-op path returns it, where the kernel gives that path's results within rounding:
    a_gates, a_cand and s of one dtype; h of it or, beside bfloat16/float16 (autocast), float32; each gain
    and bias of s's dtype or float32 beside bfloat16/float16. Else None."""
    low = s.dtype in formulas.LOW_PRECISION
    if (s.dtype not in DTYPES or a_gates.dtype is not s.dtype or a_cand.dtype is not s.dtype
            or not (h.dtype is s.dtype or (low and h.dtype is torch.float32))):
        return None
    if any(p is not None and not (p.dtype is s.dtype or (low and p.dtype is torch.float32)) for p in params):
        return None
    return h.dtype


def _rows_match(h: Tensor, *others: tuple[Tensor, int]) -> bool:
    """h is (B, H) and each (tensor, n) of others (B, n H): the kernel reads exactly these rows, where the
    op-by-op path would broadcast or raise."""
    if h.dim() != 2:
        return False
    rows, width = h.shape
    return all(t.shape == (rows, n * width) for t, n in others)


def combine(cell: nn.Module, a_gates: Tensor, a_cand: Tensor, h: Tensor, s: Tensor) -> Tensor | None:
    """NormGRUCell.combine in one launch each way, or None where it does not apply (module docstring)."""
    if triton is None or not runs_on(h) or torch.compiler.is_compiling():
        return None
    gates, cand = row_norm(cell.norm_state_gates), row_norm(cell.norm_state_cand)
    if gates is None or cand is None or not _rows_match(h, (a_gates, 2), (a_cand, 1), (s, 3)):
        return None
    params = (gates.gain, gates.bias, cand.gain, cand.bias)
    out_dtype = _fits(a_gates, a_cand, h, s, params)
    if out_dtype is None:
        return None
    spec = (gates.k, cand.k, gates.eps, cand.eps, MODES[gates.kind], MODES[cand.kind], gates.eps_inside,
            cand.eps_inside, gates.gain is not None, gates.bias is not None, cand.gain is not None,
            cand.bias is not None)
    return _GRUCellFunction.apply(a_gates, a_cand, h, s, *params, spec, out_dtype)
