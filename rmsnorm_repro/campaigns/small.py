"""make small: the paper's translation claims on real language (Multi30k En-De), CPU tens of minutes.

    python -m rmsnorm_repro.campaigns.small                          # train both sweeps, then write the report
    python -m rmsnorm_repro.campaigns.small --data-root DIR --seeds 1,2,3 --jobs 2
    python -m rmsnorm_repro.campaigns.small --report-only            # rewrite results/small/REPORT.md from the runs
    python -m rmsnorm_repro.campaigns.small --speed --data-root DIR  # time the norms side by side again, then rewrite it

One multirun per task (Hydra composes a sweep over tasks with the default task first) of the four norms x
seeds at scale=small, then side-by-side step times (<out>/speed.json), sacreBLEU's paired bootstrap per
seed (<out>/bootstrap.json) and the report in the mini report's form (docs/small_study.md).
"""
from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from omegaconf import OmegaConf

from ..atomic import atomic_write_text, cannot_write
from ..host import cpu_bf16_matmul, cpu_name
from ..paths import configs_dir
from ..record import ABSENT, flatten, shown_source
from ..report import figures as figs
from ..report.aggregate import TRAIN_LOSS, Group, Run, describe_env, group_runs
from ..report.claims import judge, markdown as claims_markdown
from ..report.significance import bootstrap_notes
from ..report.tables import FAILS as FAILS_CELL, fmt_our_time, fmt_stat, layernorm_of, runs_cell, table
from ..runner.optim import describe_schedule
from .common import (ROOT, Damaged, TimedBar, clocks_not_judged, damaged_lines, finished_at, load_speed, load_timings,
                     measure_speed, report_damaged, run_logged, runs_of, save_timings, shared_jobs, speed_section,
                     timings_table)

TASKS = ("rnnsearch", "transformer")
NORMS = ("none", "layernorm", "rmsnorm", "prmsnorm")
NOT_JUDGED = "not judged at small"  # a claim read from the runs' own clocks when they shared the machine
TITLES = {"rnnsearch": "RNNSearch (the paper's Tables 2 and 3, on Multi30k)",
          "transformer": "Transformer (the paper's Table 4, on Multi30k)"}
DEFAULT_DATA_ROOT = Path("data") / "multi30k"
REFERENCE_RUNS = ROOT / "results" / "small" / "runs"  # the committed report's run records
log = logging.getLogger(__name__)
# minutes a run takes in all (training, its evaluations, the final beam decode) when no run has been timed
# (run_seconds): on the 2-core AMD EPYC the Transformer's recipe takes 20-21.5 minutes a run, the RNNSearch's
# 27-30 (docs/small_study.md)
RUN_MINUTES = 25.0
# the seeds `make small` trains (the Makefile passes none unless SMALL_SEEDS is given): three a model, what
# the simulation at the committed runs' spreads needs for the Transformer's matches and Figure 1 per step
# (campaigns/calibrate.py reads it for docs/verdicts.md)
DEFAULT_SEEDS = "1,2,3"
# Figure 3's values of p on real language: every one gives pRMSNorm a k no smaller than the paper's
FIG3_PS = (0.125, 0.25, 1.0)


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
    # data.root as given (relative to the checkout, where the runs start): config.yaml records it, and a
    # committed run must not name a path of the machine it ran on
    data = ["data=multi30k"] + ([f"data.root={setup.data_root}"] if setup.data_root else [])
    launcher = (["launcher=joblib", f"hydra.launcher.n_jobs={setup.jobs}"] if setup.jobs > 1 else ["launcher=basic"])
    budget = [f"train.max_minutes={setup.max_minutes:g}"] if setup.max_minutes is not None else []
    return [sys.executable, "-m", "rmsnorm_repro.train", "-m", f"task={task}", f"norm={','.join(NORMS)}",
            f"seed={setup.seeds}", "scale=small", *data, f"train.precision={setup.precision}", *launcher, *budget,
            f"hydra.sweep.dir={runs_root / task}", "hydra.sweep.subdir=${norm.name}-p${norm.p}-s${seed}", *setup.extra]


