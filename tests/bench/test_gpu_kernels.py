"""The GPU check's kernel table (bench/gpu_kernels.py), run here on CPU: every row's gradients reset alike,
its targets."""
from __future__ import annotations

import torch

from rmsnorm_repro.bench import gpu_kernels


def test_no_row_accumulates_into_a_gradient(monkeypatch):
    """A module's fwd+bwd row used to keep its weight.grad from call to call (one more kernel, an add, on those
    rows only): every parameter a row's module owns is cleared after each call, as x's, w's and b's are."""
    owned = []
    implementations = gpu_kernels.implementations

    def spy(d, device, dtype):
        made = implementations(d, device, dtype)
        owned.extend(p for _, params in made.values() for p in params)
        return made

    monkeypatch.setattr(gpu_kernels, "implementations", spy)
    names = ["suite RMSNorm module", "suite pRMSNorm module 6.25%", "suite RMSNorm module, eps inside"]
    rows = gpu_kernels.kernel_block("cpu", 4, 16, torch.float32, rounds=1, block_s=0.001, names=names)
    assert {r["impl"] for r in rows} == {*names, "torch layer_norm"}
    assert len(owned) == 3 and all(p.grad is None for p in owned)


def test_targets_name_both_rmsnorm_modules():
    row = {"dtype": "bfloat16", "shape": "80x2048", "mode": "fwd+bwd", "vs_layer_norm": 0.8, "vs_torch_rms_norm": 1.1}
    lines = gpu_kernels.targets([{**row, "impl": "suite RMSNorm module"},
                                 {**row, "impl": "suite RMSNorm module, eps inside", "vs_torch_rms_norm": 1.0},
                                 {**row, "impl": "torch layer_norm"}, {**row, "mode": "fwd", "impl": "suite RMSNorm module"}])
    assert lines == ["- bfloat16 80x2048: suite RMSNorm module 0.80x F.layer_norm (target <= 0.9x: holds), 1.10x F.rms_norm "
                     "(target <= 1.05x: does not hold)",
                     "- bfloat16 80x2048: suite RMSNorm module, eps inside 0.80x F.layer_norm (target <= 0.9x: holds), "
                     "1.00x F.rms_norm (target <= 1.05x: holds)"]
