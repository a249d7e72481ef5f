"""Fused RMSNorm / pRMSNorm for CUDA in Triton: the same math as rmsnorm_cpu.cpp.

Kernels `_rmsnorm_forward` / `_rmsnorm_backward` (names the profiler shows: bench --profile).
Forward: one program per row; the row is loaded once, the statistic reads its first k features.
Backward: each program walks a block of rows, writes dx and keeps dgain/dbias partial sums in
registers; the host adds the per-program partials (deterministic, no atomics).
Statistics and sums run in float32 (float64 for float64 inputs). Under autocast the gain and bias
may be float32 beside bfloat16/float16 x: y and dx come out in x's dtype, dgain/dbias in theirs.

Tested on CPU with TRITON_INTERPRET=1 (tests/test_fused.py), where CPU tensors are accepted.
"""
from __future__ import annotations

import os

import torch
from torch import Tensor

from .. import formulas

try:
    import triton
    import triton.language as tl
except ImportError:  # the CPU-only install; available() says False
    triton = None

MAX_DIM = 65536  # one row must fit one program's block
DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


def available() -> bool:
    return triton is not None and (torch.cuda.is_available() or _interpreting())


def supports(x: Tensor) -> bool:
    return (x.is_cuda or _interpreting()) and x.dtype in DTYPES and 0 < x.shape[-1] <= MAX_DIM


if triton is not None:

    @triton.jit
    def _rmsnorm_forward(X, W, B, Y, SCALE, COEF, D, K, eps, EPS_INSIDE: tl.constexpr, HAS_W: tl.constexpr,
                 HAS_B: tl.constexpr, BLOCK: tl.constexpr, ACC: tl.constexpr):
        row = tl.program_id(0).to(tl.int64)
        cols = tl.arange(0, BLOCK)
        mask = cols < D
        x = tl.load(X + row * D + cols, mask=mask, other=0.0).to(ACC)
        head = tl.where(cols < K, x, 0.0)
        ms = tl.sum(head * head, axis=0) / K
        if EPS_INSIDE:
            s = 1.0 / tl.sqrt(ms + eps)
            c = s * s * s / K
        else:
            r = tl.sqrt(ms)
            s = 1.0 / (r + eps)
            # correction coefficient s^2 / (k RMS); its limit for an all-zero statistic is 0
            c = tl.where(r > 0, s * s / (K * tl.maximum(r, 1e-30)), 0.0)
        y = x * s
        if HAS_W:
            y = y * tl.load(W + cols, mask=mask, other=0.0).to(ACC)
        if HAS_B:
            y = y + tl.load(B + cols, mask=mask, other=0.0).to(ACC)
        tl.store(Y + row * D + cols, y.to(Y.dtype.element_ty), mask=mask)
        tl.store(SCALE + row, s)
        tl.store(COEF + row, c)

    @triton.jit
    def _rmsnorm_backward(DY, X, W, SCALE, COEF, DX, DWP, DBP, N, D, K, ROWS, HAS_W: tl.constexpr, HAS_DW: tl.constexpr,
                  HAS_DB: tl.constexpr, BLOCK: tl.constexpr, ACC: tl.constexpr):
        pid = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        mask = cols < D
        head = cols < K
        if HAS_W:
            w = tl.load(W + cols, mask=mask, other=0.0).to(ACC)
        else:
            w = tl.full([BLOCK], 1.0, ACC)
        dw = tl.zeros([BLOCK], ACC)
        db = tl.zeros([BLOCK], ACC)
        start = pid * ROWS
        for row in range(start, tl.minimum(start + ROWS, N)):
            offset = tl.cast(row, tl.int64) * D
            x = tl.load(X + offset + cols, mask=mask, other=0.0).to(ACC)
            dy = tl.load(DY + offset + cols, mask=mask, other=0.0).to(ACC)
            s = tl.load(SCALE + row)
            c = tl.load(COEF + row)
            dyx = dy * x
            total = tl.sum(w * dyx, axis=0)
            dx = s * w * dy - tl.where(head, c * total * x, 0.0)
            tl.store(DX + offset + cols, dx.to(DX.dtype.element_ty), mask=mask)
            if HAS_DW:
                dw += dyx * s
            if HAS_DB:
                db += dy
        if HAS_DW:
            tl.store(DWP + pid * D + cols, dw, mask=mask)
        if HAS_DB:
            tl.store(DBP + pid * D + cols, db, mask=mask)