# Reading the runs -------------------------------------------------------------------------------
P_KEY = "task.prmsnorm_p"  # the recipe's pRMSNorm p: a run records it as norm.p (summary "p")


def recipe_values(task: str) -> dict[str, object]:
    """Every value the task's small recipe sets (configs/task_scale/<task>/small.yaml), by dotted key, but its
    pRMSNorm p (recipe_p: it concerns pRMSNorm's runs only, as their norm.p)."""
    values = flatten(OmegaConf.to_container(OmegaConf.load(configs_dir() / "task_scale" / task / "small.yaml")))
    return {key: value for key, value in values.items() if key != P_KEY}


def recipe_p(task: str) -> float:
    """The p the task's small recipe gives pRMSNorm (task.prmsnorm_p in configs/task_scale/<task>/small.yaml)."""
    return float(OmegaConf.select(OmegaConf.load(configs_dir() / "task_scale" / task / "small.yaml"), P_KEY))


def trained_this_recipe(run: Run, recipe: dict[str, object]) -> bool:
    """Whether the run's config has every value of the recipe (runs of an earlier recipe time nothing now)."""
    config = flatten(run.config)
    return all(config.get(key, ABSENT) == want for key, want in recipe.items())


def this_p(run: Run) -> bool:
    """Whether the run is pRMSNorm at its recipe's p, or another norm: a pRMSNorm run at another p (the p=6.25%
    runs of the first study: k below the paper's) is not this recipe, shown but never judged."""
    return run.norm != "prmsnorm" or math.isclose(run.p, recipe_p(run.task))


def run_seconds(folder: Path) -> tuple[float, str]:
    """(seconds a run takes, where that comes from): the mean wall_s of the completed runs of today's recipe
    in folder (jobs of an earlier sweep on this setup), else of the committed report's runs (REFERENCE_RUNS,
    another machine: its CPU is named), else RUN_MINUTES."""
    recipe = recipe_values(folder.name)
    for where, label in ((folder, "earlier runs here"), (REFERENCE_RUNS / folder.name, "runs of the committed report")):
        runs = [run for run in (runs_of(where.parent, where.name) if where.is_dir() else [])
                if trained_this_recipe(run, recipe)]
        times = [run.summary["wall_s"] for run in runs
                 if run.status == "completed" and isinstance(run.summary.get("wall_s"), (int, float))]
        if times:
            return sum(times) / len(times), f"mean of {len(times)} {label}, {' | '.join(_cpus(runs))}"
    return 60 * RUN_MINUTES, "no run timed yet: the recipe's estimate"


def finished_runs(folder: Path, seeds: str) -> int:
    """How many of the sweep's jobs (<norm>-p<p>-s<seed>) in folder have finished (their summary says so)."""
    wanted = set(seeds.split(","))
    return sum(1 for run in (runs_of(folder.parent, folder.name) if folder.is_dir() else [])
               if run.status in ("completed", "diverged") and str(run.seed) in wanted and run.norm in NORMS
               and this_p(run))


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
    selection = sorted({str((run.summary.get("data_info") or {}).get("selection", "valid")) for run in runs})
    held_out = bool(selection) and all(s.startswith("dev") for s in selection)
    metrics = [m for m in split_metrics(runs) if m != "valid_beam_bleu"]
    used = "valid (the whole split)" + ("".join(f", `{split_label(m)}`" for m in metrics))
    if not held_out and not metrics:
        used += (": **the split the runs also selected their weights on** (no dev split held out, no test files: "
                 "an optimistic estimate)")
    chosen = (f"Weights chosen (best-model selection, early stopping, the curves) on {'; '.join(selection)}"
              + (": valid and the tests are scored only by weights they did not choose" if held_out else ""))
    return (f"Data: {', '.join(sources) or 'not recorded'}. {chosen}. Splits scored with beam search: {used}"
            + (f" (data_info.tests: {'; '.join(tests)})" if tests else "") + ".")


