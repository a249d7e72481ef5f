"""The one-shot GPU check (bench/gpu_check.py and its stages), run here on CPU with the Triton kernels
interpreted: `make gpu-check` on a python like the lent machine's image with the wheels only, the smoke
stage and its watchdog, nothing lost when a block fails or the process is killed, the deadline."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
IMAGE_PYTHON = Path(__file__).parent / "image_python"  # its sitecustomize makes a python import like the image
WHEEL_PACKAGES = {"hydra": "hydra_core", "omegaconf": "omegaconf", "antlr4": "antlr4_python3_runtime",
                  "packaging": "packaging"}
ENV = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "PYTHONPATH")}  # --tiny sets it itself


def _wheels(folder: Path) -> Path:
    """Wheels of the four packages `make gpu-wheels` builds, zipped from this venv's installed copies (the
    tests have no network): the files a pure-python wheel holds, package and dist-info."""
    import importlib.util

    folder.mkdir()
    for package, dist in WHEEL_PACKAGES.items():
        root = Path(importlib.util.find_spec(package).origin).parent
        site = root.parent
        (info,) = site.glob(f"{dist}-*.dist-info")
        with zipfile.ZipFile(folder / f"{info.name.removesuffix('.dist-info')}-py3-none-any.whl", "w") as wheel:
            for base in (root, info):
                for path in base.rglob("*"):
                    if path.is_file() and "__pycache__" not in path.parts:
                        wheel.write(path, path.relative_to(site))
    return folder


def _image_python(tmp_path: Path, blocked: Path) -> dict:
    """An environment whose `python3` imports like the GPU machine's image (tests/bench/image_python)."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    (bin_ / "python3").write_text(f'#!/bin/sh\nPYTHONPATH="{IMAGE_PYTHON}${{PYTHONPATH:+:$PYTHONPATH}}" '
                                  f'exec "{sys.executable}" "$@"\n')
    (bin_ / "python3").chmod(0o755)
    return {**ENV, "PATH": f"{bin_}:{ENV['PATH']}", "IMAGE_PYTHON_BLOCKED": str(blocked), "OMP_NUM_THREADS": "1"}


