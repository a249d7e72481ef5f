"""make demo: every table and figure of the paper at scale=mini on synthetic data, offline, on CPU.

    python -m rmsnorm_repro.campaigns.demo                 # train the sweeps, then write the report
    python -m rmsnorm_repro.campaigns.demo --report-only   # rewrite results/mini/REPORT.md from the runs

One multirun per sweep (one process, so each task imports once), jobs in parallel through the joblib
launcher, runs under results/mini/runs/<sweep>/ (rerunning resumes: finished runs only re-evaluate).
The report puts each table beside the paper's, embeds each figure, and says for each of the paper's
claims whether it holds at this scale (report/claims.py), with the numbers.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from omegaconf import OmegaConf

from ..atomic import atomic_write_text, cannot_write
from ..launchers.sweep import job_count
from ..norms import table1
from ..paths import configs_dir
from ..report import figures as figs
from ..report.aggregate import describe_env
from ..report.claims import TASK_ORDER, judge, markdown as claims_markdown
from ..report.tables import PAGES, render_page
from .common import (ROOT, Damaged, TimedBar, damaged_lines, finished_at, load_speed, load_timings, measure_speed,
                     report_damaged, run_logged, runs_of, save_timings, timings_table)


@dataclass(frozen=True)
class Sweep:
    name: str                    # runs directory under <out>/runs
    experiment: str              # configs/experiment/<experiment>.yaml
    overrides: tuple[str, ...]   # narrows the preset to the demo's budget


# 41 runs, about 32 CPU-minutes, 17 minutes on 2 free cores (AMD EPYC; CPU seconds per mini run, measured
# earlier: rnnsearch ~100, transformer ~45, convpool ~30, reader ~23, retrieval ~20). Two seeds where the
# claims need a noise estimate (RNNSearch with Table 2's six models, so L2-Norm's and WeightNorm's claims
# are judged too; the Transformer; Figure 4's two norms), one elsewhere; Figure 3 (RNNSearch, the costliest
# task) at two values of p, its noise pooled with Table 2's seeds.
SWEEPS = (
    Sweep("rnnsearch", "table2", ("norm=none,layernorm,l2norm,weightnorm,rmsnorm,prmsnorm", "seed=1,2")),
    Sweep("transformer", "table4", ("seed=1,2",)),
    Sweep("reader", "table6", ("seed=1",)),
    Sweep("retrieval", "table7", ("seed=1",)),
    Sweep("convpool", "table9", ("seed=1",)),
    Sweep("rnnsearch-table3", "table3", ("seed=1,2",)),
    Sweep("rnnsearch-fig3", "fig3", ("norm.p=0.25,1.0",)),
    Sweep("rnnsearch-fig4", "fig4", ()),
)
# minutes each sweep took on a quiet 2-core AMD EPYC, 2 jobs (rnnsearch-table3: 14 of its 16 runs in 2.8 min
# on a 2-core Xeon): the progress bar's estimate until a sweep has a time of its own (runs/logs/timings.json)
EXPECTED_MINUTES = {"rnnsearch": 9.5, "transformer": 2.6, "reader": 0.8, "retrieval": 0.5, "convpool": 1.2,
                    "rnnsearch-table3": 3.2, "rnnsearch-fig3": 1.1, "rnnsearch-fig4": 2.4}
# report section -> the sweep whose runs it reads
PAGE_SWEEP = {"table2": "rnnsearch", "table3": "rnnsearch-table3", "table4": "transformer", "table5": "rnnsearch",
              "table6": "reader", "table7": "retrieval", "table8": "retrieval", "table9": "convpool",
              "table10": "convpool", "fig1": "rnnsearch", "fig3": "rnnsearch-fig3", "fig4": "rnnsearch-fig4"}


def sweep_runs(sweep: Sweep) -> int:
    """How many runs a sweep has: its preset's sweep values, narrowed by the demo's overrides."""
    preset = OmegaConf.load(configs_dir() / "experiment" / f"{sweep.experiment}.yaml")
    params = {str(k): v for k, v in OmegaConf.select(preset, "hydra.sweeper.params", default={}).items()}
    params.update(line.split("=", 1) for line in sweep.overrides)
    return job_count(params)[0]


def run_sweep(sweep: Sweep, runs_root: Path, logs: Path, jobs: int, max_minutes: float) -> tuple[int, float]:
    """Train one sweep, its output into logs/<name>.log; returns (exit code, seconds)."""
    command = [sys.executable, "-m", "rmsnorm_repro.train", "-m", f"experiment={sweep.experiment}", "scale=mini",
               "data=synthetic", "launcher=joblib", f"hydra.launcher.n_jobs={jobs}",
               f"hydra.sweep.dir={runs_root / sweep.name}", f"train.max_minutes={max_minutes}", *sweep.overrides]
    return run_logged(command, logs / f"{sweep.name}.log", threads=1)


def write_report(out: Path, timings: dict[str, tuple[int, float]], damaged: Damaged | None = None) -> Path:
    """results/mini/REPORT.md from the runs under out/runs (figures under out/figures). What cannot be
    read is left out, named in the report and appended to `damaged`."""
    damaged = [] if damaged is None else damaged
    runs_root, fig_dir = out / "runs", out / "figures"
    runs = {sweep.name: runs_of(runs_root, sweep.name, damaged) for sweep in SWEEPS}
    speed = load_speed(out, damaged)
    everything = [run for group in runs.values() for run in group]
    lines = ["# Root Mean Square Layer Normalization: the mini reproduction", "",
             f"Written by `make demo` (`python -m rmsnorm_repro.campaigns.demo`) from {len(everything)} runs under "
             f"`{runs_root.relative_to(out)}/`, the last finished {finished_at(everything)}.  ",
             f"Machine: {describe_env(everything)}.", "",
             "Everything here is scale=mini: models a few hundred times smaller than the paper's, trained for a few "
             "hundred steps on generated (synthetic) data, on CPU. Absolute numbers are not comparable with the "
             "paper's; what can be compared is direction: which norm trains, which converges first, which is faster "
             "per step. A \"matches\" claim holds when the 90% interval of the difference of the seeds' means lies "
             "inside the task's margin, fails when it lies outside, and cannot tell otherwise (the small report uses "
             "the same rules, report/claims.py; each rule's error rates: docs/verdicts.md); a direction (below, "
             "slower) holds when the 95% interval lies on the claimed side of 0. Speed claims are judged only from "
             "steps timed side by side in one process after the sweeps (speed.json: the norms in balanced order on "
             "the same batches, rounds as blocks), each stating the smallest speed-up it could decide: the runs' own "
             "step times, from runs that shared the machine at different times, are shown, not judged. The claims "
             "table is what `rmsnorm-report claims runs --speed speed.json --table1` prints. pRMSNorm's 6.25% of a "
             "mini layer is as few as 4 features (d = 64; the paper's layers give it 32 to 64), so its statistic is much noisier here than in the paper. Reproduce a table at the paper's "
             "scale with `make table4 SCALE=paper` (see README)."]
    lines += damaged_lines(damaged, out)
    lines += timings_table(timings)

    claims = judge(everything, speed, table1=True)  # what `rmsnorm-report claims` prints for these runs
    lines += ["", "## The paper's claims at mini scale", "", *claims_markdown(claims, "at mini scale")]

    text, _ = table1.render(table1.compute(), table1.read_paper(), seed=0)
    lines += ["", text.replace("# Table 1", "## Table 1", 1).rstrip()]
    embedded: set[str] = set()
    for name, sweep in PAGE_SWEEP.items():
        page_runs = runs[sweep]
        if not [r for r in page_runs if r.task == PAGES[name].task]:
            lines += ["", f"## {PAGES[name].title}", "", f"No runs: the `{sweep}` sweep produced none (see runs/logs/{sweep}.log)."]
            continue
        why = PAGES[name].why_not(page_runs)  # runs of another setting (a p sweep cut to one p) mislabel a page
        if why is not None:
            lines += ["", f"## {PAGES[name].title}", "", f"Not shown: {name} {why} (see runs/logs/{sweep}.log)."]
            continue
        paths = {}
        for figure in PAGES[name].figures:
            if figure not in embedded:  # each figure once, in the first section that shows it
                paths[figure] = figs.draw(figure, page_runs, fig_dir / f"{figure}.png")
                embedded.add(figure)
        lines += ["", render_page(name, page_runs, str((runs_root / sweep).relative_to(out)), paths, out, heading="##").rstrip()]
    path = out / "REPORT.md"
    atomic_write_text(path, "\n".join(lines) + "\n")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rmsnorm_repro.campaigns.demo", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "mini", help="runs, figures and REPORT.md go here")
    parser.add_argument("--jobs", type=int, default=2, help="runs in parallel (one core each)")
    parser.add_argument("--max-minutes", type=float, default=3.0, help="wall-clock cap per run (train.max_minutes)")
    parser.add_argument("--report-only", action="store_true", help="skip training; rewrite the report from the runs")
    parser.add_argument("--only", nargs="*", default=None, help=f"train only these sweeps: {', '.join(s.name for s in SWEEPS)}")
    parser.add_argument("--speed", action="store_true",
                        help="with --report-only: time the norms side by side again (speed.json) before writing the report")
    args = parser.parse_args(argv)
    unknown = set(args.only or ()) - {s.name for s in SWEEPS}
    if unknown:
        print(f"demo: unknown sweep(s) {', '.join(sorted(unknown))}; choose from {', '.join(s.name for s in SWEEPS)}",
              file=sys.stderr)
        return 2
    timings = load_timings(args.out)  # sweeps not trained now keep the time of their last training
    trained: dict[str, tuple[int, float]] = {}
    if not args.report_only:
        plan = [sweep for sweep in SWEEPS if args.only is None or sweep.name in args.only]
        expected = {s.name: timings[s.name][1] if s.name in timings else 60 * EXPECTED_MINUTES[s.name] for s in plan}
        logs = args.out / "runs" / "logs"
        print(f"demo: {sum(sweep_runs(s) for s in plan)} runs in {len(plan)} sweeps ({', '.join(s.name for s in plan)}) "
              f"into {args.out / 'runs'}, {args.jobs} at a time, about {sum(expected.values()) / 60:.0f} minutes "
              f"(finished runs are not trained again); one log per sweep in {logs}", flush=True)
        with TimedBar(expected, "demo") as bar:
            for sweep in plan:
                with bar.step(sweep.name):
                    code, seconds = run_sweep(sweep, args.out / "runs", logs, args.jobs, args.max_minutes)
                trained[sweep.name] = timings[sweep.name] = (code, seconds)
                save_timings(args.out, timings)
                bar.write(f"demo: {sweep.name} {'done' if code == 0 else f'FAILED (exit {code})'} in "
                          f"{seconds / 60:.1f} min; log: {logs / (sweep.name + '.log')}")
    if not args.report_only or args.speed:
        print("demo: timing LayerNorm, RMSNorm and pRMSNorm side by side for the speed claims (a few minutes)", flush=True)
        measure_speed(args.out, list(TASK_ORDER), "mini", ["data=synthetic"], threads=1)
    if args.report_only and not any((args.out / "runs" / s.name).is_dir() for s in SWEEPS):
        print(f"demo: no runs under {args.out / 'runs'}: nothing to report (train them with `make demo`, or check --out)",
              file=sys.stderr)
        return 1
    damaged: Damaged = []
    try:
        path = write_report(args.out, {s.name: timings[s.name] for s in SWEEPS if s.name in timings}, damaged)
    except OSError as err:
        print(f"demo: {cannot_write(err, 'choose a folder you can write to with --out')}", file=sys.stderr)
        return 2
    report_damaged(damaged, "demo")
    print(f"demo: wrote {path}")
    return 0 if all(code == 0 for code, _ in trained.values()) and not damaged else 1


if __name__ == "__main__":
    sys.exit(main())