def epochs(run: Run) -> float | None:
    """Passes over the training data: steps / batches per epoch (summary data_info)."""
    per_epoch, steps = (run.summary.get("data_info") or {}).get("batches_per_epoch"), run.summary.get("steps")
    return steps / float(per_epoch) if isinstance(steps, (int, float)) and per_epoch else None


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


def task_table(task: str, groups: list[Group], own_clock: bool = True) -> list[str]:
    """One model's rows; own_clock=False (the runs shared the machine): no step times of the runs' own."""
    metrics = split_metrics([run for g in groups for run in g.runs])
    header = ["model", "runs", "steps", "epochs"] + [f"{split_label(m)} BLEU (beam)" for m in metrics] + \
        [f"best {figs.metric_label('bleu', [r for g in groups for r in g.runs])} (eval steps)",
         *(["s / 1k steps [95%] (speed-up; shown, not judged)"] if own_clock else []), "minutes: train + final eval"]
    body = []
    for group in groups:
        steps, passes = _mean([run.summary.get("steps") for run in group.runs]), _mean([epochs(run) for run in group.runs])
        cells = [group.label, runs_cell(group), f"{steps:.0f}" if steps is not None else "-",
                 f"{passes:.1f}" if passes is not None else "-"]
        for metric in metrics:
            cells.append(FAILS_CELL if group.fails_to_train else fmt_stat(group.stat(metric)))
        cells.append(FAILS_CELL if group.fails_to_train else fmt_stat(group.stat("bleu", "best")))
        if own_clock:
            cells.append(fmt_our_time(group, layernorm_of(groups, group), "1k steps"))
        cells.append(_minutes(group))
        body.append(cells)
    return table(header, body)


def runs_table(runs: list[Run]) -> list[str]:
    """Every run, one row each: where it stopped, how long it took, what it scored."""
    header = ["task", "norm", "seed", "status", "steps", "epochs", "selected step", "best dev/valid BLEU (eval steps)",
              "valid BLEU (beam)", "minutes: train + final eval"]
    body = []
    for run in sorted(runs, key=lambda r: (TASKS.index(r.task) if r.task in TASKS else 9, NORMS.index(r.norm)
                                            if r.norm in NORMS else 9, str(r.seed))):
        passes, train, final = epochs(run), train_minutes(run), final_eval_minutes(run)
        best = (run.summary.get("best") or {}).get("bleu")
        beam = (run.summary.get("final") or {}).get("valid_beam_bleu")
        norm = f"{run.norm} p={run.p:g}" if run.norm == "prmsnorm" else run.norm
        status = run.status + (" (CAPPED: train.max_minutes)" if run.capped else "") + ("" if this_p(run) else
                                                                                    " (not this recipe: p)")
        body.append([run.task, norm, str(run.seed), status,
                     str(run.summary.get("steps", "-")), f"{passes:.1f}" if passes is not None else "-",
                     str(run.summary.get("selected_step") or "-"), f"{best:.2f}" if isinstance(best, (int, float)) else "-",
                     f"{beam:.2f}" if isinstance(beam, (int, float)) else "-",
                     f"{train:.1f} + {final:.1f}" if train is not None and final is not None else "-"])
    return table(header, body)


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
                f"ffn {model.get('ffn_dim')}, {model.get('heads')} heads, {train.get('batch_tokens')}-token batches")
    else:
        size = f"emb {model.get('emb')}, hidden {model.get('hidden')}, batch {train.get('batch_size')} sentences"
    size += f", {describe_schedule(optim, train.get('steps'))}"
    vocab = cfg.get("data", {}).get("vocab_size")
    budget = f"train.steps {train.get('steps')}" + (f", train.max_minutes {train.get('max_minutes')}"
                                                     if train.get("max_minutes") else "")
    return (f"{size}, dropout {model.get('dropout')}, joint BPE {vocab}, beam {decode.get('beam')}; {budget}, "
            f"evaluation every {train.get('eval_every')} steps, dev held out: {cfg.get('data', {}).get('dev_pairs')} "
            f"pairs; precision {train.get('precision')}; trained on {' | '.join(_cpus(runs))}")


