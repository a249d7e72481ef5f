"""make small: the paper's translation claims on real language (Multi30k En-De), CPU tens of minutes.

    python -m rmsnorm_repro.report.small                          # train both sweeps, then write the report
    python -m rmsnorm_repro.report.small --data-root DIR --seeds 1,2 --jobs 2
    python -m rmsnorm_repro.report.small --report-only            # rewrite results/small/REPORT.md from the runs

RNNSearch and the Transformer, each x {none, layernorm, rmsnorm, prmsnorm} x seeds, at scale=small
(configs/task_scale/<task>/small.yaml: 20 minutes a run, training plus the final beam decode). One
multirun per task (Hydra composes a sweep over tasks with the default task first), runs under
<out>/runs/<task>/<norm>-p<p>-s<seed>/, one log per sweep under <out>/runs/logs/; rerunning resumes.
The data: a raw Multi30k folder (--data-root, train/val[/test_*].en/.de[.gz]) when it exists, else the
hub copy (`make data-multi30k`). The report, in the mini report's form (demo.py, tables.py,
figures.py, claims.py), gives BLEU (beam, sacreBLEU signature) on every split the runs scored, step
time with intervals, valid-BLEU curves against steps and wall-clock, and the paper's translation
claims checked on real language.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from . import figures as figs
from .aggregate import Group, Run, describe_env, group_runs
from .claims import (FAILS, HOLDS, LEARNED_BLEU, UNSURE, Claim, _by_norm, _fmt, convergence_claim, speed_claims,
                     transformer_baseline_claim)
from .claims import markdown as claims_markdown
from .demo import ROOT, finished_at, load_timings, run_logged, runs_of, save_timings, timings_table
from .sweep import TimedBar
from ..atomic import atomic_write_text
from ..record import shown_source
from ..runner import precision
from .tables import FAILS as FAILS_CELL, fmt_our_time, fmt_stat, layernorm_of, table

TASKS = ("rnnsearch", "transformer")
NORMS = ("none", "layernorm", "rmsnorm", "prmsnorm")
TITLES = {"rnnsearch": "RNNSearch (the paper's Tables 2 and 3, on Multi30k)",
          "transformer": "Transformer (the paper's Table 4, on Multi30k)"}
# The BLEU the claims compare, the first every compared run has: a test set (the hub's `test` and the raw
# layout's test_2016_flickr are the same 1,000 sentences), else the whole valid set, both with beam search.
PRIMARY = ("test_bleu", "test_2016_flickr_bleu", "test_2017_flickr_bleu", "valid_beam_bleu")
# With one seed per norm there is no noise estimate: two BLEU scores "match" within this many points
# (the paper's Tables 2 and 4 put LayerNorm, RMSNorm and pRMSNorm within 0.5 BLEU of each other).
SINGLE_SEED_TOLERANCE = 1.0
DEFAULT_DATA_ROOT = Path("data") / "multi30k"
# minutes a run takes in all, training (train.max_minutes: 15) plus the final beam decode (measured: ~16.5)
RUN_MINUTES = 17.0


@dataclass(frozen=True)
class Setup:
    data_root: Path | None      # a raw Multi30k folder, None: the hub copy
    seeds: str                  # "1" or "1,2"
    jobs: int                   # runs at a time
    threads: int                # OpenMP threads a run
    precision: str              # train.precision
    max_minutes: float | None   # None: the scale's train.max_minutes
    extra: tuple[str, ...] = ()


def sweep_command(task: str, runs_root: Path, setup: Setup) -> list[str]:
    """One multirun: the task x the four norms x the seeds at scale=small, jobs named <norm>-p<p>-s<seed>."""
    data = ["data=multi30k"] + ([f"data.root={setup.data_root.resolve()}"] if setup.data_root else [])
    launcher = (["launcher=joblib", f"hydra.launcher.n_jobs={setup.jobs}"] if setup.jobs > 1 else ["launcher=basic"])
    budget = [f"train.max_minutes={setup.max_minutes:g}"] if setup.max_minutes is not None else []
    return [sys.executable, "-m", "rmsnorm_repro.train", "-m", f"task={task}", f"norm={','.join(NORMS)}",
            f"seed={setup.seeds}", "scale=small", *data, f"train.precision={setup.precision}", *launcher, *budget,
            f"hydra.sweep.dir={runs_root / task}", "hydra.sweep.subdir=${norm.name}-p${norm.p}-s${seed}", *setup.extra]


# Reading the runs -------------------------------------------------------------------------------
def split_metrics(runs: list[Run]) -> list[str]:
    """The beam BLEU metrics the runs scored, valid first: valid_beam_bleu, then test_bleu or <split>_bleu."""
    names = {k for run in runs for k, v in (run.summary.get("final") or {}).items()
             if k.endswith("_bleu") and k != "valid_bleu" and isinstance(v, (int, float))}
    return sorted(names, key=lambda k: (k != "valid_beam_bleu", k))


def split_label(metric: str) -> str:
    return "valid" if metric == "valid_beam_bleu" else metric[: -len("_bleu")]


def splits_line(runs: list[Run]) -> str:
    """Which splits the runs were scored on, from their summaries (data_info and the final metrics)."""
    tests = sorted({str((run.summary.get("data_info") or {}).get("tests")) for run in runs
                    if (run.summary.get("data_info") or {}).get("tests")})
    sources = sorted({shown_source(str((run.summary.get("data_info") or {}).get("data"))) for run in runs
                      if (run.summary.get("data_info") or {}).get("data")})
    metrics = [m for m in split_metrics(runs) if m != "valid_beam_bleu"]
    used = "valid (the whole split) and " + ", ".join(f"`{split_label(m)}`" for m in metrics) if metrics else \
        "**valid only**: the data had no test files, so every BLEU here is on the validation set the runs also " \
        "selected their weights on (an optimistic estimate)"
    return (f"Data: {', '.join(sources) or 'not recorded'}. Splits scored with beam search: {used}"
            + (f" (data_info.tests: {'; '.join(tests)})" if tests else "") + ".")


def final_eval_minutes(run: Run) -> float | None:
    """Minutes the run spent after training: summary wall_s minus the wall_s of its last logged step."""
    wall, train = run.summary.get("wall_s"), train_minutes(run)
    if not isinstance(wall, (int, float)) or train is None:
        return None
    return max(0.0, wall / 60 - train)


def _mean(values: list[float | None]) -> float | None:
    values = [v for v in values if v is not None and math.isfinite(v)]
    return sum(values) / len(values) if values else None


def train_minutes(run: Run) -> float | None:
    """Minutes of training (steps and periodic evaluations): the wall_s of the last logged step."""
    points = run.points("loss", "wall_s")
    return points[-1][1] / 60 if points else None


def _minutes(group: Group) -> str:
    train = _mean([train_minutes(run) for run in group.runs])
    final = _mean([final_eval_minutes(run) for run in group.runs])
    if train is None:
        return "-"
    return f"{train:.1f} + {final:.1f}" if final is not None else f"{train:.1f}"


def task_table(task: str, groups: list[Group]) -> list[str]:
    metrics = split_metrics([run for g in groups for run in g.runs])
    header = ["model", "runs", "steps"] + [f"{split_label(m)} BLEU (beam)" for m in metrics] + \
        ["best valid BLEU (greedy, eval steps)", "s / 1k steps [95%] (speed-up)", "minutes: train + final eval"]
    body = []
    for group in groups:
        steps = _mean([run.summary.get("steps") for run in group.runs])
        cells = [group.label, group.status_note(), f"{steps:.0f}" if steps is not None else "-"]
        for metric in metrics:
            cells.append(FAILS_CELL if group.fails_to_train else fmt_stat(group.stat(metric)))
        cells.append(FAILS_CELL if group.fails_to_train else fmt_stat(group.stat("bleu", "best")))
        cells.append(fmt_our_time(group, layernorm_of(groups, group), "1k steps"))
        cells.append(_minutes(group))
        body.append(cells)
    return table(header, body)



# The paper's translation claims on real language ---------------------------------------------------
def _primary(a: Group, b: Group) -> str | None:
    return next((m for m in PRIMARY if a.stat(m) is not None and b.stat(m) is not None), None)


def match_claim(task: str, groups: list[Group], norm: str, against: str, claim: str) -> Claim:
    """`norm`'s BLEU matches `against`'s: with 2+ seeds each, |difference| <= 2 standard errors of it (as
    claims.within_noise_claims); with a single seed, within SINGLE_SEED_TOLERANCE BLEU (no noise estimate).
    "cannot tell" while neither reached LEARNED_BLEU (two untrained models match trivially)."""
    norms = _by_norm(groups, task)
    if norm not in norms or against not in norms:
        return Claim(claim, UNSURE, f"needs {task} runs of {against} and {norm}")
    a, b = norms[against], norms[norm]
    if b.fails_to_train:
        return Claim(claim, FAILS, f"every {norm} run diverged")
    metric = _primary(a, b)
    if metric is None:
        return Claim(claim, UNSURE, f"no completed {task} runs with beam BLEU for both {against} and {norm}")
    sa, sb = a.stat(metric), b.stat(metric)
    numbers = f"{a.label} {_fmt(sa)}, {b.label} {_fmt(sb)} (`{metric}`)"
    if max(sa.mean, sb.mean) < LEARNED_BLEU:
        return Claim(claim, UNSURE, f"{numbers}; neither reached BLEU {LEARNED_BLEU:g}: nothing learned to compare")
    diff = abs(sa.mean - sb.mean)
    if sa.n >= 2 and sb.n >= 2:
        bound = 2 * math.sqrt(sa.std ** 2 / sa.n + sb.std ** 2 / sb.n)
        return Claim(claim, HOLDS if diff <= bound else FAILS,
                     f"{numbers}; |difference| {diff:.2f} vs 2 standard errors {bound:.2f}")
    return Claim(claim, HOLDS if diff <= SINGLE_SEED_TOLERANCE else FAILS,
                 f"{numbers}; |difference| {diff:.2f} vs {SINGLE_SEED_TOLERANCE:g} BLEU (one seed: no noise "
                 f"estimate; SEEDS=1,2 gives one)")


def small_claims(runs: list[Run]) -> list[Claim]:
    groups = group_runs(runs)
    claims = []
    for task, name in (("rnnsearch", "RNNSearch"), ("transformer", "Transformer")):
        claims.append(match_claim(task, groups, "rmsnorm", "layernorm", f"{name}: RMSNorm's BLEU matches LayerNorm's"))
        claims.append(match_claim(task, groups, "prmsnorm", "layernorm",
                                  f"{name}: pRMSNorm (p = 6.25%) holds up: its BLEU matches LayerNorm's"))
    claims.append(transformer_baseline_claim(groups, PRIMARY))
    claims.append(convergence_claim(groups))
    claims += [c for c in speed_claims(groups) if c.claim.startswith(TASKS)]
    return claims


# The page ------------------------------------------------------------------------------------------
def _signatures(runs: list[Run]) -> str:
    return "; ".join(sorted({str(run.summary["bleu_signature"]) for run in runs if run.summary.get("bleu_signature")})) \
        or "not recorded"


def _recipe(runs: list[Run]) -> str:
    """The sizes the runs trained with, from their config.yaml (the first run's; a sweep shares them)."""
    if not runs:
        return "-"
    cfg = runs[0].config
    model, train, optim = cfg.get("task", {}).get("model", {}), cfg.get("train", {}), cfg.get("optim", {})
    decode = cfg.get("task", {}).get("decode", {})
    if runs[0].task == "transformer":
        size = (f"{model.get('encoder_layers')}+{model.get('decoder_layers')} layers, d {model.get('d_model')}, "
                f"ffn {model.get('ffn_dim')}, {model.get('heads')} heads, {train.get('batch_tokens')}-token batches, "
                f"peak lr {optim.get('lr')} after {optim.get('schedule', {}).get('warmup_steps')} warm-up steps")
    else:
        size = (f"emb {model.get('emb')}, hidden {model.get('hidden')}, batch {train.get('batch_size')} sentences, "
                f"lr {optim.get('lr')}")
    vocab = cfg.get("data", {}).get("vocab_size")
    return (f"{size}, dropout {model.get('dropout')}, joint BPE {vocab}, beam {decode.get('beam')}; "
            f"train.max_minutes {train.get('max_minutes')}, precision {train.get('precision')}")


def write_report(out: Path, timings: dict[str, tuple[int, float]]) -> Path:
    """<out>/REPORT.md from the runs under <out>/runs/<task>/ (figures under <out>/figures)."""
    runs_root, fig_dir = out / "runs", out / "figures"
    runs = {task: runs_of(runs_root, task) for task in TASKS}
    everything = [run for task in TASKS for run in runs[task]]
    lines = ["# Root Mean Square Layer Normalization: the small tier, real language (Multi30k En-De)", "",
             f"Written by `make small` (`python -m rmsnorm_repro.report.small`) from {len(everything)} runs under "
             f"`{runs_root.relative_to(out)}/`, the last finished {finished_at(everything)}.  ",
             f"Machine: {describe_env(everything)}.  ",
             splits_line(everything), "",
             "Everything here is scale=small: the paper's two translation models, shrunk to train in 20 minutes a run "
             "(training and the final beam decode) on a CPU, on Multi30k's 29,000 English-German image captions "
             "instead of WMT14's 4.5M sentence pairs. BLEU is not comparable with the paper's WMT14 numbers; what "
             "can be compared is what the paper claims: which norm trains, which matches which. Runs stop on a "
             "wall-clock budget (`train.max_minutes`), so a faster norm gets more steps. Step times on a shared CPU "
             "are noisy."]
    lines += timings_table(timings)

    lines += ["", "## The paper's translation claims on Multi30k", "", *claims_markdown(small_claims(everything), "on Multi30k")]
    lines += ["", f"BLEU: sacreBLEU, detokenized, case-sensitive ({_signatures(everything)}), beam search with "
              "`task.decode.beam` on whole splits; the eval-step curves are greedy on the first "
              "`task.decode.valid_sentences` valid sentences."]

    for task in TASKS:
        lines += ["", f"## {TITLES[task]}", ""]
        task_runs = runs[task]
        if not task_runs:
            lines.append(f"No runs: the `{task}` sweep produced none (see runs/logs/{task}.log).")
            continue
        groups = group_runs(task_runs)
        lines += [f"Recipe (configs/task_scale/{task}/small.yaml): {_recipe(task_runs)}.  ",
                  "Ours: mean ± sample std over seeds (one value: a single run); \"runs\" counts completed runs; "
                  f"a row whose every run diverged reads \"{FAILS_CELL}\". Step time: each run's median, with a "
                  "95% interval; speed-up (T_LN - T_X) / T_LN, \"within noise\" when its interval holds 0.", ""]
        lines += task_table(task, groups)
        drawer = figs._curves_figure(
            f"{TITLES[task].split(' (')[0]} on Multi30k: valid BLEU (greedy) and training loss",
            [("bleu", "step", "valid BLEU against steps"), ("bleu", "wall_s", "valid BLEU against wall-clock"),
             ("loss", "step", "training loss against steps"), ("loss", "wall_s", "training loss against wall-clock")])
        path = fig_dir / f"{task}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        if drawer(group_runs(figs.unique_runs(task_runs)), path):
            lines += ["", f"![{task}]({Path(os.path.relpath(path, out)).as_posix()})"]
    path = out / "REPORT.md"
    atomic_write_text(path, "\n".join(lines) + "\n")
    return path


def default_precision() -> str:
    """bf16 where the CPU has AMX (fast bf16 matrix products), else fp32."""
    return "bf16" if precision.cpu_bf16_matmul() == "amx" else "fp32"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rmsnorm_repro.report.small", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "small", help="runs, figures and REPORT.md go here")
    parser.add_argument("--data-root", type=Path, default=DEFAULT_DATA_ROOT,
                        help="a raw Multi30k folder (train/val[/test_*].en/.de[.gz]); when it does not exist, the hub "
                             "copy (make data-multi30k) is used (default: %(default)s)")
    parser.add_argument("--seeds", default="1", help="seeds, comma-separated (default: %(default)s)")
    parser.add_argument("--jobs", type=int, default=2, help="runs at a time (default: %(default)s)")
    parser.add_argument("--threads", type=int, default=None, help="OpenMP threads a run (default: cores / jobs)")
    parser.add_argument("--precision", default=None, help="train.precision (default: bf16 with AMX, else fp32)")
    parser.add_argument("--max-minutes", type=float, default=None, help="train.max_minutes (default: the scale's)")
    parser.add_argument("--only", nargs="*", default=None, choices=TASKS, help="train only these tasks")
    parser.add_argument("--report-only", action="store_true", help="skip training; rewrite the report from the runs")
    parser.add_argument("overrides", nargs="*", help="more overrides for every run (key=value)")
    args = parser.parse_args(argv)
    if args.jobs < 1 or (args.threads is not None and args.threads < 1):
        print("small: --jobs and --threads must be at least 1", file=sys.stderr)
        return 2
    timings = load_timings(args.out)
    trained: dict[str, tuple[int, float]] = {}
    if not args.report_only:
        root = args.data_root if args.data_root.is_dir() else None
        data = (f"data=multi30k data.root={root}" if root else
                f"data=multi30k, the hub copy ({args.data_root} does not exist; `make data-multi30k` fetches it once)")
        print(f"small: {data}", flush=True)
        setup = Setup(root, args.seeds, args.jobs, args.threads or max(1, (os.cpu_count() or 1) // args.jobs),
                      args.precision or default_precision(), args.max_minutes, tuple(args.overrides))
        tasks = [task for task in TASKS if args.only is None or task in args.only]
        runs = len(NORMS) * len(setup.seeds.split(","))  # a task's sweep
        rounds = math.ceil(runs / setup.jobs)
        expected = {t: timings[t][1] if t in timings else 60 * RUN_MINUTES * rounds for t in tasks}
        print(f"small: {runs * len(tasks)} runs ({' and '.join(tasks)} x {', '.join(NORMS)} x seeds {setup.seeds}) into "
              f"{args.out / 'runs'}, {setup.jobs} at a time with {setup.threads} thread(s) each, {setup.precision}; "
              f"about {sum(expected.values()) / 60:.0f} minutes (finished runs are not trained again)", flush=True)
        with TimedBar(expected, "small") as bar:
            for task in tasks:
                log = args.out / "runs" / "logs" / f"{task}.log"
                with bar.step(task):
                    code, seconds = run_logged(sweep_command(task, args.out / "runs", setup), log, setup.threads)
                trained[task] = timings[task] = (code, seconds)
                save_timings(args.out, timings)
                bar.write(f"small: {task} {'done' if code == 0 else f'FAILED (exit {code})'} in {seconds / 60:.1f} min; "
                          f"log: {log}")
    if not any((args.out / "runs" / task).is_dir() for task in TASKS):
        print(f"small: no runs under {args.out / 'runs'}: nothing to report", file=sys.stderr)
        return 1
    path = write_report(args.out, {t: timings[t] for t in TASKS if t in timings})
    print(f"small: wrote {path}")
    return 0 if all(code == 0 for code, _ in trained.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
