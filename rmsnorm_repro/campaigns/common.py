"""What the campaigns share: a training command run with its log, each sweep's time (timings.json), the
side-by-side step times the speed claims are judged on (speed.json), a report's header lines, and the
progress bar over a campaign's sweeps (TimedBar)."""
from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

from omegaconf import OmegaConf

from ..atomic import atomic_write_text
from ..report.paired import Measured, SpeedUnreadable, read_speed, write_speed
from ..paths import repo_dir
from ..record import ended_utc
from ..report import figures as figs
from ..report.aggregate import Run, load_runs
from ..report.claims import TASK_ORDER, Claim

ROOT = repo_dir() or Path.cwd()  # the checkout (results/mini is committed there), else where it is run


def run_logged(command: list[str], log_path: Path, threads: int) -> tuple[int, float]:
    """Run a training command offline with `threads` OpenMP threads a process, its output into log_path
    (the command on the first line); returns (exit code, seconds)."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1",
           "WANDB_MODE": os.environ.get("WANDB_MODE", "offline")}
    log_path.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with open(log_path, "w") as log:
        log.write(" ".join(command) + "\n")
        log.flush()
        code = subprocess.call(command, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, env=env)
    return code, time.perf_counter() - start


# What a campaign's report could not read: (file or run folder, why and what to do), each left out of
# the report, named in it and on stderr, and the campaign then exits 1 (its verdicts may differ)
Damaged = list[tuple[Path, str]]


def runs_of(runs_root: Path, sweep: str, damaged: Damaged | None = None) -> list[Run]:
    """The runs of one sweep directory, each (group, seed) once; [] when it does not exist. A run whose
    record cannot be read is left out and appended to `damaged` (without it: a ValueError)."""
    path = runs_root / sweep
    if not path.is_dir():
        return []
    unreadable: Damaged | None = None if damaged is None else []
    runs = figs.unique_runs(load_runs(path, unreadable))
    if damaged is not None:
        damaged.extend(unreadable or ())
    return runs


def damaged_lines(damaged: Damaged, out: Path) -> list[str]:
    """The report's section naming what it left out, with paths relative to the report."""
    if not damaged:
        return []
    shown = lambda text: str(text).replace(f"{out}{os.sep}", "")  # noqa: E731 (the report names no path of this machine)
    return ["", "**Left out as damaged** (each changes what the verdicts below rest on; the command exited 1):", "",
            *(f"- `{Path(shown(path)).as_posix()}`: {shown(why)}" for path, why in damaged)]


def report_damaged(damaged: Damaged, command: str) -> None:
    for path, why in damaged:
        print(f"{command}: left out {path}: {why}", file=sys.stderr)


def _timings_file(out: Path) -> Path:
    return out / "runs" / "logs" / "timings.json"


def load_timings(out: Path) -> dict[str, tuple[int, float]]:
    """Each sweep's (exit code, seconds) from its last training, so --report-only keeps the table."""
    try:
        return {k: (int(v[0]), float(v[1])) for k, v in json.loads(_timings_file(out).read_text()).items()}
    except (OSError, ValueError, TypeError, IndexError):
        return {}


def save_timings(out: Path, timings: dict[str, tuple[int, float]]) -> None:
    path = _timings_file(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps({k: [code, round(seconds, 1)] for k, (code, seconds) in timings.items()}, indent=1) + "\n")


def measure_speed(out: Path, tasks: list[str], scale: str, overrides: list[str], threads: int) -> None:
    """Step times of LayerNorm, RMSNorm and pRMSNorm measured side by side at the runs' sizes and thread
    count (bench.steps.side_by_side: balanced order, paired batches, rounds until a 5% speed-up is
    decidable) into <out>/speed.json: what the speed claims are judged on. Other tasks' earlier
    measurements stay, each with its own description."""
    import torch

    from ..bench import steps
    from ..host import cpu_name

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        measured = steps.side_by_side(tasks, ["layernorm", "rmsnorm", "prmsnorm"], scale, overrides,
                                      how=f"{threads} thread(s), {cpu_name()}, {datetime.now(timezone.utc):%Y-%m-%d}")
    finally:
        torch.set_num_threads(before)
    write_speed(out / "speed.json", {**load_speed(out), **measured})


def load_speed(out: Path, damaged: Damaged | None = None) -> dict[str, Measured]:
    """<out>/speed.json's side-by-side step times by task; {} when absent or unreadable (then appended to
    `damaged`, when given, so the speed claims read not measured and the report says why)."""
    path = out / "speed.json"
    try:
        return read_speed(path)
    except SpeedUnreadable as err:
        if damaged is not None:
            damaged.append((path, f"cannot be read ({err}), so the speed claims read not measured: measure "
                                  "again (run with --speed), or delete it"))
        return {}


# pRMSNorm's partial widths ------------------------------------------------------------------------------
def partial_widths(task: str, scale: str) -> list[tuple[int, int]]:
    """(width, k) of every vector pRMSNorm normalizes in the task's model at this scale, as composed (task,
    norm=prmsnorm, scale; generated data): features for the norms on activations, positions (H x W, from one
    forward pass of a 32 x 32 image) for the CNN's per-channel norms. Sorted, each pair once."""
    import torch
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from ..norms.rmsnorm import RMSNorm, RowRMSNorm
    from ..paths import configs_dir
    from ..runner.setup import normalization, task_class

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(configs_dir()), version_base="1.3"):
        cfg = compose("train", overrides=[f"task={task}", "norm=prmsnorm", f"scale={scale}", "data=synthetic"])
    cls = task_class(cfg)
    model = cls(cfg, normalization(cfg, cls), "cpu").build_model()
    pairs = {(m.dim, m.k) for m in model.modules() if isinstance(m, RMSNorm)}
    rows = [v for m in model.modules() for v in vars(m).values() if isinstance(v, RowRMSNorm)]
    if rows:
        model.eval()
        with torch.no_grad():
            model(torch.zeros(1, 3, 32, 32))
        pairs |= {kv for row in rows for kv in row.k.items()}
    return sorted(pairs)