def _cpus(runs: list[Run]) -> list[str]:
    """The CPUs (or devices) the runs name in their env record: minutes depend on them."""
    return sorted({str((run.summary.get("env") or {}).get("device_name")) for run in runs})


def valid_references(run: Run) -> list[str] | None:
    """The valid split's references, read from the data the run names (None when it is not here)."""
    from ..tasks.translation.data import load_corpus

    key = json.dumps(run.config.get("data"), sort_keys=True, default=str)
    if key not in _REFERENCES:
        try:
            _REFERENCES[key] = load_corpus(run.config).valid[1]
        except Exception as e:  # the data is elsewhere or absent: cached bootstrap results only
            log.info(f"no references for the paired bootstrap ({type(e).__name__}: {e})")
            _REFERENCES[key] = None
    return _REFERENCES[key]


_REFERENCES: dict[str, list[str] | None] = {}


def seeds_lines(runs: list[Run], seeds: str = DEFAULT_SEEDS) -> list[str]:
    """Which of `seeds` each task's four norms have (finished runs of this recipe), which are missing, and the
    CPU-hours the missing ones take (one core a run: the mean wall_s of the task's finished runs), so a report
    with fewer seeds says so rather than judging on them silently."""
    wanted = seeds.split(",")
    lines, missing_all, per_run = [], 0.0, {}
    for task in TASKS:
        mine = [run for run in runs if run.task == task and run.status in ("completed", "diverged")]
        walls = [run.summary["wall_s"] for run in mine if isinstance(run.summary.get("wall_s"), (int, float))]
        per_run[task] = sum(walls) / len(walls) if walls else 60 * RUN_MINUTES
        have = {norm: sorted({str(r.seed) for r in mine if r.norm == norm and this_p(r)} & set(wanted))
                for norm in NORMS}
        missing = [(norm, seed) for norm in NORMS for seed in wanted if seed not in have[norm]]
        missing_all += len(missing) * per_run[task]
        shown = "; ".join(f"{norm}{f' p={recipe_p(task):g}' if norm == 'prmsnorm' else ''} "
                          f"{','.join(have[norm]) or 'none'}" for norm in NORMS)
        lines.append(f"- {task}: seeds present: {shown}. " + (
            f"**Missing: {len(missing)} runs** ({', '.join(f'{n} s{seed}' for n, seed in missing)}), about "
            f"{len(missing) * per_run[task] / 3600:.1f} CPU-hours (one core a run, {per_run[task] / 60:.0f} minutes "
            f"each: the mean wall_s of this task's finished runs); the claims below are judged on the seeds present"
            if missing else "none missing."))
    head = (f"Seeds {seeds} a model (`make small`'s default, campaigns/small.py DEFAULT_SEEDS) for the four "
            "norms, pRMSNorm at its recipe's p:")
    tail = ([f"Missing in all: about {missing_all / 3600:.1f} CPU-hours; `make small` trains only them "
             "(finished runs are kept)."] if missing_all else [])
    extra_ps = [p for p in FIG3_PS if not math.isclose(p, recipe_p("rnnsearch"))]
    if any(run.task == "rnnsearch" for run in runs):  # not trained by `make small`: its cost, to plan it
        extra = len(extra_ps) * len(wanted)
        tail.append(f"Figure 3 on real language (RNNSearch pRMSNorm at p = {', '.join(f'{p:g}' for p in FIG3_PS)}, "
                    f"{len(wanted)} seeds; the recipe's p shares the runs above) is not trained here: {extra} more "
                    f"runs, about {extra * per_run['rnnsearch'] / 3600:.1f} CPU-hours (train them with `python -m "
                    f"rmsnorm_repro.train -m task=rnnsearch norm=prmsnorm norm.p={','.join(f'{p:g}' for p in extra_ps)} "
                    f"seed={seeds} scale=small data=multi30k hydra.sweep.dir=results/small/runs/rnnsearch-fig3`).")
    return [head, "", *lines, *([""] + tail if tail else [])]


