"""The training runner in-process: outputs, resume, divergence, budget, bad input, schedules, wandb.

Runs use the tiny task of tests/runner_fixtures (an MLP on Gaussian blobs, < 1 s a run); the CLI
(exit codes, signals, multirun) is tested in test_cli.py.
"""
from __future__ import annotations

import json
import math
import sys
import types
from datetime import datetime, timezone

import pytest
import torch
from omegaconf import OmegaConf

from rmsnorm_repro import record
from rmsnorm_repro.runner import ConfigError, run
from rmsnorm_repro.runner import checkpoint
from rmsnorm_repro.runner.files import MetricsFile
from rmsnorm_repro.runner.wandb_logger import wandb_settings
from rmsnorm_repro.runner.optim import beta1_switch, build_optimizer, lr_factor
from runner_fixtures.helpers import read_metrics, read_summary

# The contract of README "What one run writes"
SUMMARY_KEYS = {"task", "norm", "p", "seed", "status", "steps", "step_ms_median", "step_ms_mean",
                "s_per_1k_steps", "final", "best", "env", "ended_utc"}


def test_a_run_writes_the_contract_files_and_learns(tmp_path, tiny_cfg):
    cfg = tiny_cfg("norm=rmsnorm")
    before = datetime.now(timezone.utc).replace(microsecond=0)
    summary = run(cfg, tmp_path / "run")
    assert before <= record.ended_utc(summary) <= datetime.now(timezone.utc)  # when it ended, by the clock
    run_dir = tmp_path / "run"
    assert (run_dir / "checkpoints" / "last.pt").exists()
    assert OmegaConf.load(run_dir / "config.yaml").norm.name == "rmsnorm"
    assert read_summary(run_dir) == json.loads(json.dumps(summary))
    assert SUMMARY_KEYS <= set(summary)
    assert (summary["task"], summary["norm"], summary["p"], summary["seed"]) == ("tiny", "rmsnorm", 1.0, 1)
    assert summary["status"] == "completed" and summary["steps"] == 40
    # the paper's s/1k steps from the median step (robust to a slow step), with its spread
    assert 0 < summary["step_ms_mean"] and 0 < summary["step_ms_median"] == summary["s_per_1k_steps"]
    assert summary["step_ms_q1"] <= summary["step_ms_median"] <= summary["step_ms_q3"]
    assert summary["examples_per_s"] > 0
    assert {"torch", "device", "threads", "impl", "compile"} <= set(summary["env"])
    assert summary["env"]["norm"]["name"] == "rmsnorm" and summary["env"]["compile"] is False
    # allocator=tuned (the default) holds wherever glibc is the C library
    assert summary["env"]["allocator"] == "tuned" or summary["env"]["allocator"].startswith("default (not glibc")
    # final = test metrics + the last validation metrics; best = the best validation (min error)
    assert {"error", "accuracy", "loss", "valid_error", "valid_accuracy", "valid_loss"} == set(summary["final"])
    assert summary["best"]["step"] in (20, 40)

    lines = read_metrics(run_dir)
    assert [r["step"] for r in lines] == [5, 10, 15, 20, 25, 30, 35, 40]  # log_every 5
    assert all({"step", "wall_s", "loss", "step_ms", "lr", "examples_per_s"} <= set(r) for r in lines)
    evals = [r for r in lines if "error" in r]
    assert [r["step"] for r in evals] == [20, 40]  # eval_every 20; eval "loss" is renamed valid_loss
    assert all("valid_loss" in r for r in evals)
    # chance error with 4 classes is 0.75; the tiny task is learnable
    assert summary["final"]["error"] < 0.4 and lines[-1]["loss"] < lines[0]["loss"]


def test_window_loss_is_the_loss_per_unit_since_the_previous_line(tmp_path, tiny_cfg):
    """window_loss (the paper's Figure 1 quantity, Nematus' displayed Loss/word) at a line = the summed loss of
    the steps since the previous line over their units; the same run logged every step shows each step's."""
    run(tiny_cfg("train.log_every=1", "train.steps=20"), tmp_path / "every")
    run(tiny_cfg("train.log_every=5", "train.steps=20"), tmp_path / "fifth")
    every, fifth = read_metrics(tmp_path / "every"), read_metrics(tmp_path / "fifth")
    loss = {r["step"]: r["loss"] for r in every}
    assert all(r["window_loss"] == pytest.approx(r["loss"]) for r in every)
    for r in fifth:  # equal batches: the plain mean of the window's step losses
        assert r["window_loss"] == pytest.approx(sum(loss[s] for s in range(r["step"] - 4, r["step"] + 1)) / 5, rel=1e-6)


