"""The LSTM step on CUDA in Triton: everything of NormLSTM's time step after the state product, one launch
forward and one backward:

    i, f, g, o = gates = gx + n_h(s)            s = W_h h, n_h over all 4H jointly; gx from outside the loop
    c' = sigmoid(f) c + sigmoid(i) tanh(g);  h' = sigmoid(o) tanh(n_c(c'))
    padded rows (mask False) keep h and c

with n_h and n_c as fused_gru.row_norm describes them (none, RMSNorm, pRMSNorm, LayerNorm): not per-step
BatchNorm, whose statistics are not a row's. Op by op a step costs 52 aten ops forward and backward without
a norm, 60 with LayerNorm, 62 with RMSNorm, each microseconds of host time on CUDA; here 13, 20 and 18, and
one launch each way (tests/nn/test_triton_lstm.py counts both).

Kernels `_lstm_forward` / `_lstm_backward`, built like triton_gru.py's (whose row helpers they share): one
program per row forward; the backward walks a block of rows, recomputes each row's forward and keeps the
norms' gain and bias partial sums in registers. The 4H gate row is held as a (4, BLOCK) tile, one gate a
line. Arithmetic in float32 (float64 for float64), rounded once into each output's dtype; h' and c' come out
in the dtype the op-by-op step gives (autocast: a bfloat16/float16 s beside float32 gx, h and c).

`step_function(direction, h)` returns the per-step function, or None where it does not apply (as
triton_gru.combine: not CUDA (triton_gru.runs_on), torch.compile, a norm or a dtype mixture it does not
compute); the direction then runs its steps op by op.
"""
from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor, nn

from ..norms import formulas
from ..norms.base import SharedStepNorm
from ..norms.fused.triton_rmsnorm import _acc, _backward_programs, _block, triton
from . import triton_gru
from .fused_gru import MODES, row_norm
from .triton_gru import DTYPES