def other_p_lines(runs: list[Run]) -> list[str]:
    """The pRMSNorm runs at a p other than their recipe's: shown, never judged, with why and the cost to redo."""
    others = [run for run in runs if not this_p(run)]
    if not others:
        return []
    rows = sorted({(run.task, run.p) for run in others})
    return ["", "**Not this recipe:** " + "; ".join(
        f"{task} pRMSNorm p={p:g} ({sum(1 for r in others if r.task == task and r.p == p)} runs): the recipe's p is "
        f"{recipe_p(task):g}, so that pRMSNorm's k is never below the paper's (configs/task_scale/{task}/small.yaml)"
        for task, p in rows) + ". They are listed under Every run and judged in no claim; their seeds at the "
        "recipe's p are counted missing above."]


def write_report(out: Path, timings: dict[str, tuple[int, float]], damaged: Damaged | None = None) -> Path:
    """<out>/REPORT.md from the runs under <out>/runs/<task>/ (figures under <out>/figures), the
    side-by-side step times in <out>/speed.json and the paired bootstrap results (<out>/bootstrap.json).
    What cannot be read is left out, named in the report and appended to `damaged`."""
    damaged = [] if damaged is None else damaged
    runs_root, fig_dir = out / "runs", out / "figures"
    every_run = {task: runs_of(runs_root, task, damaged) for task in TASKS}
    runs = {task: [run for run in every_run[task] if this_p(run)] for task in TASKS}  # judged: this recipe's p
    everything = [run for task in TASKS for run in runs[task]]
    measured = load_speed(out, damaged)
    bootstrap = bootstrap_notes(group_runs(everything), out / "bootstrap.json", valid_references, damaged=damaged)
    shared = shared_jobs(runs_root)
    lines = ["# Root Mean Square Layer Normalization: the small tier, real language (Multi30k En-De)", "",
             f"Written by `make small` (`python -m rmsnorm_repro.campaigns.small`) from {len(everything)} runs under "
             f"`{runs_root.relative_to(out)}/`; {finished_at(everything)}.  ",
             f"Machine: {describe_env(everything)}.  ",
             splits_line(everything) + "  ",
             (f"**The runs shared the machine: {shared} at a time** (one core each; and runs of different sessions "
              "saw different loads), so a run's own clock depends on what ran beside it: the model tables show no "
              "step time of the runs' own (their minutes are a cost, not a comparison); step times come from the "
              "side-by-side check (speed.json, \"Step times side by side\" below), and the claims read from the "
              "runs' own clocks are not judged." if shared > 1 else
              "The runs trained one at a time: their own clocks are comparable."), "",
             "Everything here is scale=small: the paper's two translation models, shrunk to train on one CPU core "
             "(each run's minutes of training and final beam decode below) on Multi30k's 29,000 English-German image "
             "captions instead of WMT14's 4.5M sentence pairs. BLEU is not comparable with the paper's WMT14 numbers; "
             "what can be compared is what the paper claims: which norm trains, which matches which. Every run "
             "trains a fixed number of steps (`train.steps`), so every norm sees the same updates on any machine; "
             "minutes are reported beside them. A \"matches\" claim holds when the 90% interval of the difference "
             "of the seeds' means lies inside the margin, fails when it lies outside, and cannot tell otherwise (the "
             "mini report uses the same rules; their error rates: docs/verdicts.md); speed claims are judged only "
             "from steps timed side by side in one process (speed.json: the norms in balanced order on the same "
             "batches, rounds as blocks, on the machine named there), each stating the smallest speed-up it could "
             "decide. Each claim names the split it is scored on. The claims table is what `rmsnorm-report claims "
             "runs --speed speed.json` prints."]
    lines += ["", *seeds_lines(everything)]
    lines += other_p_lines([run for task in TASKS for run in every_run[task]])
    lines += damaged_lines(damaged, out)
    if timings:  # a sweep that continued an earlier one trained only the runs it found missing
        lines += ["", "Each task's last `make small` sweep (it trains only the runs not yet finished; each run's own "
                  "minutes are in the tables below):"]
    lines += timings_table(timings)

    lines += ["", "## The paper's translation claims on Multi30k", "", *claims_markdown(clocks_not_judged(
        judge(everything, measured, bootstrap), shared, NOT_JUDGED), "on Multi30k")]
    lines += ["", f"BLEU: sacreBLEU, detokenized, case-sensitive ({_signatures(everything)}), beam search with "
              "`task.decode.beam` on whole splits; the eval-step curves decode the first "
              "`task.decode.valid_sentences` sentences of the split that chooses the weights, greedy unless "
              "`task.decode.valid_beam` says otherwise (their axis labels say which)."]

    for task in TASKS:
        lines += ["", f"## {TITLES[task]}", ""]
        task_runs = runs[task]
        if not task_runs:
            lines.append(f"No runs: the `{task}` sweep produced none (see runs/logs/{task}.log).")
            continue
        groups = group_runs(task_runs)
        lines += [f"Recipe (configs/task_scale/{task}/small.yaml): {_recipe(task_runs)}.  ",
                  "Ours: mean ± sample std over seeds (one value: a single run); \"runs\" counts completed runs; "
                  f"a row whose every run diverged reads \"{FAILS_CELL}\"." + (
                      " Step time: each run's median, with a 95% interval; speed-up (T_LN - T_X) / T_LN, \"within "
                      "noise\" when its interval holds 0." if shared <= 1 else ""), ""]
        lines += task_table(task, groups, own_clock=shared <= 1)
        drawer = figs._curves_figure(
            f"{TITLES[task].split(' (')[0]} on Multi30k: valid BLEU (greedy) and training loss",
            [("bleu", "step", "BLEU during training against steps"), ("bleu", "wall_s", "BLEU during training against wall-clock"),
             (TRAIN_LOSS, "step", "training loss against steps"), (TRAIN_LOSS, "wall_s", "training loss against wall-clock")])
        path = fig_dir / f"{task}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        if drawer(group_runs(figs.unique_runs(task_runs)), path):
            lines += ["", f"![{task}]({Path(os.path.relpath(path, out)).as_posix()})"]
    lines += ["", "## Step times side by side", "",
              *speed_section(measured, "python -m rmsnorm_repro.campaigns.small --speed --data-root DIR")]
    lines += ["", "## Every run", "", *runs_table([run for task in TASKS for run in every_run[task]])]
    path = out / "REPORT.md"
    atomic_write_text(path, "\n".join(lines) + "\n")
    return path


