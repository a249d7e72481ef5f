"""How much of a training step is normalization (`python -m rmsnorm_repro.bench --profile task=<task>
[scale=mini|paper] [device=auto|cpu|cuda] [steps=N] [batch_fraction=F]`).

Per norm (none, layernorm, rmsnorm), the task's training step (runner.step.train_step, as the runner
and the step table time it) runs under torch.profiler, and the time inside normalization ops is summed
by op name: torch's fused LayerNorm (aten::native_layer_norm and its backward), the suite's fused
RMSNorm (rmsnorm_repro::rms_norm and rmsnorm_repro::rms_norm_backward, ranges the C++ kernel records;
on CUDA the Triton kernels _rmsnorm_forward / _rmsnorm_backward), BatchNorm's kernels. Norms built
from several small ops (the reference RMSNorm, L2-Norm, WeightNorm) have no such name and are not
counted. LayerNorm's share of its step is the most any norm could save there (Amdahl); beside it,
what RMSNorm saved (1 - its step time / LayerNorm's, unprofiled medians) and no norm at all.

Writes results/speed/profile-<task>-<scale>-<device>.md (and .json).
"""
from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

import torch
from hydra.errors import HydraException
from omegaconf.errors import OmegaConfBaseException

from ..atomic import atomic_write_text
from ..cli_errors import one_line
from ..errors import ConfigError

CPU_OPS = ("aten::native_layer_norm", "aten::native_layer_norm_backward", "rmsnorm_repro::rms_norm",
           "rmsnorm_repro::rms_norm_backward", "aten::native_batch_norm", "aten::native_batch_norm_backward")
DEVICE_KERNELS = ("layer_norm", "_rmsnorm_forward", "_rmsnorm_backward", "batch_norm")  # name substrings
NORMS = ("none", "layernorm", "rmsnorm")


def norm_time_ms(prof, device: str) -> tuple[float, dict[str, float]]:
    """Time in normalization ops over the whole profile: CPU time of the ops above (CPU), or the device
    time of kernels whose names carry a norm's (CUDA). Returns (total ms, ms per name)."""
    per_name: dict[str, float] = {}
    for e in prof.key_averages():
        if device == "cuda":
            if any(s in e.key for s in DEVICE_KERNELS):
                per_name[e.key] = per_name.get(e.key, 0.0) + getattr(e, "self_device_time_total", 0.0) / 1e3
        elif e.key in CPU_OPS:
            per_name[e.key] = e.cpu_time_total / 1e3
    return sum(per_name.values()), per_name


def profile_norm(task: str, norm: str, scale: str, device: str, steps: int, batch_fraction: float) -> dict:
    from .steps import StepRun

    run = StepRun(task, norm, batch_fraction, device, overrides=[f"scale={scale}"])
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    for s in range(2):  # warm-up: kernel build or load, first touch, Triton compilation
        run.step(s)
    plain = [run.step(2 + s)[0] for s in range(steps)]
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities) as prof:
        sync()
        start = time.perf_counter()
        for s in range(steps):
            run.step(2 + steps + s)
        sync()
        profiled_ms = (time.perf_counter() - start) * 1e3 / steps
    if device == "cuda":
        busy_ms = sum(getattr(e, "self_device_time_total", 0.0) for e in prof.key_averages()) / 1e3 / steps
    else:
        busy_ms = profiled_ms
    total, per_name = norm_time_ms(prof, device)
    return {"task": task, "norm": norm, "scale": scale, "device": device, "batch": run.batch,
            "impl": run.norms.describe().get("impl_used", "-"), "step_ms": statistics.median(plain),
            "profiled_step_ms": profiled_ms, "busy_ms": busy_ms, "norm_ms": total / steps,
            "share": (total / steps) / busy_ms if busy_ms else 0.0,
            "ops": {k: v / steps for k, v in sorted(per_name.items(), key=lambda kv: -kv[1])}}


def run(task: str, scale: str = "mini", device: str = "cpu", steps: int = 5, batch_fraction: float = 1.0,
        norms=NORMS, log=print) -> list[dict]:
    rows = []
    for norm in norms:
        rows.append(profile_norm(task, norm, scale, device, steps, batch_fraction))
        log(f"  profile {task} {norm}: {rows[-1]['norm_ms']:.2f} ms of {rows[-1]['busy_ms']:.1f} ms per step in norm ops")
    return rows