def test_the_final_outputs_are_kept_one_line_each(tmp_path, tiny_cfg, monkeypatch):
    """What a task's test evaluation produced for later comparisons (translations) lands in outputs/<name>.txt."""
    from runner_fixtures.tiny_task import TinyTask

    monkeypatch.setattr(TinyTask, "test_outputs", lambda self: {"valid": ["ein Hund", "zwei\nZeilen"], "test": []})
    run(tiny_cfg(), tmp_path / "run")
    assert (tmp_path / "run" / "outputs" / "valid.txt").read_text() == "ein Hund\nzwei Zeilen\n"
    assert (tmp_path / "run" / "outputs" / "test.txt").read_text() == ""


def test_resume_continues_exactly_where_a_run_stopped(tmp_path, tiny_cfg):
    straight = run(tiny_cfg("train.steps=40"), tmp_path / "straight")
    first = run(tiny_cfg("train.steps=20"), tmp_path / "split")
    assert first["steps"] == 20
    resumed = run(tiny_cfg("train.steps=40"), tmp_path / "split")  # a larger budget: allowed
    assert resumed["final"] == straight["final"] and resumed["best"] == straight["best"]
    assert resumed["steps"] == 40 and resumed["status"] == "completed"
    assert [r["step"] for r in read_metrics(tmp_path / "split")] == [5, 10, 15, 20, 25, 30, 35, 40]
    losses = lambda d: [r["loss"] for r in read_metrics(d)]  # noqa: E731
    assert losses(tmp_path / "split") == losses(tmp_path / "straight")
    # the step times of both segments count, minus one warm-up step per start
    ckpt = checkpoint.load(tmp_path / "split" / "checkpoints" / "last.pt")
    assert ckpt["step_ms"].numel() == 38


def test_rerunning_a_finished_run_changes_nothing(tmp_path, tiny_cfg):
    cfg = tiny_cfg()
    first = run(cfg, tmp_path / "r")
    metrics = (tmp_path / "r" / "metrics.jsonl").read_text()
    again = run(cfg, tmp_path / "r")
    assert again["final"] == first["final"] and again["steps"] == 40
    assert (tmp_path / "r" / "metrics.jsonl").read_text() == metrics


def test_resume_with_another_config_is_refused_and_leaves_the_run_alone(tmp_path, tiny_cfg):
    run(tiny_cfg("train.steps=10"), tmp_path / "r")
    before = {p.name: p.read_bytes() for p in (tmp_path / "r").iterdir() if p.is_file()}
    with pytest.raises(ConfigError, match=r"another config \(optim.lr: 0.01 -> 0.1\).*separate run.*hydra.run.dir=<new folder>.*kept$"):
        run(tiny_cfg("train.steps=10", "optim.lr=0.1"), tmp_path / "r")
    assert {p.name: p.read_bytes() for p in (tmp_path / "r").iterdir() if p.is_file()} == before


def test_lowering_the_budget_below_the_checkpoint_is_refused(tmp_path, tiny_cfg):
    run(tiny_cfg("train.steps=20"), tmp_path / "r")
    with pytest.raises(ConfigError, match="at step 20 but train.steps=10"):
        run(tiny_cfg("train.steps=10"), tmp_path / "r")


def test_nan_loss_stops_the_run_as_diverged(tmp_path, tiny_cfg):
    summary = run(tiny_cfg("norm=none", "optim.lr=1e30"), tmp_path / "r")
    assert summary["status"] == "diverged" and summary["steps"] < 40
    assert summary["diverged_at"] == summary["steps"]
    assert read_summary(tmp_path / "r")["status"] == "diverged"
    last = read_metrics(tmp_path / "r")[-1]
    assert last["step"] == summary["steps"] and last["loss"] is None  # strict JSON: NaN/inf -> null
    assert "error" not in summary["final"]  # no test evaluation of a diverged model