def default_precision() -> str:
    """bf16 where the CPU has AMX (fast bf16 matrix products), else fp32."""
    return "bf16" if cpu_bf16_matmul() == "amx" else "fp32"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rmsnorm_repro.campaigns.small", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "small", help="runs, figures and REPORT.md go here")
    parser.add_argument("--data-root", type=Path, default=DEFAULT_DATA_ROOT,
                        help="a raw Multi30k folder (train/val[/test_*].en/.de[.gz]); when it does not exist, the hub "
                             "copy (make data-multi30k) is used (default: %(default)s)")
    parser.add_argument("--seeds", default=DEFAULT_SEEDS, help="seeds, comma-separated (default: %(default)s)")
    parser.add_argument("--jobs", type=int, default=2, help="runs at a time (default: %(default)s)")
    parser.add_argument("--threads", type=int, default=None, help="OpenMP threads a run (default: cores / jobs)")
    parser.add_argument("--precision", default=None, help="train.precision (default: bf16 with AMX, else fp32)")
    parser.add_argument("--max-minutes", type=float, default=None, help="train.max_minutes (default: the scale's)")
    parser.add_argument("--only", nargs="*", default=None, choices=TASKS, help="train only these tasks")
    parser.add_argument("--report-only", action="store_true", help="skip training; rewrite the report from the runs")
    parser.add_argument("--speed", action="store_true",
                        help="time the norms side by side again (speed.json) even when every run is finished")
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
        expected, basis = {}, []
        for task in tasks:
            per_run, source = run_seconds(args.out / "runs" / task)
            left = runs - finished_runs(args.out / "runs" / task, setup.seeds)
            expected[task] = math.ceil(left / setup.jobs) * per_run
            basis.append(f"{task} {per_run / 60:.1f} min a run ({source}), {left} to train")
        if not any(expected.values()):
            print(f"small: every run under {args.out / 'runs'} is finished (the report is rewritten from them); to train "
                  "anew on this machine, choose another folder: make small SMALL_OUT=results/small-mine", flush=True)
        print(f"small: {runs * len(tasks)} runs ({' and '.join(tasks)} x {', '.join(NORMS)} x seeds {setup.seeds}) into "
              f"{args.out / 'runs'}, {setup.jobs} at a time with {setup.threads} thread(s) each, {setup.precision}, on "
              f"{cpu_name()}; about {sum(expected.values()) / 60:.0f} minutes: {'; '.join(basis)}. Finished runs are "
              "not trained again: after a kill, rerun the same command", flush=True)
        with TimedBar(expected, "small") as bar:
            for task in [task for task in tasks if expected[task]]:  # a finished sweep is not started again
                log_path = args.out / "runs" / "logs" / f"{task}.log"
                with bar.step(task):
                    code, seconds = run_logged(sweep_command(task, args.out / "runs", setup), log_path, setup.threads)
                trained[task] = timings[task] = (code, seconds)
                save_timings(args.out, timings)
                bar.write(f"small: {task} {'done' if code == 0 else f'FAILED (exit {code})'} in {seconds / 60:.1f} min; "
                          f"log: {log_path}")
        if args.speed or any(expected.values()) or not load_speed(args.out):
            print("small: timing LayerNorm, RMSNorm and pRMSNorm side by side at these sizes for the speed claims "
                  "(a few minutes)", flush=True)
            try:
                measure_speed(args.out, tasks, "small", ["data=multi30k", *([f"data.root={root}"] if root else [])],
                              setup.threads)
            except Exception as e:  # the runs and their report matter more: say it, judge no speed claim
                print(f"small: the side-by-side timing failed ({type(e).__name__}: {e}); the speed claims read "
                      "\"cannot tell\"", file=sys.stderr)
    if not any((args.out / "runs" / task).is_dir() for task in TASKS):
        print(f"small: no runs under {args.out / 'runs'}: nothing to report", file=sys.stderr)
        return 1
    damaged: Damaged = []
    try:
        path = write_report(args.out, {t: timings[t] for t in TASKS if t in timings}, damaged)
    except OSError as err:
        print(f"small: {cannot_write(err, 'choose a folder you can write to with --out')}", file=sys.stderr)
        return 2
    print("\n".join(runs_table([run for task in TASKS for run in runs_of(args.out / "runs", task, [])])))
    report_damaged(damaged, "small")
    print(f"small: wrote {path}")
    return 0 if all(code == 0 for code, _ in trained.values()) and not damaged else 1


if __name__ == "__main__":
    sys.exit(main())
