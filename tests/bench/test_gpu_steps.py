"""The GPU check's per-step table (bench/gpu_steps.py), run here on CPU: fair timing (balanced order, an
untimed pass over the timed batches, GPU busy against the median step, each row's kernels from its own
model), the Triton kernels' row counts left unspecialised, the header's data."""
from __future__ import annotations

import pytest
import torch

triton = pytest.importorskip("triton", reason="Triton is not installed (it ships with CUDA builds of torch)")


def test_row_counts_do_not_specialise_the_triton_rmsnorm_kernels():
    """Triton compiles a kernel anew for an integer argument's divisibility by 16 (and for 1): the row count N
    (and the backward's rows a program) changes with every batch, so without this a step's first batch of a
    new class compiles inside a timed step."""
    from rmsnorm_repro.norms.fused import triton_rmsnorm

    for kernel, names in ((triton_rmsnorm._rmsnorm_forward, {"N"}), (triton_rmsnorm._rmsnorm_backward, {"N", "ROWS"})):
        unspecialised = {p.name for p in kernel.params if p.do_not_specialize}
        assert names <= unspecialised, (kernel.__name__, unspecialised)


class _Run:
    """Stands in for bench.steps.StepRun: a model, its task's batches, its config's data."""

    def __init__(self, model):
        from types import SimpleNamespace

        from omegaconf import OmegaConf

        self.model, self.batch, self.precision = model, ["train.batch_size=2"], None
        self.cfg = OmegaConf.create({"data": {"name": "synthetic"}})
        self.task = SimpleNamespace(train_batch=lambda b: {"src": torch.zeros(2, 3 + b), "n": 2}, vocab=list(range(7)))


def test_a_task_x_precision_block_times_fairly(monkeypatch):
    """The norms take turns in balanced order on the same batches, an untimed pass over exactly those batches
    first; the rows' times are the timed pass's only; GPU busy is the profiled step's device time over the median
    unprofiled step; each row's impl names the kernels of its own model, not the process's; the rows say the
    data, vocabulary and batch shapes."""
    from rmsnorm_repro.bench import gpu_steps
    from rmsnorm_repro.bench.steps import balanced_order
    from rmsnorm_repro.norms import ChannelNorm, RMSNorm
    from rmsnorm_repro.norms.rmsnorm import RowRMSNorm

    RMSNorm(4, impl="reference")(torch.ones(2, 4))  # another model's kernel in this process
    models = {"none": torch.nn.Identity(), "layernorm": torch.nn.LayerNorm(4), "rmsnorm": RMSNorm(4),
              "prmsnorm": torch.nn.Sequential(RMSNorm(4, p=0.5, impl="reference"),
                                              torch.nn.Unflatten(1, (1, 2, 2)), ChannelNorm(1, RowRMSNorm(1.0, 1e-8, False, "reference")))}
    runs = {norm: _Run(model) for norm, model in models.items()}
    calls, clock = [], iter(range(1, 1000))

    def one_step(run, batch):
        norm = next(n for n, r in runs.items() if r is run)
        calls.append((norm, batch))
        loss = run.model(torch.ones(2, 4)).sum()
        return loss, float(next(clock))

    monkeypatch.setattr(gpu_steps, "one_step", one_step)
    monkeypatch.setattr(gpu_steps, "kernels", lambda stmt, device: (stmt(), (7, 500.0))[1])
    budget = gpu_steps.Budget(lambda: 100.0)
    rows = gpu_steps.precision_block(runs, "fp32", "cpu", 4, budget, "transformer")
    norms = list(models)
    order = [(n, 1 + i) for i in range(4) for n in balanced_order(norms, i)]
    assert calls[:16] == order and calls[16:32] == order  # the untimed pass, then the timed one
    assert sorted(calls[32:]) == sorted((n, 1) for n in norms)  # one profiled step each
    by = {r["norm"]: r for r in rows}
    for norm in norms:
        timed = [float(17 + k) for k, call in enumerate(calls[16:32]) if call[0] == norm]
        assert by[norm]["times_ms"] == timed and by[norm]["steps"] == 4
        assert by[norm]["busy"] == pytest.approx(500.0 / (sorted(timed)[1:3][0] / 2 + sorted(timed)[1:3][1] / 2) / 1e3)
        assert by[norm]["kernels"] == 7 and by[norm]["loss_finite"]
    assert by["none"]["impl"] == by["layernorm"]["impl"] == "-"
    assert by["rmsnorm"]["impl"] == models["rmsnorm"].kernel_name and by["prmsnorm"]["impl"] == "reference"
    assert by["rmsnorm"]["data"] == "data=synthetic, vocabulary 7" and by["rmsnorm"]["batch_shapes"] == "src 2x4-7"
    assert budget.step_s["transformer"] > 0
    lines = gpu_steps.markdown(rows, {})
    assert "- transformer: data=synthetic, vocabulary 7; batches' tensors src 2x4-7" in lines


def test_verdicts_say_the_target_and_the_paper():
    from rmsnorm_repro.bench import gpu_steps

    row = {"task": "transformer", "precision": "bf16", "norm": "rmsnorm", "vs_layernorm": 0.85,
           "paper_vs_layernorm": {"Table 4": 0.9}}
    (line,) = gpu_steps.verdicts([row])
    assert "rmsnorm / layernorm 0.85 (paper: 0.90 (Table 4)): faster than LayerNorm, as in the paper" in line
    assert line.endswith("target <= 0.90: holds")


def test_a_block_that_does_not_fit_is_skipped_and_named(monkeypatch):
    from rmsnorm_repro.bench import gpu_steps

    monkeypatch.setattr(gpu_steps, "StepRun", lambda *a, **k: pytest.fail("a model was built past the deadline"))
    done = []
    gpu_steps.task_blocks("reader", "cpu", ["rmsnorm"], ("fp32",), 8, 1.0, [], gpu_steps.Budget(lambda: 10.0),
                          lambda precision, rows, error: done.append((precision, rows, error)), log=lambda *a: None)
    ((precision, rows, error),) = done
    assert precision == "fp32" and not rows and error.startswith("skipped: its estimate") and "10 s left" in error