def finished_at(runs: list[Run]) -> str:
    """When the newest of the runs ended, by the time each wrote into its summary (ended_utc; a file's
    mtime is its checkout's, not its run's), and how many do not say; the same runs give the same text."""
    times = [t for t in (ended_utc(r.summary) for r in runs) if t is not None]
    unrecorded = f" ({len(runs) - len(times)} of {len(runs)} record no end time)" if len(times) < len(runs) else ""
    if not times:
        return "the runs record no end time (written before summary.json's ended_utc)" if runs else "no runs"
    return f"the last ended {max(times):%Y-%m-%d %H:%M} UTC{unrecorded}"


# claims judged from the runs' own clocks: a sweep's runs share the machine (--jobs at a time), so a run's
# seconds depend on what ran beside it
CLOCK_CLAIMS = ("Fig. 1 (per second)",)


def shared_jobs(runs_root: Path) -> int:
    """The most runs any sweep trained at a time (its multirun.yaml's hydra.launcher.n_jobs; 1 without one)."""
    jobs = [OmegaConf.select(OmegaConf.load(path), "hydra.launcher.n_jobs", default=1) or 1
            for path in runs_root.glob("*/multirun.yaml")]
    return max([int(j) for j in jobs], default=1)


def clocks_not_judged(claims: list[Claim], shared: int, verdict: str) -> list[Claim]:
    """The claims, those read from the runs' own clocks as `verdict` with the reason (the numbers kept after
    it) when `shared` > 1 runs trained at a time."""
    if shared <= 1:
        return claims
    why = (f"{verdict}: the runs shared the machine ({shared} at a time), so their own clocks are not comparable "
           "(the side-by-side step times are: speed.json)")
    return [replace(c, verdict=verdict, numbers=f"{why}. Measured: {c.numbers}") if c.claim.startswith(CLOCK_CLAIMS)
            else c for c in claims]


def speed_section(speed: dict, command: str) -> list[str]:
    """The side-by-side step times (speed.json), the time columns of a page whose runs shared the machine:
    one row per task and norm; `command` times them where there are none."""
    if not speed:
        return [f"No side-by-side step times (speed.json): run `{command}`."]
    rows = []
    for task in TASK_ORDER:
        measured = speed.get(task)
        if measured is None:
            continue
        ln = statistics.median(measured.times_ms.get("layernorm", [float("nan")]))
        for norm, times in sorted(measured.times_ms.items(), key=lambda kv: kv[0] != "layernorm"):
            median = statistics.median(times)
            rows.append(f"| {task} | {norm} | {median:.1f} | {(ln - median) / ln:+.1%} | {len(times)} |")
    return ["| task | norm | ms / step (median, side by side) | (T_LN - T_X) / T_LN | steps timed |",
            "|---|---|---|---|---|", *rows]


def timings_table(timings: dict) -> list[str]:
    """Markdown lines of how long each sweep took (name -> (exit code, seconds)); none without timings."""
    if not timings:
        return []
    return ["", "| sweep | exit code | minutes |", "|---|---|---|",
            *(f"| {name} | {code} | {seconds / 60:.1f} |" for name, (code, seconds) in timings.items()),
            f"| total | | {sum(s for _, s in timings.values()) / 60:.1f} |"]


class TimedBar:
    """A tqdm bar with an ETA over steps of estimated seconds (the sweeps of `make demo` or `make small`):
    within a step it moves with the clock, never past that step's estimate; a finished step jumps to its end.

        with TimedBar({"rnnsearch": 380.0, "reader": 50.0}, "demo") as bar:
            with bar.step("rnnsearch"):
                train()
    """

    TICK_S = 2.0

    def __init__(self, estimates: dict[str, float], desc: str):
        from tqdm import tqdm

        self.estimates, self.done_s = estimates, 0.0
        self.bar = tqdm(total=max(1, round(sum(estimates.values()))), desc=desc, unit="s", file=sys.stderr,
                        dynamic_ncols=True,
                        bar_format="{desc}: {percentage:3.0f}%|{bar}| {elapsed} so far, about {remaining} left{postfix}")

    def __enter__(self) -> "TimedBar":
        return self

    def __exit__(self, *exc: object) -> None:
        self.bar.close()

    @contextlib.contextmanager
    def step(self, name: str):
        import threading

        self.bar.set_postfix_str(name)
        stop, start = threading.Event(), time.monotonic()

        def tick() -> None:
            while not stop.wait(self.TICK_S):
                self._show(min(time.monotonic() - start, self.estimates[name]))

        ticker = threading.Thread(target=tick, daemon=True)
        ticker.start()
        try:
            yield
        finally:
            stop.set()
            ticker.join()
            self.done_s += self.estimates[name]
            self._show(0.0)

    def _show(self, within_step: float) -> None:
        self.bar.n = min(self.bar.total, round(self.done_s + within_step))
        self.bar.refresh()

    def write(self, line: str) -> None:
        """A line above the bar (a sweep's outcome), not through it."""
        self.bar.write(line, file=sys.stderr)