def test_wall_clock_budget_stops_cleanly(tmp_path, tiny_cfg):
    summary = run(tiny_cfg("train.max_minutes=0.003", "task.sleep_ms=20", "train.steps=1000"), tmp_path / "r")
    assert summary["status"] == "completed" and 1 <= summary["steps"] < 1000
    assert "error" in summary["final"]  # a finished run: tested at the end
    assert checkpoint.load(tmp_path / "r" / "checkpoints" / "last.pt")["step"] == summary["steps"]


def test_a_crash_writes_status_failed_and_finishes_wandb(tmp_path, monkeypatch, tiny_cfg):
    calls = []

    class FakeRun:
        summary: dict = {}

        def log(self, record, step):
            calls.append(("log", step))

        def finish(self, exit_code=0):
            calls.append(("finish", exit_code))

    fake = types.SimpleNamespace(init=lambda **kw: calls.append(("init", kw)) or FakeRun())
    monkeypatch.setitem(sys.modules, "wandb", fake)
    cfg = tiny_cfg("task.crash_at=3", "logger=wandb", "logger.mode=offline", "+extra.api_key=hunter2hunter2")
    with pytest.raises(RuntimeError, match="crashes at step 3"):
        run(cfg, tmp_path / "r", experiment="table9")
    assert calls[-1] == ("finish", 1)
    init = calls[0][1]
    assert init["mode"] == "offline" and init["group"] == "table9" and init["name"] == "rmsnorm-s1"
    assert {"task:tiny", "scale:mini", "norm:rmsnorm"} <= set(init["tags"])
    assert init["config"]["extra"]["api_key"] == "<redacted>" and init["config"]["optim"]["lr"] == 0.01
    summary = read_summary(tmp_path / "r")
    assert summary["status"] == "failed" and summary["steps"] == 3 and "crashes at step 3" in summary["error"]
    assert "hunter2" not in (tmp_path / "r" / "config.yaml").read_text()


def test_wandb_online_without_a_key_fails_before_anything_runs(tmp_path, monkeypatch, tiny_cfg):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc
    monkeypatch.setenv("NETRC", str(tmp_path / "none"))
    monkeypatch.setenv("WANDB_MODE", "online")
    with pytest.raises(ConfigError, match="wandb online mode needs an API key.*wandb login"):
        run(tiny_cfg("logger=wandb"), tmp_path / "r")
    assert not (tmp_path / "r" / "config.yaml").exists()


def test_wandb_name_group_and_p(compose):
    cfg = compose(["task=tiny", "norm=prmsnorm", "seed=3", "logger=wandb"])
    s = wandb_settings(cfg, {}, None)
    assert (s["name"], s["group"]) == ("prmsnorm-p0.0625-s3", "tiny")


@pytest.mark.parametrize("overrides, message", [
    (["norm=rmsnorm", "norm.p=0"], r"norm.p must be a finite number in \(0, 1\], got 0"),
    (["norm=prmsnorm", "norm.p=1.5"], r"norm.p must be a finite number in \(0, 1\], got 1.5"),
    (["train.steps=abc"], "train.steps must be an integer >= 1, got 'abc'"),
    (["train.steps=0"], "train.steps must be an integer >= 1, got 0"),
    (["optim.schedule.name=cosine"], "optim.schedule.name='cosine' is unknown; choose one of: constant, inverse_sqrt, linear_decay"),
    (["optim.name=sgd"], "optim.name='sgd' is unknown; choose one of: adam, adamw"),
    (["task.class_path=null", "task.name=nosuch"], "unknown task 'nosuch'; choose one of: convpool"),
    (["task.class_path=runner_fixtures.tiny_task:TinyStrictTask", "norm=batchnorm"],
     "norm=batchnorm: norm=batchnorm is not supported by task=tiny; supported: none, layernorm, rmsnorm"),
    (["data=tinyreal"], "data=tinyreal is not supported by task=tiny; supported: synthetic"),
    (["task.class_path=runner_fixtures.tiny_task:TinyStrictTask", "data=tinyreal", "paths.data_dir=/nonexistent"],
     "data.root=/nonexistent/tinyreal does not exist: put the tinyreal files there or point data.root at them"),
    (["device=tpu"], "device='tpu' is unknown; choose auto, cpu, cuda or cuda:<index>"),
    (["allocator=jemalloc"], "allocator='jemalloc' is unknown; choose one of: tuned, default"),
])
def test_bad_input_is_one_clear_line_and_writes_nothing(tmp_path, overrides, message, tiny_cfg):
    with pytest.raises(ConfigError, match=message) as info:
        run(tiny_cfg(*overrides), tmp_path / "r")
    assert "\n" not in str(info.value)
    assert not (tmp_path / "r").exists() or not any((tmp_path / "r").iterdir())