if triton is not None:
    import triton.language as tl

    from .triton_gru import FLOAT16_MAX, _norm_backward, _param, _stats, _tanh, _xhat

    @triton.jit
    def _tile_stats(x, valid, head, D, K, eps, MODE: tl.constexpr, EPS_INSIDE: tl.constexpr):
        """_stats over a (4, BLOCK) tile: the whole 4H row."""
        if MODE == 1:
            ms = tl.sum(tl.sum(tl.where(head, x * x, 0.0), axis=1), axis=0) / K
            if EPS_INSIDE:
                a = 1.0 / tl.sqrt(ms + eps)
                c = a * a * a / K
            else:
                rms = tl.sqrt(ms)
                a = 1.0 / (rms + eps)
                c = tl.where(rms > 0, a * a / (K * tl.maximum(rms, 1e-30)), 0.0)
        elif MODE == 2:
            mean = tl.sum(tl.sum(x, axis=1), axis=0) / D
            dev = tl.where(valid, x - mean, 0.0)
            a = 1.0 / tl.sqrt(tl.sum(tl.sum(dev * dev, axis=1), axis=0) / D + eps)
            c = mean
        else:
            a = 1.0
            c = 0.0
        return a, c

    @triton.jit
    def _tile_sum(x):
        return tl.sum(tl.sum(x, axis=1), axis=0)

    @triton.jit
    def _line(tile, gate, j):
        """Line j of a (4, BLOCK) tile as a (BLOCK,) vector."""
        return tl.sum(tl.where(gate == j, tile, 0.0), axis=0)

    @triton.jit
    def _row(GX, S, C, HS, M, GH, BH, GC, BC, row, sgx, ss, sc, sh, sm, HD, KH, KC, eps_h, eps_c, gate, offs, valid,
             cols, valid1, MODEH: tl.constexpr, MODEC: tl.constexpr, INSIDEH: tl.constexpr, INSIDEC: tl.constexpr,
             HAS_GH: tl.constexpr, HAS_BH: tl.constexpr, HAS_GC: tl.constexpr, HAS_BC: tl.constexpr, ACC: tl.constexpr):
        """One row's forward: s as a tile, n_h's statistics, the gates i, f, g, o, c, c', n_c's statistics,
        tanh(n_c(c')), h and the row's mask."""
        s = tl.load(S + row * ss + offs, mask=valid, other=0.0).to(ACC)
        ah, ch = _tile_stats(s, valid, valid & (offs < KH), 4 * HD, KH, eps_h, MODEH, INSIDEH)
        pre = (tl.load(GX + row * sgx + offs, mask=valid, other=0.0).to(ACC)
               + _xhat(s, ah, ch, MODEH) * _param(GH, offs, valid, HAS_GH, 1.0, ACC)
               + _param(BH, offs, valid, HAS_BH, 0.0, ACC))
        act = tl.where(gate == 2, _tanh(pre), tl.sigmoid(pre))
        i, f, g, o = _line(act, gate, 0), _line(act, gate, 1), _line(act, gate, 2), _line(act, gate, 3)
        c = tl.load(C + row * sc + cols, mask=valid1, other=0.0).to(ACC)
        c_new = f * c + i * g
        ac, cc = _stats(c_new, c_new * 0.0, valid1, cols < KC, cols < 0, HD, KC, eps_c, MODEC, INSIDEC)
        xhat_c = _xhat(c_new, ac, cc, MODEC)
        tc = _tanh(xhat_c * _param(GC, cols, valid1, HAS_GC, 1.0, ACC) + _param(BC, cols, valid1, HAS_BC, 0.0, ACC))
        h = tl.load(HS + row * sh + cols, mask=valid1, other=0.0).to(ACC)
        keep = tl.load(M + row * sm) != 0
        return s, ah, ch, act, i, f, g, o, c, c_new, ac, cc, xhat_c, tc, h, keep

    @triton.jit
    def _lstm_forward(GX, S, C, HS, M, GH, BH, GC, BC, H_OUT, C_OUT, sgx, ss, sc, sh, sm, HD, KH, KC, eps_h, eps_c,
                      MODEH: tl.constexpr, MODEC: tl.constexpr, INSIDEH: tl.constexpr, INSIDEC: tl.constexpr,
                      HAS_GH: tl.constexpr, HAS_BH: tl.constexpr, HAS_GC: tl.constexpr, HAS_BC: tl.constexpr,
                      BLOCK: tl.constexpr, ACC: tl.constexpr):
        row = tl.program_id(0).to(tl.int64)
        cols = tl.arange(0, BLOCK)
        gate = tl.arange(0, 4)[:, None]
        offs = gate * HD + cols[None, :]
        valid1 = cols < HD
        valid = (cols[None, :] < HD) & (gate < 4)
        _, _, _, _, _, _, _, o, c, c_new, _, _, _, tc, h, keep = _row(
            GX, S, C, HS, M, GH, BH, GC, BC, row, sgx, ss, sc, sh, sm, HD, KH, KC, eps_h, eps_c, gate, offs, valid,
            cols, valid1, MODEH, MODEC, INSIDEH, INSIDEC, HAS_GH, HAS_BH, HAS_GC, HAS_BC, ACC)
        tl.store(C_OUT + row * HD + cols, tl.where(keep, c_new, c).to(C_OUT.dtype.element_ty), mask=valid1)
        tl.store(H_OUT + row * HD + cols, tl.where(keep, o * tc, h).to(H_OUT.dtype.element_ty), mask=valid1)

    @triton.jit
    def _lstm_backward(DH_OUT, DC_OUT, GX, S, C, HS, M, GH, BH, GC, BC, DGX, DS, DC, DH, PARTIAL, N, ROWS,
                       sgx, ss, sc, sh, sm, HD, KH, KC, eps_h, eps_c, MODEH: tl.constexpr, MODEC: tl.constexpr,
                       INSIDEH: tl.constexpr, INSIDEC: tl.constexpr, HAS_GH: tl.constexpr, HAS_BH: tl.constexpr,
                       HAS_GC: tl.constexpr, HAS_BC: tl.constexpr, PARAMS: tl.constexpr, SATURATE: tl.constexpr,
                       BLOCK: tl.constexpr, ACC: tl.constexpr):
        pid = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        gate = tl.arange(0, 4)[:, None]
        offs = gate * HD + cols[None, :]
        valid1 = cols < HD
        valid = (cols[None, :] < HD) & (gate < 4)
        gh = _param(GH, offs, valid, HAS_GH, 1.0, ACC)
        gc = _param(GC, cols, valid1, HAS_GC, 1.0, ACC)
        dgh = tl.zeros([4, BLOCK], ACC)  # n_h's gain and bias partial sums, then n_c's
        dbh = tl.zeros([4, BLOCK], ACC)
        dgc = tl.zeros([BLOCK], ACC)
        dbc = tl.zeros([BLOCK], ACC)
        start = pid * ROWS
        for r0 in range(start, tl.minimum(start + ROWS, N)):
            row = tl.cast(r0, tl.int64)
            s, ah, ch, act, i, f, g, o, c, c_new, ac, cc, xhat_c, tc, h, keep = _row(
                GX, S, C, HS, M, GH, BH, GC, BC, row, sgx, ss, sc, sh, sm, HD, KH, KC, eps_h, eps_c, gate, offs,
                valid, cols, valid1, MODEH, MODEC, INSIDEH, INSIDEC, HAS_GH, HAS_BH, HAS_GC, HAS_BC, ACC)
            dh_out = tl.load(DH_OUT + row * HD + cols, mask=valid1, other=0.0).to(ACC)
            dc_out = tl.load(DC_OUT + row * HD + cols, mask=valid1, other=0.0).to(ACC)
            dh_new = tl.where(keep, dh_out, 0.0)
            dpre_o = dh_new * tc * o * (1.0 - o)
            dy = dh_new * o * (1.0 - tc * tc)  # the gradient at n_c's output
            gdy = gc * dy
            dc_new = tl.where(keep, dc_out, 0.0) + _norm_backward(
                c_new, xhat_c, dy, gc, ac, cc, cols < KC, valid1, tl.sum(gdy * c_new, axis=0), tl.sum(gdy, axis=0) / HD,
                tl.sum(gdy * xhat_c, axis=0) / HD, MODEC)
            dpre_i = dc_new * g * i * (1.0 - i)
            dpre_f = dc_new * c * f * (1.0 - f)
            dpre_g = dc_new * i * (1.0 - g * g)
            tl.store(DC + row * HD + cols, tl.where(keep, dc_new * f, dc_out).to(DC.dtype.element_ty), mask=valid1)
            tl.store(DH + row * HD + cols, tl.where(keep, 0.0, dh_out).to(DH.dtype.element_ty), mask=valid1)
            dpre = tl.where(gate == 0, dpre_i[None, :], tl.where(gate == 1, dpre_f[None, :],
                                                               tl.where(gate == 2, dpre_g[None, :], dpre_o[None, :])))
            tl.store(DGX + row * 4 * HD + offs, dpre.to(DGX.dtype.element_ty), mask=valid)
            head = valid & (offs < KH)
            xhat_s = _xhat(s, ah, ch, MODEH)
            gdpre = gh * dpre
            ds = _norm_backward(s, xhat_s, dpre, gh, ah, ch, head, valid, _tile_sum(gdpre * s),
                                _tile_sum(gdpre) / (4 * HD), _tile_sum(gdpre * xhat_s) / (4 * HD), MODEH)
            if SATURATE and MODEH == 1:  # float16: a zero statistic's gradient clamped (formulas.saturate_zero_rows)
                zero = tl.max(tl.max(tl.where(head, tl.abs(s), 0.0), axis=1), axis=0) == 0
                ds = tl.where(zero, tl.minimum(tl.maximum(ds, -FLOAT16_MAX), FLOAT16_MAX), ds)
            tl.store(DS + row * 4 * HD + offs, ds.to(DS.dtype.element_ty), mask=valid)
            if PARAMS:
                dgh += dpre * xhat_s
                dbh += dpre
                dgc += dy * xhat_c
                dbc += dy
        if PARAMS:  # PARTIAL: (programs, 10H) laid out as [dgain_h (4H), dgain_c (H), dbias_h (4H), dbias_c (H)]
            base = PARTIAL + pid * 10 * HD
            tl.store(base + offs, dgh, mask=valid)
            tl.store(base + 4 * HD + cols, dgc, mask=valid1)
            tl.store(base + 5 * HD + offs, dbh, mask=valid)
            tl.store(base + 9 * HD + cols, dbc, mask=valid1)


