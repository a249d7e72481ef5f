"""The speed benches that measure what users call: the module table (bench/module.py), the profile
(bench/profile.py), the bindings script (scripts/bench_binding.py), the beam script (scripts/bench_beam.py) and
the versions script (scripts/bench_versions.py)."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from rmsnorm_repro.bench import module
from rmsnorm_repro.norms import formulas
from runner_fixtures.helpers import write_multi30k

REPO = Path(__file__).resolve().parents[2]


# Module table -------------------------------------------------------------------------------------------
def test_module_table_smoke(ext):
    rows = module.run_shapes("default", shapes=((4, 32),), rounds=3, min_run_time=0.002, compiled=False)
    calls = {r["call"] for r in rows}
    assert {module.BASELINE, module.RMS_MODULE, module.FLOOR, "fused kernel, called directly"} <= calls
    for r in rows:
        assert r["ms"] > 0 and r["cpu_ms"] > 0 and r["paired_q1"] <= r["median_paired_ratio"] <= r["paired_q3"]
        assert r["allocator"] == "default" and r["shape"] == "4x32"
    base = next(r for r in rows if r["call"] == module.BASELINE)
    assert base["ratio_of_medians"] == 1.0 and base["median_paired_ratio"] == 1.0
    assert "| 4x32 | default | suite RMSNorm module |" in module.markdown(rows)


def test_gru_row_smoke():
    rows = module.run_gru("tuned", rounds=2, sizes={"batch": 3, "hidden": 8, "input": 4, "steps": 2})
    assert [r["norm"] for r in rows] == list(module.GRU_NORMS)
    assert all(r["ms"] > 0 for r in rows)


def _row(shape, alloc, call, ratio, q1=None, q3=None, **extra):
    return {"shape": shape, "allocator": alloc, "call": call, "ms": ratio, "cpu_ms": ratio, "ratio_of_medians": ratio,
            "ratio_of_medians_wall": ratio, "median_paired_ratio": ratio, "paired_q1": ratio if q1 is None else q1, "paired_q3": ratio if q3 is None else q3,
            **extra}


def test_module_targets_say_which_hold_with_the_floor():
    rows = [_row("80x2048", "default", module.RMS_MODULE, 0.55, 0.5, 0.58), _row("80x2048", "default", module.FLOOR, 0.4),
            _row("4096x512", "default", module.RMS_MODULE, 0.75, 0.55, 0.8), _row("4096x512", "default", module.FLOOR, 0.7),
            _row("8192x1024", "tuned", module.RMS_MODULE, 0.95), _row("8192x1024", "tuned", module.FLOOR, 0.8),
            _row("80x2048", "tuned", module.COMPILED_RMS, 1.2, vs_compiled_layer_norm=0.94, vs_compiled_layer_norm_paired=0.93)]
    lines = module.target_lines(rows)
    assert "80x2048, default allocator: RMSNorm module 0.55x" in lines[0] and "target <= 0.6x: holds" in lines[0]
    assert "within noise" not in lines[0] and "the floor x * 2 is at 0.40x)" in lines[0]
    assert "target <= 0.6x: does not hold; within noise" in lines[1]
    assert "the floor x * 2 is at 0.70x, so no norm reaches the target here" in lines[1]
    assert "target <= 0.9x: does not hold" in lines[2]
    assert "compiled RMSNorm 0.94x compiled nn.LayerNorm (paired 0.93x, IQR 0.94-0.94) (target <= 1.0x: holds)" in lines[3]
    (line,) = module.target_lines([_row("4096x512", "default", module.RMS_MODULE, 0.64, 0.6, 0.8),
                                   _row("4096x512", "default", module.FLOOR, 0.85)])
    assert "the floor x * 2 is at 0.85x and RMSNorm below it" in line and "no norm reaches" not in line

    def gru(norm, ms):
        return {**_row("GRU", "tuned", f"NormGRU step, norm={norm}", ms / 10, 0.9, 1.1), "cpu_ms": ms, "norm": norm}

    def gru_none(ms, q1, q3):
        return {**gru("none", ms), "median_paired_ratio": ms / 12.0, "paired_q1": q1, "paired_q3": q3}

    (line,) = module.target_lines([gru_none(10.0, 0.8, 0.85), gru("layernorm", 12.0), gru("rmsnorm", 10.5)])
    assert "RMSNorm <= LayerNorm (holds" in line and "0.25 of LayerNorm's" in line and "< 0.5: holds" in line
    (line,) = module.target_lines([gru_none(10.0, 0.8, 0.85), gru("layernorm", 12.0), gru("rmsnorm", 11.5)])
    assert "0.75 of LayerNorm's" in line and "< 0.5: does not hold" in line
    (line,) = module.target_lines([gru_none(11.0, 0.87, 1.01), gru("layernorm", 12.0), gru("rmsnorm", 11.5)])
    assert "0.50 of LayerNorm's" in line and "within noise: no norm at all is 0.92x" in line
    (line,) = module.target_lines([gru_none(12.5, 1.0, 1.1), gru("layernorm", 12.0), gru("rmsnorm", 11.5)])
    assert "cannot be measured" in line


# Profile --------------------------------------------------------------------------------------------------
def test_profile_counts_the_norm_ops_by_name(ext):
    from rmsnorm_repro.bench import profile
    from rmsnorm_repro.norms import LayerNorm, RMSNorm

    x = torch.randn(16, 32, requires_grad=True)
    with torch.profiler.profile() as prof:
        for norm in (LayerNorm(32), RMSNorm(32)):
            norm(torch.tanh(x)).sum().backward()
    total, per_name = profile.norm_time_ms(prof, "cpu")
    assert set(per_name) == {"aten::native_layer_norm", "aten::native_layer_norm_backward", "rmsnorm_repro::rms_norm",
                             "rmsnorm_repro::rms_norm_backward"}
    assert total == pytest.approx(sum(per_name.values())) and total > 0
    rows = [{"norm": n, "step_ms": ms, "busy_ms": ms, "norm_ms": share * ms, "share": share, "ops": {}, "impl": "-", "batch": []}
            for n, ms, share in (("none", 9.0, 0.0), ("layernorm", 10.0, 0.2), ("rmsnorm", 9.5, 0.1))]
    text = profile.markdown(rows)
    assert "no norm can make this step more than 20.0% faster" in text
    assert "RMSNorm's step took 0.95 of LayerNorm's" in text


def test_profile_cli_refuses_bad_arguments(capsys):
    from rmsnorm_repro.bench import profile

    assert profile.main(["scale=mini"]) == 2
    assert profile.main(["task=transformer", "colour=blue"]) == 2
    assert "--profile takes task=<task>" in capsys.readouterr().err


@pytest.mark.parametrize(("setting", "said"), [
    ("task=bogus", "task=bogus is not a task of this suite; choose one of: "), ("scale=huge", "scale=huge is not a scale"),
    ("steps=0", "steps=0 is not a positive"), ("batch_fraction=x", "batch_fraction=x is not a fraction")])
def test_profile_settings_it_cannot_run_are_one_line(capsys, setting, said):
    # audit f15a5c5: `--profile task=bogus` was Hydra's 72-line MissingConfigException
    from rmsnorm_repro.bench import profile

    pairs = [setting] if setting.startswith("task=") else ["task=convpool", setting]
    assert profile.main(pairs) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and said in err and "Traceback" not in err


# The bindings script --------------------------------------------------------------------------------------
def test_every_binding_in_the_comparison_is_exact(ext):
    spec = importlib.util.spec_from_file_location("bench_binding", REPO / "scripts" / "bench_binding.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    calls = script.bindings(ext, None)  # without the TORCH_LIBRARY variant (a second build)
    assert len(calls) == 3
    x = torch.randn(4, 9, dtype=torch.float64, requires_grad=True)
    w = (torch.rand(9, dtype=torch.float64) + 0.5).requires_grad_()
    dy = torch.randn(4, 9, dtype=torch.float64)
    y = formulas.rms_norm(x, w, None, 9, 1e-8, False)
    want = [y, *torch.autograd.grad(y, (x, w), dy)]
    for name, f in calls.items():
        y = f(x, w, 9)
        for a, r in zip([y, *torch.autograd.grad(y, (x, w), dy)], want):
            torch.testing.assert_close(a, r, rtol=1e-12, atol=1e-12, msg=name)


# bf16 tables (--precision bf16): what train.precision=bf16 runs ----------------------------------------
def test_bf16_kernel_table_takes_autocasts_mix(ext):
    from rmsnorm_repro.bench import kernels

    names = ["torch layer_norm", "suite reference", "suite fused"]
    rows = kernels.run(shapes=((4, 16),), names=names, rounds=2, min_run_time=0.002, dtype=torch.bfloat16)
    assert {(r["impl"], r["mode"]) for r in rows} == {(n, m) for n in names for m in ("fwd", "fwd+bwd")}
    assert all(r["ms"] > 0 for r in rows)


@pytest.mark.slow
def test_bf16_step_table_runs_the_step_under_autocast(tmp_path, monkeypatch):
    from rmsnorm_repro.bench import __main__ as bench, steps

    dtypes = []
    step = steps.train_step

    def spy(task, model, *args, precision=None, **kwargs):
        with precision.autocast():
            dtypes.append(torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else torch.float32)
        return step(task, model, *args, precision=precision, **kwargs)

    monkeypatch.setattr(steps, "train_step", spy)
    # the mini model: CPUs without AVX512-BF16 or AMX take minutes for one bf16 step of the paper's
    run = steps.run
    monkeypatch.setattr(steps, "run", lambda *args, **kwargs: run(*args, **{**kwargs, "scale": "mini"}))
    threads = torch.get_num_threads()
    try:
        bench.main(["--steps", "--precision", "bf16", "--tasks", "transformer", "--norms", "layernorm,rmsnorm",
                    "--step-rounds", "1", "--step-count", "1", "--batch-fraction", "1", "--out", str(tmp_path)])
    finally:
        torch.set_num_threads(threads)
    data = json.loads((tmp_path / "steps-cpu-bf16-tuned.json").read_text())
    assert [(r["norm"], r["precision"]) for r in data["rows"]] == [("layernorm", "bf16"), ("rmsnorm", "bf16")]
    assert dtypes and set(dtypes) == {torch.bfloat16}
    text = (tmp_path / "steps-cpu-bf16-tuned.md").read_text()
    assert "CPU bf16 (autocast: norms compute in float32), synthetic data; median of 1 x 1 steps" in text


# The beam script ---------------------------------------------------------------------------------------
@pytest.mark.slow
def test_beam_script_times_both_ways_and_checks_they_agree():
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, str(REPO / "scripts" / "bench_beam.py"), "--sentences", "2", "--rounds", "1",
                          "--beam", "2"], env=env, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert out.returncode == 0, out.stderr[-2000:]
    for row in ("| transformer | left in place |", "| transformer | reordered every step |", "| rnnsearch | left in place |"):
        assert row in out.stdout


# The versions script -----------------------------------------------------------------------------------
@pytest.mark.slow
def test_versions_script_steps_two_trees_in_turn_on_the_same_batch(tmp_path):
    root = write_multi30k(tmp_path / "multi30k", {"train": 120, "val": 8})
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}

    def worktrees() -> str:
        return subprocess.run(["git", "worktree", "list"], cwd=REPO, capture_output=True, text=True).stdout
    before = worktrees()
    out = subprocess.run([sys.executable, str(REPO / "scripts" / "bench_versions.py"), "--rev", "HEAD", "--data-root",
                          str(root), "--rounds", "2", "--tasks", "rnnsearch", "data.vocab_size=60", "task.model.emb=16",
                          "task.model.hidden=16", "train.batch_size=16", f"paths.cache_dir={tmp_path / 'cache'}"],
                         env=env, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "| rnnsearch (task.model.emb 16, task.model.hidden 16, task.model.dropout 0.2, train.batch_size 16; " in out.stdout
    head, this = [line for line in out.stdout.splitlines() if line.startswith("| rnnsearch | ")]
    assert head.startswith("| rnnsearch | HEAD | ") and head.endswith(" | 1 |")
    assert this.startswith("| rnnsearch | this checkout | ") and " [" in this.split("|")[-2]
    assert worktrees() == before, "the temporary worktree is removed"


@pytest.mark.parametrize("argv, message", [
    (["--steps", "--tasks", "transfomer"], "--tasks: unknown transfomer; choose from convpool, rnnsearch"),
    (["--steps", "--norms", "rmsnrom"], "--norms: unknown rmsnrom; choose from batchnorm"),
    (["--kernels", "--rounds", "0"], "--rounds must be at least 1, got 0"),
    (["--steps", "--step-count", "0"], "--step-count must be at least 1, got 0"),
    (["--steps", "--batch-fraction", "0"], "--batch-fraction must be in (0, 1], got 0.0"),
])
def test_bad_bench_arguments_are_one_line_exit_2_and_leave_the_tables_alone(tmp_path, capsys, argv, message):
    from rmsnorm_repro.bench import __main__ as bench

    table = tmp_path / "steps-cpu-tuned.md"
    table.write_text("the committed table\n")
    assert bench.main([*argv, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {message}"), err
    assert table.read_text() == "the committed table\n" and len(list(tmp_path.iterdir())) == 1


def test_an_out_folder_that_cannot_be_written_is_one_line_before_any_timing(tmp_path, capsys):
    from rmsnorm_repro.bench import __main__ as bench

    (tmp_path / "afile").write_text("x")
    assert bench.main(["--kernels", "--out", str(tmp_path / "afile" / "speed")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: cannot write") and "--out" in err[0], err


def test_a_bench_that_measures_nothing_never_overwrites_a_table(tmp_path):
    from rmsnorm_repro.bench.tables import write_table

    table = tmp_path / "steps-cpu-tuned.md"
    table.write_text("the committed table\n")
    with pytest.raises(SystemExit, match="nothing was measured.*left as they were"):
        write_table(tmp_path, "steps-cpu-tuned", {}, [], "", [])
    assert table.read_text() == "the committed table\n"