def test_schedules():
    def factors(**schedule):
        sched = OmegaConf.create({"name": "constant", "warmup_steps": 0, "decay_start": 0.5,
                                  "beta1_after_decay": None, **schedule})
        f = lr_factor(sched, 100)
        return [f(s) for s in range(100)]

    assert factors() == [1.0] * 100
    warm = factors(warmup_steps=4)
    assert warm[:5] == [0.25, 0.5, 0.75, 1.0, 1.0]
    inv = factors(name="inverse_sqrt", warmup_steps=4)
    assert inv[:4] == [0.25, 0.5, 0.75, 1.0] and inv[15] == pytest.approx(math.sqrt(4 / 16))
    lin = factors(name="linear_decay", decay_start=0.5)
    assert lin[:51] == [1.0] * 51 and lin[75] == pytest.approx(0.5) and lin[99] == pytest.approx(0.02)


def test_beta1_drops_when_the_decay_starts_and_the_schedule_resumes():
    optim = OmegaConf.create({"name": "adam", "lr": 1.0, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.0,
                              "schedule": {"name": "linear_decay", "warmup_steps": 0, "decay_start": 0.5,
                                           "beta1_after_decay": 0.5}})
    opt = build_optimizer([torch.nn.Parameter(torch.zeros(1))], optim)
    switch = beta1_switch(opt, optim, 10)
    switch(4)
    assert opt.param_groups[0]["betas"] == (0.9, 0.999)
    switch(5)
    assert opt.param_groups[0]["betas"] == (0.5, 0.999)


def test_checkpoint_loads_with_weights_only_and_restores_rng(tmp_path):
    torch.manual_seed(0)
    import random

    import numpy as np

    state = checkpoint.rng_state()
    expected = (random.random(), np.random.rand(), torch.rand(1).item())
    checkpoint.save(tmp_path / "c.pt", {"rng": state, "step": 3})
    loaded = checkpoint.load(tmp_path / "c.pt")  # torch.load(weights_only=True) inside
    checkpoint.set_rng_state(loaded["rng"])
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == expected
    assert not (tmp_path / "c.pt.tmp").exists()