def _rows(x: Tensor) -> Tensor:
    return x if x.stride(-1) == 1 else x.contiguous()


class _LSTMStepFunction(torch.autograd.Function):
    """Per call: forward allocates h' and c' and saves its inputs (the backward recomputes the row);
    backward allocates the gradients at gx, s, c and h and, where a gain or bias is trained, one buffer of
    per-program partial sums added in one torch sum. Every buffer is `empty`."""

    @staticmethod
    def forward(ctx, gx, s, c, h, keep, gh, bh, gc, bc, spec, dtypes):
        gx, s, c, h = _rows(gx), _rows(s), _rows(c), _rows(h)
        n, hd = c.shape
        c_dtype, h_dtype = dtypes
        h_out = torch.empty((n, hd), dtype=h_dtype, device=c.device)
        c_out = torch.empty((n, hd), dtype=c_dtype, device=c.device)
        block, warps = _block(hd)[0], _block(4 * hd)[1]  # warps as for a 4H row: with H's, H = 1024 spilled
        if n > 0:
            _lstm_forward[(n,)](gx, s, c, h, keep, gh, bh, gc, bc, h_out, c_out, gx.stride(0), s.stride(0),
                                c.stride(0), h.stride(0), keep.stride(0), hd, *spec, BLOCK=block,
                                ACC=_acc(h_dtype)[1], num_warps=warps)
        ctx.save_for_backward(gx, s, c, h, keep, gh, bh, gc, bc)
        ctx.spec = spec
        return h_out, c_out

    @staticmethod
    def backward(ctx, dh_out, dc_out):
        gx, s, c, h, keep, gh, bh, gc, bc = ctx.saved_tensors
        n, hd = c.shape
        if not dh_out.is_contiguous():
            dh_out = dh_out.contiguous()
        if not dc_out.is_contiguous():
            dc_out = dc_out.contiguous()
        acc_torch, acc = _acc(dh_out.dtype)
        params = (gh, gc, bh, bc)
        trained = [p is not None and ctx.needs_input_grad[i] for p, i in zip(params, (5, 7, 6, 8))]
        programs = max(1, min(n, _backward_programs(c.device)))
        rows = -(-n // programs) if n else 1
        dgx = torch.empty((n, 4 * hd), dtype=gx.dtype, device=c.device)
        ds = torch.empty((n, 4 * hd), dtype=s.dtype, device=c.device)
        dc = torch.empty((n, hd), dtype=c.dtype, device=c.device)
        dh = torch.empty((n, hd), dtype=h.dtype, device=c.device)
        # the gains' and biases' per-program sums; with no rows no program runs and they are 0
        partial = ((torch.empty if n > 0 else torch.zeros)((programs, 10 * hd), dtype=acc_torch, device=c.device)
                   if any(trained) else None)
        block, warps = _block(hd)[0], _block(4 * hd)[1]
        if n > 0:
            _lstm_backward[(programs,)](dh_out, dc_out, gx, s, c, h, keep, gh, bh, gc, bc, dgx, ds, dc, dh, partial, n,
                                        rows, gx.stride(0), s.stride(0), c.stride(0), h.stride(0), keep.stride(0), hd,
                                        *ctx.spec,
                                        PARAMS=partial is not None, SATURATE=s.dtype == torch.float16, BLOCK=block,
                                        ACC=acc, num_warps=warps)
        dgh, dgc, dbh, dbc = triton_gru.parameter_gradients(partial, params, trained, [4 * hd, hd, 4 * hd, hd])
        return dgx, ds, dc, dh, None, dgh, dbh, dgc, dbc, None, None


def _norm_of(step_norm: nn.Module):
    """A step norm as a RowNorm where it is one norm for every step (SharedStepNorm), else None."""
    return row_norm(step_norm.norm) if isinstance(step_norm, SharedStepNorm) else None


def _fits(gx: torch.dtype, s: torch.dtype, c: torch.dtype, h: torch.dtype, params) -> tuple | None:
    """(c', h') dtypes as the op-by-op step returns them, where the kernel gives its results within
    rounding: gx, c and h of s's dtype or, beside bfloat16/float16 (autocast), float32; each gain and bias
    too. Else None."""
    wide = (s,) + ((torch.float32,) if s in formulas.LOW_PRECISION else ())
    if s not in DTYPES or gx not in wide or c not in wide or h not in wide:
        return None
    if any(p is not None and p.dtype not in wide for p in params):
        return None
    c_dtype = torch.promote_types(torch.promote_types(gx, s), c)
    return c_dtype, torch.promote_types(c_dtype, h)


def step_function(direction: nn.Module, h: Tensor) -> Callable | None:
    """For LSTMDirection's loop from h (B, H): f(gx, s, c, h, keep) -> (h', c') with gx (B, 4H) a step of the
    normalized input part, s = W_h h (B, 4H) and keep (B, 1) bool (False: a padded step, which keeps h and
    c), one launch each way, or None for a step whose shapes or dtypes it does not take; or None where the kernel
    does not apply at all (module docstring). The norms are read once per sequence, the dtypes once each."""
    if triton is None or not triton_gru.runs_on(h) or torch.compiler.is_compiling():
        return None
    n_h, n_c = _norm_of(direction.norm_h), _norm_of(direction.norm_c)
    if n_h is None or n_c is None:
        return None
    params = (n_h.gain, n_h.bias, n_c.gain, n_c.bias)
    spec = (n_h.k, n_c.k, n_h.eps, n_c.eps, MODES[n_h.kind], MODES[n_c.kind], n_h.eps_inside, n_c.eps_inside,
            n_h.gain is not None, n_h.bias is not None, n_c.gain is not None, n_c.bias is not None)
    seen: dict[tuple, tuple | None] = {}

    def step(gx: Tensor, s: Tensor, c: Tensor, h: Tensor, keep: Tensor) -> tuple[Tensor, Tensor] | None:
        if not triton_gru._rows_match(c, (gx, 4), (s, 4), (h, 1)) or keep.shape != (c.shape[0], 1):
            return None
        key = (gx.dtype, s.dtype, c.dtype, h.dtype)
        if key not in seen:
            seen[key] = _fits(*key, params)
        dtypes = seen[key]
        return None if dtypes is None else _LSTMStepFunction.apply(gx, s, c, h, keep, *params, spec, dtypes)

    return step