def test_make_gpu_check_needs_no_venv_nor_network():
    """Without a .venv the target runs python3 and installs nothing from the network: no `install` prerequisite."""
    recipe = subprocess.run(["make", "-n", "gpu-check", "PY=/nonexistent/python", "GPU_OUT=/some/out"], cwd=REPO,
                            capture_output=True, text=True, check=True).stdout
    assert "venv" not in recipe and "pip install" not in recipe and "pip wheel" not in recipe
    assert "GPU_OUT=/some/out" in recipe and "sh scripts/gpu_check.sh" in recipe
    script = (REPO / "scripts" / "gpu_check.sh").read_text()
    assert "py=python3" in script and '-m zipfile -e "$wheel"' in script and "pip" not in script.replace("no pip", "")
    assert '-m rmsnorm_repro.bench --gpu --out "$GPU_OUT" $GPU_ARGS' in script
    wheels = subprocess.run(["make", "-n", "gpu-wheels"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    assert "pip wheel --no-deps -w wheels" in wheels and "antlr4-python3-runtime" in wheels
    assert "/wheels/" in (REPO / ".gitignore").read_text().splitlines()


def test_the_image_python_blocks_what_the_image_lacks(tmp_path):
    """The stand-in for the image's python that the whole-path test runs: hydra cannot be imported from this
    venv, and neither can a package the suite imports that is not in the image (scipy here)."""
    blocked = tmp_path / "blocked.txt"
    env = _image_python(tmp_path, blocked)
    out = subprocess.run(["python3", "-c", "import hydra"], env=env, capture_output=True, text=True)
    assert out.returncode == 1 and "not in the GPU machine's image" in out.stderr
    deps = tmp_path / "deps"
    for wheel in _wheels(tmp_path / "wheels").glob("*.whl"):
        zipfile.ZipFile(wheel).extractall(deps)
    out = subprocess.run(["python3", "-c", "import hydra, omegaconf, torch, yaml, numpy, rmsnorm_repro.paths\n"
                          "import rmsnorm_repro.report.paired"],
                         env={**env, "PYTHONPATH": f"{REPO}:{deps}"}, capture_output=True, text=True)
    assert out.returncode == 1 and "scipy (imported by rmsnorm_repro.report.paired)" in blocked.read_text().splitlines()


@pytest.mark.slow
def test_make_gpu_check_runs_the_whole_path_on_the_image_python_with_the_wheels(tmp_path):
    """`make gpu-check GPU_ARGS=--tiny` as the lent machine runs it (no .venv, python3 like its image, the wheels
    unpacked), every part at tiny sizes (about 5 minutes here): the smoke stage passes (every kernel variant
    against float64, each task's step), then the kernel and step tables; the suite imported nothing beyond the
    image and the wheels but the optional Liger and apex; md, json and log written."""
    pytest.importorskip("triton", reason="Triton is not installed (it ships with CUDA builds of torch)")
    blocked = tmp_path / "blocked.txt"
    env = _image_python(tmp_path, blocked)
    out_dir = tmp_path / "out"
    run = subprocess.run(["make", "--no-print-directory", "gpu-check", "PY=/nonexistent/python", f"GPU_OUT={out_dir}",
                          f"GPU_WHEELS={_wheels(tmp_path / 'wheels')}", f"GPU_DEPS={tmp_path / 'deps'}",
                          "GPU_ARGS=--tiny"], cwd=REPO, env=env, capture_output=True, text=True, timeout=1500)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "wheels from" in run.stdout
    # the suite's own imports beyond the image and the wheels: only the optional ones (the wheels' optional
    # imports, such as omegaconf's attr, fail there as here, and the check ran)
    suite = {line for line in blocked.read_text().splitlines() if "imported by rmsnorm_repro" in line}
    assert suite <= {"liger_kernel (imported by rmsnorm_repro.bench.gpu_kernels)",
                     "apex (imported by rmsnorm_repro.bench.gpu_kernels)"}, suite
    (path,) = out_dir.glob("gpu-*.md")
    text, data = path.read_text(), json.loads(path.with_suffix(".json").read_text())
    smoke = json.loads(next(out_dir.glob("smoke-gpu-*.json")).read_text())
    assert smoke["passed"] and data["smoke"]["passed"] and data["state"] == "finished", data["errors"]
    assert not any(data["errors"].values()) and data["tiny"]
    from rmsnorm_repro.bench.steps import available_tasks

    tasks = available_tasks()
    assert {c["name"] for c in smoke["checks"]} == {"versions", "exactness", "modules"} | {f"step {t}" for t in tasks}
    recurrent = [r for r in data["checks"] if r["check"].startswith(("GRU transition (Triton)", "LSTM step (Triton)"))]
    assert len(recurrent) == 6 and all(r["ok"] for r in recurrent), recurrent  # GRU: 4 norms, LSTM: 2
    assert {(r["dtype"], r["params"]) for r in data["exact"]} == {
        ("float32", "float32"), ("bfloat16", "bfloat16"), ("bfloat16", "float32"), ("float16", "float16"), ("float16", "float32")}
    assert {r["impl"] for r in data["kernels"]} >= {"x * 2 (floor)", "torch layer_norm", "torch rms_norm", "suite Triton kernel",
                                                   "suite RMSNorm module", "suite RMSNorm module, eps inside",
                                                   "suite pRMSNorm module 6.25%"}
    assert {(r["dtype"], r["shape"]) for r in data["kernels"]} == {("float32", "8x64"), ("bfloat16", "8x64")}
    assert all(r["host_us"] > 0 and r["kernels"] >= 1 for r in data["kernels"])
    assert {(r["precision"], r["task"], r["norm"]) for r in data["steps"]} == {
        (p, t, n) for p in ("fp32", "bf16") for t in tasks for n in ("none", "layernorm", "rmsnorm", "prmsnorm")}
    assert all(r["kernels"] > 0 and r["paper_vs_layernorm"] and r["loss_finite"] and r["steps"] == 2 for r in data["steps"])
    for section in ("## 0. Smoke stage", "## 1. Exactness", "## 2. Kernel table", "## 3. Per training step", "Verdicts",
                   "--tiny: tiny shapes", "Data the steps ran on", "vocabulary"):
        assert section in text
    from rmsnorm_repro.plan import gpu_step_ms

    (device,) = gpu_step_ms(out_dir)  # what `make plan` reads its GPU-hours from: the smoke record is not one
    assert len(gpu_step_ms(out_dir)[device]) == len(data["steps"])
    log = next(out_dir.glob("gpu-*.log")).read_text()
    assert "smoke: one training step of transformer" in log and "wrote" in log
    for written in out_dir.iterdir():  # no file the suite writes names a path of this machine
        assert str(tmp_path) not in written.read_text() and str(REPO) not in written.read_text(), written.name


@pytest.mark.slow
def test_a_check_killed_two_thirds_of_the_way_in_keeps_the_parts_done(tmp_path):
    """SIGKILL (no handler runs) once the first of two tasks' step blocks is written, of smoke stage, kernel table
    and 4 step blocks: the smoke record, the md and the json parse and hold every part done; the log is there."""
    pytest.importorskip("triton", reason="Triton is not installed (it ships with CUDA builds of torch)")
    proc = subprocess.Popen([sys.executable, "-m", "rmsnorm_repro.bench", "--gpu", "--tiny", "--tasks",
                             "transformer,convpool", "--norms", "layernorm,rmsnorm", "--out", str(tmp_path)],
                            cwd=REPO, env={**ENV, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 900
        while time.monotonic() < deadline and proc.poll() is None:
            done = [json.loads(p.read_text()).get("steps") for p in tmp_path.glob("gpu-*.json")]
            if done and done[0] and {r["task"] for r in done[0]} == {"transformer"} and len(done[0]) >= 4:
                break
            time.sleep(0.2)
        assert proc.poll() is None, "the check ended before it could be killed"
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
    (path,) = tmp_path.glob("gpu-*.md")
    data = json.loads(path.with_suffix(".json").read_text())
    smoke = json.loads(next(tmp_path.glob("smoke-gpu-*.json")).read_text())
    assert smoke["passed"] and data["state"] == "running" and data["exact"] and data["kernels"]
    assert {(r["task"], r["precision"]) for r in data["steps"]} == {("transformer", "fp32"), ("transformer", "bf16")}
    text = path.read_text()
    assert "## 2. Kernel table" in text and "| fp32 | transformer | rmsnorm |" in text
    assert "smoke: one training step of convpool" in next(tmp_path.glob("gpu-*.log")).read_text()


def _record(tmp_path, monkeypatch):
    from rmsnorm_repro.bench import gpu_check

    monkeypatch.setattr(gpu_check, "device_label", lambda device: "Test GPU")
    record = gpu_check.Record(tmp_path, "cpu", True, "python -m rmsnorm_repro.bench --gpu")
    record.smoke = {"passed": True, "checks": [], "failed": []}
    return record


def test_a_failing_block_is_named_in_its_table_and_the_next_block_runs(tmp_path, monkeypatch):
    """Each kernel block and each task x precision is written as soon as it is done; an exception names its
    block in the table (and its traceback goes to the log), a block whose estimate exceeds the time left is
    named as skipped, and the next one runs."""
    from rmsnorm_repro.bench import gpu_check, gpu_kernels, gpu_steps
    from rmsnorm_repro.bench.gpu_record import Log

    record = _record(tmp_path, monkeypatch)
    saved = []
    save = record.save
    monkeypatch.setattr(record, "save", lambda: (save(), saved.append(json.loads(record.md.with_suffix(".json").read_text()))))

    def kernel_block(device, n, d, dtype, rounds, block_s):
        if n == 1:
            raise RuntimeError("out of memory")
        return [{"dtype": "float32", "shape": f"{n}x{d}", "mode": "fwd", "impl": "x * 2 (floor)", "ms": 1.0, "gb_s": 1.0,
                 "vs_layer_norm": 1.0, "vs_torch_rms_norm": None, "host_us": 1.0, "device_us": None, "kernels": 1}]

    def task_blocks(task, device, norms, precisions, steps, fraction, overrides, budget, done, log):
        for precision in precisions:
            if task == "reader":
                done(precision, [], "ValueError: bad batch")
            elif task == "convpool" and precision == "bf16":
                done(precision, [], "skipped: its estimate 99 s exceeds the 3 s left")
            else:
                done(precision, [{"precision": precision, "task": task, "norm": "rmsnorm", "step_ms": 2.0, "steps": 2,
                                  "vs_layernorm": None, "paper_vs_layernorm": {}, "kernels": 9, "busy": None,
                                  "loss_finite": True, "batch": [], "data": "data=synthetic", "batch_shapes": "2x3",
                                  "impl": "fused-cpu"}], None)

    monkeypatch.setattr(gpu_kernels, "kernel_block", kernel_block)
    monkeypatch.setattr(gpu_steps, "task_blocks", task_blocks)
    log = Log(tmp_path / "check.log")
    kwargs = dict(shapes=((1, 8), (2, 8)), dtypes=(torch.float32,), rounds=1, block_s=0.001)
    gpu_check.full_check(record, log, "cpu", ["reader", "convpool"], ["rmsnorm"], kwargs,
                         dict(steps=2, batch_fraction=1.0, overrides=[]), deadline_s=3600)
    assert len(saved) == 2 + 4  # after every block
    assert saved[0]["errors"]["kernels"] == {"float32 1x8": "RuntimeError: out of memory"} and not saved[0]["kernels"]
    assert [r["shape"] for r in saved[1]["kernels"]] == ["2x8"]
    assert saved[-1]["errors"]["steps"] == {"reader fp32": "ValueError: bad batch", "reader bf16": "ValueError: bad batch",
                                            "convpool bf16": "skipped: its estimate 99 s exceeds the 3 s left"}
    assert [(r["task"], r["precision"]) for r in saved[-1]["steps"]] == [("convpool", "fp32")]
    text = record.md.read_text()
    assert "| float32 | 1x8 | - | RuntimeError: out of memory |" in text
    assert "| fp32 | reader | - | ValueError: bad batch |" in text and "| bf16 | convpool | - | skipped:" in text
    assert "- steps reader fp32: ValueError: bad batch" in text and "convpool bf16: skipped" not in text.split("What failed")[1]
    assert "Traceback" in (tmp_path / "check.log").read_text() and "out of memory" in (tmp_path / "check.log").read_text()


def test_no_kernel_block_starts_past_the_deadline(tmp_path, monkeypatch):
    from rmsnorm_repro.bench import gpu_check, gpu_kernels
    from rmsnorm_repro.bench.gpu_record import Log

    record = _record(tmp_path, monkeypatch)
    monkeypatch.setattr(gpu_kernels, "kernel_block", lambda *a: pytest.fail("a block started past the deadline"))
    gpu_check.full_check(record, Log(tmp_path / "log"), "cpu", [], ["rmsnorm"],
                         dict(shapes=((1, 8),), dtypes=(torch.float32,), rounds=1, block_s=0.001),
                         dict(steps=2, batch_fraction=1.0, overrides=[]), deadline_s=gpu_check.STEPS_RESERVED_S + 5)
    assert record.errors["kernels"]["float32 1x8"].startswith("skipped: its estimate 12 s exceeds")


def test_a_failed_smoke_stage_stops_the_check_and_says_why(tmp_path, monkeypatch, capsys):
    from rmsnorm_repro.bench import gpu_check, gpu_smoke

    monkeypatch.setattr(gpu_check, "device_label", lambda device: "Test GPU")
    monkeypatch.setattr(gpu_smoke, "checks", lambda device, tasks, fraction: [
        ("exactness", lambda: {"check": "Triton RMSNorm against float64", "ok": False, "value": "3 of 25 cases"})])
    monkeypatch.setattr(gpu_check, "full_check", lambda *a, **k: pytest.fail("the full check ran"))
    assert gpu_check.run_all("cpu", tmp_path, True, [], ["rmsnorm"], "cmd", deadline_s=3600, smoke_limit_s=3600) == 1
    out = capsys.readouterr().out
    assert "the smoke stage failed" in out and "Triton RMSNorm against float64: 3 of 25 cases" in out
    data = json.loads((tmp_path / "gpu-test-gpu.json").read_text())
    assert data["smoke"]["passed"] is False and data["state"].startswith("the smoke stage failed")


def test_gpu_check_without_a_gpu_says_so(capsys):
    from rmsnorm_repro.bench import gpu_check

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    assert gpu_check.main() == 2
    assert "no CUDA device" in capsys.readouterr().err


def test_the_check_imports_only_the_image_and_the_wheels(tmp_path):
    """The check's modules and every task's (what `available_tasks` imports) on a python that imports like
    the image with the wheels unpacked: every task is there (a task whose import failed would be left out
    silently), and the suite's only blocked imports are the optional Liger and apex."""
    blocked = tmp_path / "blocked.txt"
    env = _image_python(tmp_path, blocked)
    deps = tmp_path / "deps"
    for wheel in _wheels(tmp_path / "wheels").glob("*.whl"):
        zipfile.ZipFile(wheel).extractall(deps)
    script = ("from rmsnorm_repro.bench import gpu_check, gpu_kernels\nfrom rmsnorm_repro.bench.steps import available_tasks\n"
              "gpu_kernels.implementations(8, 'cpu', __import__('torch').float32)\nprint(','.join(available_tasks()))")
    out = subprocess.run(["python3", "-c", script], env={**env, "PYTHONPATH": f"{REPO}:{deps}"}, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    from rmsnorm_repro.bench.steps import available_tasks

    assert out.stdout.split() == [",".join(available_tasks())]
    suite = {line for line in blocked.read_text().splitlines() if "imported by rmsnorm_repro" in line} if blocked.exists() else set()
    assert suite <= {"liger_kernel (imported by rmsnorm_repro.bench.gpu_kernels)",
                     "apex (imported by rmsnorm_repro.bench.gpu_kernels)"}, suite


def test_gpu_honours_tasks_and_norms(tmp_path, monkeypatch):
    from rmsnorm_repro.bench import __main__ as bench, gpu_check

    got = {}
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(gpu_check, "run_all", lambda device, out, tiny, tasks, norms, command, *limits:
                        got.update(tasks=tasks, norms=norms, command=command) or 0)
    assert bench.main(["--gpu", "--tiny", "--tasks", "transformer,rnnsearch", "--norms", "rmsnorm,layernorm",
                       "--out", str(tmp_path)]) == 0
    assert got["tasks"] == ["transformer", "rnnsearch"] and got["norms"] == ["layernorm", "rmsnorm"]
    assert got["command"] == f"python -m rmsnorm_repro.bench --gpu --tiny --tasks transformer,rnnsearch --norms " \
                             f"rmsnorm,layernorm --out <out>"
