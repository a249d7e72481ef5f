"""Fused RMSNorm / pRMSNorm for CUDA in Triton: the same math as rmsnorm_cpu.cpp.

Kernels `_rmsnorm_forward` / `_rmsnorm_backward` (names the profiler shows: bench --profile).
Forward: one program per row; the row is loaded once, the statistic reads its first k features.
Backward: each program walks a block of rows, writes dx and keeps dgain/dbias partial sums in
registers; the host adds the per-program partials in one sum (deterministic, no atomics).
Statistics and sums run in float32 (float64 for float64 inputs). Under autocast the gain and bias
may be float32 beside bfloat16/float16 x: y and dx come out in x's dtype, dgain/dbias in theirs.

Tested on CPU with TRITON_INTERPRET=1 (tests/test_fused.py), where CPU tensors are accepted.
"""
from __future__ import annotations

import os
from functools import lru_cache

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
    # a global a kernel reads must be a constexpr: compiled for a GPU, a plain float fails to build the kernel
    # (the interpreter reads it anyway; tests/norms/fused/test_triton_rmsnorm.py compiles it for sm_90)
    FLOAT16_MAX = tl.constexpr(formulas.FLOAT16_MAX)

    # N and ROWS (rows of a batch, rows a program) change with every batch: Triton would compile anew for each
    # divisibility class (by 16, or 1) of them, inside a training step; D and K are fixed per model
    @triton.jit(do_not_specialize=["N"])
    def _rmsnorm_forward(X, W, B, Y, STATS, N, D, K, eps, EPS_INSIDE: tl.constexpr, HAS_W: tl.constexpr,
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
        tl.store(STATS + row, s)  # STATS: (2, N), scale then coefficient
        tl.store(STATS + N + row, c)

    @triton.jit(do_not_specialize=["N", "ROWS"])
    def _rmsnorm_backward(DY, X, W, STATS, DX, PARTIAL, N, D, K, ROWS, HAS_W: tl.constexpr, HAS_DW: tl.constexpr,
                  HAS_DB: tl.constexpr, BLOCK: tl.constexpr, ACC: tl.constexpr, SATURATE: tl.constexpr):
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
            s = tl.load(STATS + row)
            c = tl.load(STATS + N + row)
            dyx = dy * x
            total = tl.sum(w * dyx, axis=0)
            dx = s * w * dy - tl.where(head, c * total * x, 0.0)
            if SATURATE:  # float16 dx: an all-zero row's gradient clamped, not inf (formulas.saturate_zero_rows)
                zero_row = tl.max(tl.where(head, tl.abs(x), 0.0), axis=0) == 0
                dx = tl.where(zero_row, tl.minimum(tl.maximum(dx, -FLOAT16_MAX), FLOAT16_MAX), dx)
            tl.store(DX + offset + cols, dx.to(DX.dtype.element_ty), mask=mask)
            if HAS_DW:
                dw += dyx * s
            if HAS_DB:
                db += dy
        # PARTIAL: (programs, HAS_DW + HAS_DB, D), dgain's partial sums before dbias's
        sums = HAS_DW + HAS_DB
        if HAS_DW:
            tl.store(PARTIAL + pid * sums * D + cols, dw, mask=mask)
        if HAS_DB:
            tl.store(PARTIAL + (pid * sums + HAS_DW) * D + cols, db, mask=mask)


def _acc(dtype: torch.dtype):
    return (torch.float64, tl.float64) if dtype == torch.float64 else (torch.float32, tl.float32)


@lru_cache(maxsize=None)
def _block(d: int) -> tuple[int, int]:
    """(BLOCK, num_warps) for rows of d features; cached: triton.next_power_of_2 is a constexpr function
    whose call costs microseconds of host time."""
    block = 1 << max(d - 1, 0).bit_length()
    return block, min(max(block // 256, 1), 16)


@lru_cache(maxsize=None)
def _backward_programs(device: torch.device) -> int:
    """Programs of the backward: enough to fill the GPU (4 per multiprocessor), each summing dgain over a
    block of rows. Cached per device: get_device_properties is a driver query, not free per call."""
    if device.type != "cuda":
        return 4  # the interpreter (TRITON_INTERPRET=1) on CPU tensors
    return 4 * torch.cuda.get_device_properties(device).multi_processor_count


class _RMSNormFunction(torch.autograd.Function):
    """Per call: forward allocates y and one (2, n) buffer of statistics (scale, correction
    coefficient) and saves x, gain and that buffer; backward allocates dx and one buffer of per-program
    partial sums (dgain and dbias side by side), and adds the partials in one torch sum. Every buffer is
    `empty`: each program writes all of its part. dx gets a buffer of its own, not dy's as in Liger-Kernel:
    whether anything else holds dy (a hook, another branch, the caller) shows only in torch-internal use
    counts, which from a Python Function differed between two graphs handing over equally fresh
    gradients; overwriting a gradient someone keeps would be silently wrong (the CPU kernel checks
    them in C++: rmsnorm_cpu.cpp owns_dense_buffer)."""

    @staticmethod
    def forward(ctx, x, weight, bias, k, eps, eps_inside):
        shape, d = x.shape, x.shape[-1]
        x2 = x.reshape(-1, d)
        if not x2.is_contiguous():
            x2 = x2.contiguous()
        if weight is not None and not weight.is_contiguous():
            weight = weight.contiguous()
        if bias is not None and not bias.is_contiguous():
            bias = bias.contiguous()
        n = x2.shape[0]
        acc_torch, acc_tl = _acc(x.dtype)
        y = torch.empty_like(x2)
        stats = torch.empty((2, n), dtype=acc_torch, device=x.device)  # scale, coef
        block, warps = _block(d)
        if n > 0:
            _rmsnorm_forward[(n,)](x2, weight, bias, y, stats, n, d, k, eps, EPS_INSIDE=eps_inside,
                                   HAS_W=weight is not None, HAS_B=bias is not None, BLOCK=block, ACC=acc_tl,
                                   num_warps=warps)
        ctx.save_for_backward(x2, weight, stats)
        ctx.k, ctx.shape = k, shape
        ctx.bias_dtype = None if bias is None else bias.dtype
        return y.view(shape)

    @staticmethod
    def backward(ctx, dy):
        x2, weight, stats = ctx.saved_tensors
        n, d = x2.shape
        acc_torch, acc_tl = _acc(x2.dtype)
        dy2 = dy.reshape(-1, d)
        if not dy2.is_contiguous():
            dy2 = dy2.contiguous()
        need_dw = weight is not None and ctx.needs_input_grad[1]
        need_db = ctx.bias_dtype is not None and ctx.needs_input_grad[2]
        programs = max(1, min(n, _backward_programs(x2.device)))
        rows = -(-n // programs) if n else 1  # ceil(n / programs)
        dx = torch.empty_like(x2)
        sums = int(need_dw) + int(need_db)
        partial = torch.empty((programs, sums, d), dtype=acc_torch, device=x2.device) if sums else None
        block, warps = _block(d)
        if n > 0:
            _rmsnorm_backward[(programs,)](dy2, x2, weight, stats, dx, partial, n, d, ctx.k, rows,
                                           HAS_W=weight is not None, HAS_DW=need_dw, HAS_DB=need_db, BLOCK=block,
                                           ACC=acc_tl, SATURATE=x2.dtype == torch.float16, num_warps=warps)
        dw = db = None
        if sums:
            param_dtype = weight.dtype if need_dw else ctx.bias_dtype
            if n == 0:
                total = torch.zeros((sums, d), dtype=param_dtype, device=x2.device)
            elif param_dtype == acc_torch:
                total = partial.sum(0)
            else:  # summed in the accumulation dtype, rounded once
                total = partial.sum(0).to(param_dtype)
            dw = total[0] if need_dw else None
            db = total[-1] if need_db else None
        return dx.view(ctx.shape), dw, db, None, None, None


def rms_norm_unchecked(x: Tensor, weight: Tensor | None, bias: Tensor | None, k: int, eps: float,
                       eps_inside: bool) -> Tensor:
    """What the dispatch runs (norms/fused `kernel`): the arguments were checked when the kernel was
    chosen (a CUDA tensor of a dtype in DTYPES, a last dimension <= MAX_DIM, eps a float), so a call is
    the Function's and nothing else."""
    return _RMSNormFunction.apply(x, weight, bias, k, eps, eps_inside)


def rms_norm(x: Tensor, weight: Tensor | None, bias: Tensor | None, k: int, eps: float, eps_inside: bool) -> Tensor:
    """RMSNorm/pRMSNorm over the last dimension with the statistic from the first k features (checked:
    for callers outside the dispatch, such as the GPU check)."""
    if triton is None:
        raise RuntimeError("Triton is not installed: pip install triton (CUDA machines), or use norm.impl=reference")
    if not supports(x):
        raise ValueError(f"Triton rms_norm needs a CUDA tensor with a last dimension <= {MAX_DIM}, "
                         f"got {x.device} {tuple(x.shape)}")
    return _RMSNormFunction.apply(x, weight, bias, k, float(eps), bool(eps_inside))
