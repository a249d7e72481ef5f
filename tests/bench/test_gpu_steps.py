"""The GPU check's per-step table (bench/gpu_steps.py), run here on CPU: fair timing (balanced order, an
untimed pass over the timed batches, GPU busy against the median step, each row's kernels from its own
model), the Triton kernels' row counts left unspecialised, the header's data."""
from __future__ import annotations

import pytest

triton = pytest.importorskip("triton", reason="Triton is not installed (it ships with CUDA builds of torch)")


def test_row_counts_do_not_specialise_the_triton_rmsnorm_kernels():
    """Triton compiles a kernel anew for an integer argument's divisibility by 16 (and for 1): the row count N
    (and the backward's rows a program) changes with every batch, so without this a step's first batch of a
    new class compiles inside a timed step."""
    from rmsnorm_repro.norms.fused import triton_rmsnorm

    for kernel, names in ((triton_rmsnorm._rmsnorm_forward, {"N"}), (triton_rmsnorm._rmsnorm_backward, {"N", "ROWS"})):
        unspecialised = {p.name for p in kernel.params if p.do_not_specialize}
        assert names <= unspecialised, (kernel.__name__, unspecialised)