def markdown(rows: list[dict]) -> str:
    by = {r["norm"]: r for r in rows}
    ln, rms, none = by.get("layernorm"), by.get("rmsnorm"), by.get("none")
    lines = ["| norm | step ms (median, unprofiled) | profiled step ms | in norm ops, ms per step | share of step | "
             "ops (ms per step) | impl | batch |", "|---|---:|---:|---:|---:|---|---|---|"]
    for r in rows:
        ops = "; ".join(f"{k} {v:.2f}" for k, v in r["ops"].items()) or "-"
        lines.append(f"| {r['norm']} | {r['step_ms']:.1f} | {r['busy_ms']:.1f} | {r['norm_ms']:.2f} | {100 * r['share']:.1f}% | "
                     f"{ops} | {r['impl']} | {', '.join(r['batch']) or 'as configured'} |")
    lines.append("")
    if ln:
        lines.append(f"- Amdahl: LayerNorm's ops take {100 * ln['share']:.1f}% of its step, so no norm can make this "
                     f"step more than {100 * ln['share']:.1f}% faster than LayerNorm's (a norm that cost nothing).")
    if ln and rms:
        ratio = rms["step_ms"] / ln["step_ms"]
        lines.append(f"- RMSNorm's step took {ratio:.2f} of LayerNorm's ({rms['step_ms']:.1f} vs {ln['step_ms']:.1f} ms), "
                     f"a saving of {100 * (1 - ratio):.1f}% against at most {100 * ln['share']:.1f}%; its own norm ops: "
                     f"{rms['norm_ms']:.2f} ms per step against LayerNorm's {ln['norm_ms']:.2f} ms. Step medians of a few "
                     "steps each, timed one norm after the other: where the saving exceeds the bound, or is negative, "
                     "the difference is the machine's noise (the norm ops' own times are the measure).")
    if ln and none:
        lines.append(f"- No norm at all: {none['step_ms']:.1f} ms per step, {none['step_ms'] / ln['step_ms']:.2f} of "
                     "LayerNorm's (also without the norms' parameters and their optimizer updates).")
    return "\n".join(lines)


def _refused(opts: dict[str, str]) -> str | None:
    """Why --profile's settings cannot run (one line), else None."""
    from ..paths import configs_dir
    from ..tasks import TASKS

    scales = sorted(path.stem for path in (configs_dir() / "scale").glob("*.yaml"))
    if opts["task"] not in TASKS:
        return f"task={opts['task']} is not a task of this suite; choose one of: {', '.join(TASKS)}"
    if opts.get("scale", "mini") not in scales:
        return f"scale={opts['scale']} is not a scale; choose one of: {', '.join(scales)}"
    if opts.get("device", "auto") not in ("auto", "cpu", "cuda"):
        return f"device={opts['device']}: choose auto, cpu or cuda"
    if opts.get("device") == "cuda" and not torch.cuda.is_available():
        return "device=cuda, but torch sees no CUDA device here: use device=cpu"
    if "steps" in opts and not (opts["steps"].isdigit() and int(opts["steps"]) > 0):
        return f"steps={opts['steps']} is not a positive whole number of steps"
    try:
        fraction_ok = 0 < float(opts.get("batch_fraction", 1)) <= 1
    except ValueError:
        fraction_ok = False
    if not fraction_ok:
        return f"batch_fraction={opts['batch_fraction']} is not a fraction in (0, 1]"
    return None


def main(pairs: list[str], out: str = "results/speed") -> int:
    from ..host import cpu_name

    opts = dict(p.split("=", 1) for p in pairs if "=" in p)
    bad = [p for p in pairs if "=" not in p] + [k for k in opts if k not in ("task", "scale", "device", "steps", "batch_fraction")]
    if bad or "task" not in opts:
        print(f"--profile takes task=<task> [scale=mini|paper] [device=auto|cpu|cuda] [steps=N] [batch_fraction=F]; got {' '.join(pairs)}",
              file=sys.stderr)
        return 2
    why = _refused(opts)
    if why is not None:
        print(f"error: --profile {why}", file=sys.stderr)
        return 2
    device = opts.get("device", "auto")
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    scale = opts.get("scale", "mini")
    # paper sizes on a CPU: a tenth of the paper's batch, as the step table does
    fraction = float(opts.get("batch_fraction", 0.1 if (scale == "paper" and device == "cpu") else 1.0))
    torch.set_num_threads(torch.get_num_threads())
    try:
        rows = run(opts["task"], scale, device, int(opts.get("steps", 5)), fraction)
    except (HydraException, OmegaConfBaseException, ConfigError) as e:  # a setting the task's configs refuse
        print(f"error: --profile {' '.join(pairs)}: {one_line(str(e))}", file=sys.stderr)
        return 2
    label = torch.cuda.get_device_name(0) if device == "cuda" else f"{cpu_name()}, {torch.get_num_threads()} thread(s)"
    stem = f"profile-{opts['task']}-{scale}-{device}"
    path = Path(out) / f"{stem}.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "\n".join([f"# {stem}", "", f"`python -m rmsnorm_repro.bench --profile {' '.join(pairs)}`: {label}, torch "
                      f"{torch.__version__}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.", "",
                      "- norm ops counted by name: " + (", ".join(DEVICE_KERNELS) + " (device time of kernels)" if device == "cuda"
                                                        else ", ".join(CPU_OPS) + " (CPU time, children included)"),
                      "- the reference RMSNorm, L2-Norm and WeightNorm are op-by-op and not counted; a conv map's "
                      "per-channel gain and bias (ChannelNorm) are separate ops, not counted either",
                      "- share = time in norm ops / profiled step time (on CUDA: / busy device time)", "",
                      markdown(rows), ""])
    atomic_write_text(path, text)
    atomic_write_text(path.with_suffix(".json"), json.dumps(rows, indent=1) + "\n")
    print(text)
    print(f"wrote {path}")
    return 0