def _acc(dtype: torch.dtype):
    return (torch.float64, tl.float64) if dtype == torch.float64 else (torch.float32, tl.float32)


def _block(d: int) -> tuple[int, int]:
    block = triton.next_power_of_2(d)
    return block, min(max(block // 256, 1), 16)  # BLOCK, num_warps


class _RMSNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, k, eps, eps_inside):
        shape, d = x.shape, x.shape[-1]
        x2 = x.reshape(-1, d).contiguous()
        n = x2.shape[0]
        acc_torch, acc_tl = _acc(x.dtype)
        y = torch.empty_like(x2)
        scale = torch.empty(n, dtype=acc_torch, device=x.device)
        coef = torch.empty(n, dtype=acc_torch, device=x.device)
        block, warps = _block(d)
        if n > 0:
            _rmsnorm_forward[(n,)](x2, weight, bias, y, scale, coef, d, k, eps, EPS_INSIDE=eps_inside,
                           HAS_W=weight is not None, HAS_B=bias is not None, BLOCK=block, ACC=acc_tl,
                           num_warps=warps)
        ctx.save_for_backward(x2, weight, scale, coef)
        ctx.k, ctx.shape = k, shape
        ctx.bias_dtype = None if bias is None else bias.dtype
        return y.view(shape)

    @staticmethod
    def backward(ctx, dy):
        x2, weight, scale, coef = ctx.saved_tensors
        n, d = x2.shape
        acc_torch, acc_tl = _acc(x2.dtype)
        dy2 = dy.reshape(-1, d).contiguous()
        need_dw = weight is not None and ctx.needs_input_grad[1]
        need_db = ctx.bias_dtype is not None and ctx.needs_input_grad[2]
        # enough programs to fill the GPU, each summing dgain over a block of rows
        programs = max(1, min(n, 4 * torch.cuda.get_device_properties(x2.device).multi_processor_count
                              if x2.is_cuda else 4))
        rows = triton.cdiv(n, programs) if n else 1
        dx = torch.empty_like(x2)
        dw_partial = torch.zeros(programs, d, dtype=acc_torch, device=x2.device) if need_dw else None
        db_partial = torch.zeros(programs, d, dtype=acc_torch, device=x2.device) if need_db else None
        block, warps = _block(d)
        if n > 0:
            _rmsnorm_backward[(programs,)](dy2, x2, weight, scale, coef, dx, dw_partial, db_partial, n, d, ctx.k, rows,
                                   HAS_W=weight is not None, HAS_DW=need_dw, HAS_DB=need_db, BLOCK=block,
                                   ACC=acc_tl, num_warps=warps)
        dw = dw_partial.sum(0).to(weight.dtype) if need_dw else None
        db = db_partial.sum(0).to(ctx.bias_dtype) if need_db else None
        return dx.view(ctx.shape), dw, db, None, None, None


def rms_norm(x: Tensor, weight: Tensor | None, bias: Tensor | None, k: int, eps: float, eps_inside: bool) -> Tensor:
    """RMSNorm/pRMSNorm over the last dimension with the statistic from the first k features."""
    if triton is None:
        raise RuntimeError("Triton is not installed: pip install triton (CUDA machines), or use norm.impl=reference")
    if not supports(x):
        raise ValueError(f"Triton rms_norm needs a CUDA tensor with a last dimension <= {MAX_DIM}, "
                         f"got {x.device} {tuple(x.shape)}")
    weight = None if weight is None else weight.contiguous()
    bias = None if bias is None else bias.contiguous()
    return _RMSNormFunction.apply(x, weight, bias, k, eps, eps_inside)


def rms_norm_or_reference(x: Tensor, weight: Tensor | None, bias: Tensor | None, k: int, eps: float,
                          eps_inside: bool) -> Tensor:
    """The Triton kernel where it takes x (see `supports`), else the reference formulas."""
    if supports(x):
        return rms_norm(x, weight, bias, k, float(eps), bool(eps_inside))
    return formulas.rms_norm(x, weight, bias, k, eps, eps_inside)