def test_metrics_file_truncates_to_the_checkpoint_and_drops_a_torn_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 5}\n{"step": 10}\n{"step": 15}\n{"ste')
    MetricsFile(path, resume_step=10).close()
    assert path.read_text() == '{"step": 5}\n{"step": 10}\n'


def test_launcher_and_logger_groups_compose(compose):
    cfg = compose(["task=tiny", "launcher=joblib", "logger=wandb"], hydra_node=True)
    assert cfg.hydra.launcher._target_.endswith("JoblibLauncher")
    assert cfg.logger.name == "wandb" and cfg.logger.mode is None
    basic = compose(["task=tiny"], hydra_node=True)
    assert basic.hydra.launcher._target_.endswith("BasicLauncher")
    assert basic.hydra.run.dir == "results/runs/tiny/synthetic-mini/rmsnorm-p1.0-s1"


def test_eps_inside_adam_is_salimans_update():
    """weight_norm nn.py:73-90, by hand in float64: m, v with bias corrections by the current betas,
    p -= lr * m_hat / sqrt(v_hat + eps); beta1 lowered to 0.5 from step 3 as the CIFAR protocol does."""
    from omegaconf import OmegaConf

    optim = OmegaConf.create({"name": "adam", "lr": 0.1, "betas": [0.9, 0.999], "eps": 1e-3, "eps_inside": True,
                              "weight_decay": 0.0})
    p = torch.nn.Parameter(torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64))
    opt = build_optimizer([p], optim)
    grads = [[0.3, -0.02, 1.5], [0.1, 0.04, -2.0], [-0.2, 0.0, 0.7], [0.05, -0.01, 0.3]]
    want, m, v = [0.5, -1.0, 2.0], [0.0] * 3, [0.0] * 3
    for t, g in enumerate(grads, start=1):
        b1 = 0.9 if t < 3 else 0.5
        opt.param_groups[0]["betas"] = (b1, 0.999)
        for i in range(3):
            m[i] = b1 * m[i] + (1 - b1) * g[i]
            v[i] = 0.999 * v[i] + 0.001 * g[i] ** 2
            want[i] -= 0.1 * (m[i] / (1 - b1 ** t)) / math.sqrt(v[i] / (1 - 0.999 ** t) + 1e-3)
        p.grad = torch.tensor(g, dtype=torch.float64)
        opt.step()
        assert p.detach().tolist() == pytest.approx(want, rel=1e-12, abs=1e-15)
    # torch's Adam puts eps outside the root: after one step it is elsewhere (so the option is what changes it)
    q = torch.nn.Parameter(torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64))
    torch_adam = build_optimizer([q], OmegaConf.merge(optim, {"eps_inside": False}))
    assert isinstance(torch_adam, torch.optim.Adam)
    q.grad = torch.tensor(grads[0], dtype=torch.float64)
    torch_adam.step()
    inside = [x - 0.1 * g / math.sqrt(g * g + 1e-3) for x, g in zip([0.5, -1.0, 2.0], grads[0])]
    assert abs(q[1].item() - inside[1]) > 1e-3


@pytest.mark.parametrize("name, decay", [("adam", 0.0), ("adamw", 0.01)])
def test_adam_is_torchs_fused_kernel_with_the_loops_update(name, decay):
    """build_optimizer takes torch's fused Adam on CPU: after 20 steps the weights equal those of torch's
    default per-tensor loop within fp32 rounding."""
    from omegaconf import OmegaConf

    optim = OmegaConf.create({"name": name, "lr": 1e-2, "betas": [0.9, 0.98], "eps": 1e-9, "weight_decay": decay})
    torch.manual_seed(0)
    start = [torch.randn(30, 20), torch.randn(20)]
    fused_params = [torch.nn.Parameter(t.clone()) for t in start]
    loop_params = [torch.nn.Parameter(t.clone()) for t in start]
    fused = build_optimizer(fused_params, optim)
    assert fused.param_groups[0]["fused"] is True
    loop = (torch.optim.AdamW if name == "adamw" else torch.optim.Adam)(
        loop_params, lr=1e-2, betas=(0.9, 0.98), eps=1e-9, weight_decay=decay, foreach=False)
    for _ in range(20):
        grads = [torch.randn_like(t) for t in start]
        for params, opt in ((fused_params, fused), (loop_params, loop)):
            for p, g in zip(params, grads):
                p.grad = g.clone()
            opt.step()
    for a, b in zip(fused_params, loop_params):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_cifar_paper_uses_eps_inside_adam_and_mini_keeps_torchs(compose):
    assert compose(["task=convpool", "scale=paper"]).optim.eps_inside is True
    assert compose(["task=convpool", "scale=mini"]).optim.eps_inside is False


def test_a_finite_loss_blow_up_past_train_max_loss_is_diverged_not_completed(tmp_path, tiny_cfg):
    # lr 1e9: the loss stays finite (~1e18) but is nonsense; before train.max_loss this was "completed"
    summary = run(tiny_cfg("norm=none", "optim.lr=1e9"), tmp_path / "r")
    assert summary["status"] == "diverged" and summary["steps"] < 40
    assert read_metrics(tmp_path / "r")[-1]["loss"] > 1e6
    summary = run(tiny_cfg("norm=none", "optim.lr=1e9", "train.max_loss=null"), tmp_path / "unbounded")
    assert summary["status"] == "completed"  # null: only a NaN/inf loss diverges
