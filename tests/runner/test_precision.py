"""train.precision: bf16 autocast trains every task on CPU (its norms return their input's dtype), fp16 (CUDA
only) is refused here in one line, bf16 on a CPU without bf16 matrix hardware warns, and the choice is
recorded in summary.json."""
from __future__ import annotations

import math

import pytest
import torch

from rmsnorm_repro.runner import ConfigError, run

from tiny_sizes import TINY, tiny_overrides


@pytest.mark.parametrize("name", ["bf16", "bf16-mixed"])
def test_bf16_trains_on_cpu_and_is_recorded(tmp_path, name, tiny_cfg):
    summary = run(tiny_cfg(f"train.precision={name}", "device=cpu"), tmp_path / "r")
    assert summary["status"] == "completed" and summary["env"]["precision"] == "bf16"
    assert summary["final"]["error"] < 0.5  # still learns


def test_bf16_autocast_really_runs_the_matmuls_in_bf16(tmp_path, monkeypatch, tiny_cfg):
    from runner_fixtures import tiny_task

    seen = []
    loss = tiny_task.TinyTask.loss

    def spy(self, model, batch):
        seen.append(model[0](batch[0]).dtype)
        return loss(self, model, batch)

    monkeypatch.setattr(tiny_task.TinyTask, "loss", spy)
    run(tiny_cfg("train.precision=bf16", "device=cpu", "train.steps=2"), tmp_path / "r")
    assert seen and all(d == torch.bfloat16 for d in seen)


@pytest.mark.parametrize("task", sorted(TINY))
def test_every_paper_task_takes_bf16_steps_with_its_norm_in_bf16(task, tmp_path, compose, monkeypatch):
    """Two bf16 steps and the evaluations of each task, with RMSNorm: the norm returns its input's dtype, bf16
    where autocast reached it; the run completes with finite metrics."""
    from rmsnorm_repro.norms import RMSNorm
    from rmsnorm_repro.norms.base import ChannelNorm

    seen = set()
    for cls in (RMSNorm, ChannelNorm):
        forward = cls.forward

        def spy(self, x, *args, _forward=forward, **kwargs):
            y = _forward(self, x, *args, **kwargs)
            if torch.is_grad_enabled():
                seen.add((x.dtype, y.dtype))
            return y

        monkeypatch.setattr(cls, "forward", spy)
    cfg = compose([f"task={task}", "norm=rmsnorm", f"paths.runs_dir={tmp_path}", *tiny_overrides(task),
                   "train.precision=bf16", "device=cpu"])
    summary = run(cfg, tmp_path / "r")
    assert summary["status"] == "completed" and summary["env"]["precision"] == "bf16"
    assert all(math.isfinite(v) for v in summary["final"].values() if isinstance(v, float))
    assert seen and all(x == y for x, y in seen)  # each norm returns its input's dtype
    # the Transformer's residual stream stays float32 (float32 embeddings + bf16 sublayer outputs), so its
    # post-norms see float32; every other task normalizes bf16 summed inputs
    assert (torch.bfloat16, torch.bfloat16) in seen or task == "transformer"


def test_fp16_on_cpu_and_unknown_names_are_one_line(tmp_path, tiny_cfg):
    with pytest.raises(ConfigError, match="train.precision=fp16 needs a CUDA device"):
        run(tiny_cfg("train.precision=fp16", "device=cpu"), tmp_path / "a")
    with pytest.raises(ConfigError, match="train.precision='fp8' is unknown"):
        run(tiny_cfg("train.precision=fp8", "device=cpu"), tmp_path / "b")
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="fp16 autocast and its GradScaler need CUDA")
def test_fp16_trains_on_cuda_and_checkpoints_its_scaler(tmp_path, tiny_cfg):
    from rmsnorm_repro.runner import checkpoint

    summary = run(tiny_cfg("train.precision=fp16", "device=cuda"), tmp_path / "r")
    assert summary["status"] == "completed" and summary["env"]["precision"] == "fp16"
    assert "scaler" in checkpoint.load(tmp_path / "r" / "checkpoints" / "last.pt")


def test_bf16_on_a_cpu_without_bf16_matmul_hardware_warns_in_one_line(monkeypatch, caplog):
    from rmsnorm_repro.runner import precision

    monkeypatch.setattr(precision, "cpu_bf16_matmul", lambda: None)
    with caplog.at_level("WARNING", logger=precision.__name__):
        assert precision.check("bf16", torch.device("cpu")) == "bf16"
    (record,) = caplog.records
    assert "neither AMX nor AVX512-BF16" in record.getMessage() and "train.precision=fp32" in record.getMessage()
    caplog.clear()
    monkeypatch.setattr(precision, "cpu_bf16_matmul", lambda: "amx")
    with caplog.at_level("WARNING", logger=precision.__name__):
        precision.check("bf16", torch.device("cpu"))
        precision.check("fp32", torch.device("cpu"))
    assert not caplog.records


def test_tf32_is_recorded_and_refused_when_not_a_bool(tmp_path, tiny_cfg):
    summary = run(tiny_cfg("device=cpu", "train.steps=2"), tmp_path / "r")
    assert summary["env"]["tf32"] is False  # on by default, but there is no TF32 on a CPU
    with pytest.raises(ConfigError, match="train.tf32 must be true or false, got 'yes'"):
        run(tiny_cfg("device=cpu", "train.tf32=yes"), tmp_path / "b")


@pytest.mark.parametrize("enabled,mode", [(True, "tf32"), (False, "ieee")])
def test_tf32_sets_cudas_fp32_products_and_convolutions(enabled, mode):
    """On a CUDA device (its flags set, nothing run: no GPU here), restored afterwards."""
    from rmsnorm_repro.runner import precision

    matmul, conv = torch.backends.cuda.matmul, torch.backends.cudnn.conv
    before = matmul.fp32_precision, conv.fp32_precision
    try:
        assert precision.apply_tf32(enabled, torch.device("cuda")) is enabled
        assert (matmul.fp32_precision, conv.fp32_precision) == (mode, mode)
        assert precision.tf32_in_effect(torch.device("cuda")) is enabled
    finally:
        matmul.fp32_precision, conv.fp32_precision = before
    assert precision.apply_tf32(True, torch.device("cpu")) is False and not precision.tf32_in_effect(torch.device("cpu"))
