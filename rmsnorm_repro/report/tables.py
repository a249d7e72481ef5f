"""The paper's Tables 2-10 and Figures 1-6 as Markdown pages: the paper's numbers beside ours.

Each page is a `Page` (which task's runs it reads, which columns it compares, which figures it
draws). The paper's numbers come from results/paper/<table>.csv, read as strings so that they are
shown exactly as published. Ours are mean +- sample std over seeds (completed runs), step times
over completed and diverged runs, speed-ups the paper's way: (T_LN - T_X) / T_LN. Where the runs
recorded it, a step time carries its 95% interval [lo, hi] and so does the speed-up; a speed-up
whose interval holds 0 reads "within noise" (aggregate.py says how the intervals are made).
"""
from __future__ import annotations

import csv
import json
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

from ..paths import paper_dir, table_command
from ..record import printable
from .aggregate import Group, Interval, Run, Stat, describe_env, group_runs, speedup, speedup_interval

PAPER_DIR = paper_dir()  # results/paper of the checkout, or the copy an installed wheel ships
# Steps per time unit of the paper's time columns. Table 10's unit, the epoch, depends on the data set
# size, so ours stays in seconds per 1k steps there (speed-ups are unit-free).
STEPS_PER_UNIT = {"1k steps": 1000, "0.1k steps": 100}
FAILS = "fails to train"


@dataclass(frozen=True)
class Quality:
    """One quality column: the paper's CSV column(s) and the metric names that hold ours."""

    header: str
    paper: str | None                # CSV column (prefixed per paper set), None: the paper has no number
    ours: tuple[str, ...]            # the first metric name a run reports is used
    source: str = "final"            # summary["final"] (test) or summary["best"] (best validation)
    scale: float = 1.0               # ours * scale, e.g. a fraction shown in percent
    digits: int = 1


@dataclass(frozen=True)
class Page:
    name: str
    title: str
    task: str
    qualities: tuple[Quality, ...] = ()
    time: bool = True                                # compare seconds per the paper's time unit
    paper_sets: tuple[tuple[str, str], ...] = (("", ""),)  # (label, CSV column prefix): Table 3 has two
    figures: tuple[str, ...] = ()
    render: Callable[["Page", list[Run], list[Group], list[dict]], list[str]] | None = None
    # why the task's runs are not this page's setting (None: they are): a figure of one setting
    # (a p sweep, a shifted init) drawn from runs of another would mislabel them
    unfit: Callable[[list[Run]], str | None] | None = None

    def why_not(self, runs: list[Run]) -> str | None:
        """None when the runs of this page's task are its setting, else why not (one line)."""
        mine = page_runs(self, runs)
        if not mine:
            return f"no {self.task} runs"
        return self.unfit(mine) if self.unfit is not None else None


def read_paper(name: str) -> list[dict[str, str]]:
    """The rows of results/paper/<name>.csv (strings, as published); [] when the paper has no numbers."""
    path = PAPER_DIR / f"{name}.csv"
    if not path.exists():
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


# Formatting ----------------------------------------------------------------------------------------
def fmt_stat(stat: Stat | None, scale: float = 1.0, digits: int = 1) -> str:
    if stat is None:
        return "-"
    mean, std = stat.mean * scale, stat.std * scale
    return f"{mean:.{digits}f}" if stat.n == 1 else f"{mean:.{digits}f} ± {std:.{digits}f}"


def paper_cell(row: dict[str, str] | None, column: str) -> str:
    """A published number as written; an empty cell of a row the paper marks "fails to train" says so."""
    if row is None:
        return "-"
    return row.get(column) or (FAILS if row.get("note") == FAILS else "-")


def fmt_paper_time(row: dict[str, str], prefix: str) -> str:
    mean, std, pct = (row.get(prefix + k, "") for k in ("time_mean", "time_std", "speedup_pct"))
    if not mean:
        return "-"
    return f"{mean} ± {std}" + (f" ({pct}%)" if pct else "")


def time_unit(rows: list[dict[str, str]]) -> str:
    return next((r["time_unit"] for r in rows if r.get("time_unit")), "1k steps")


def fmt_interval(interval: Interval | None, scale: float = 1.0, digits: int = 1) -> str:
    """" [lo, hi]" (with a leading space), or "" without an interval."""
    return "" if interval is None else f" [{interval.lo * scale:.{digits}f}, {interval.hi * scale:.{digits}f}]"


def fmt_speedup(group: Group, ln: Group | None) -> str:
    """" (6.9%)", with the interval where the runs have one: " (6.9% [2.1, 11.5])", and ", within noise"
    when that interval holds 0; "" for LayerNorm itself or without a LayerNorm time."""
    gain = speedup(group.time(), ln.time() if ln else None)
    if gain is None or group is ln:
        return ""
    interval = speedup_interval(group, ln)
    noise = ", within noise" if interval is not None and interval.holds_zero else ""
    return f" ({gain * 100:.1f}%{fmt_interval(interval, 100.0)}{noise})"


def fmt_our_time(group: Group, ln: Group | None, unit: str) -> str:
    stat = group.time()
    if stat is None:
        return "-"
    factor = STEPS_PER_UNIT.get(unit, 1000) / 1000.0  # s_per_1k_steps -> seconds per paper unit
    digits = 2 if stat.mean * factor < 10 else 1
    return fmt_stat(stat, factor, digits) + fmt_interval(group.time_interval(), factor, digits) + fmt_speedup(group, ln)


def fmt_our_quality(group: Group, q: Quality) -> tuple[str, str | None]:
    """(cell, metric name used); a group whose every run diverged reads "fails to train"."""
    if group.fails_to_train:
        return FAILS, None
    found = group.first_metric(q.ours, q.source)
    if found is None:
        return "-", None
    name, stat = found
    return fmt_stat(stat, q.scale, q.digits), name


def runs_cell(group: Group) -> str:
    """The "runs" cell: completed runs (Group.status_note), and how many of them the wall-clock cap stopped:
    a capped run trained fewer steps than its recipe, so it is marked wherever its group is shown."""
    capped = [run for run in group.runs if run.capped]
    if not capped:
        return group.status_note()
    steps = ", ".join(str(run.summary.get("steps", "?")) for run in capped)
    return f"{group.status_note()}; CAPPED: {len(capped)} stopped by train.max_minutes (steps {steps}), not complete"


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + ["| " + " | ".join(r) + " |" for r in rows]


# Rows: the paper's rows in the paper's order, each beside our group(s) of that norm -------------------
def matched_rows(paper: list[dict[str, str]], groups: list[Group]) -> list[tuple[str, dict[str, str] | None, Group | None]]:
    """(model label, paper row or None, our group or None). Paper rows without a norm of ours (other
    works, BN-Everywhere) stay paper-only; our groups of a norm the paper lacks come last."""
    rows, used = [], set()
    for prow in paper:
        mine = [g for g in groups if prow.get("norm") and g.norm == prow["norm"]]
        if not mine:
            rows.append((prow["model"], prow, None))
        for g in mine:
            used.add(id(g))
            extra = g.label[len(g.norm):].strip()
            rows.append((prow["model"] + (f" ({extra})" if extra else ""), prow, g))
    rows += [(g.label, None, g) for g in groups if id(g) not in used]
    return rows


def layernorm_of(groups: list[Group], group: Group) -> Group | None:
    """The LayerNorm group a speed-up is measured against: same task and swept values."""
    return next((g for g in groups if g.norm == "layernorm" and g.task == group.task and g.swept == group.swept), None)


def render_comparison(page: Page, runs: list[Run], groups: list[Group], paper: list[dict]) -> list[str]:
    header, used_metrics = ["model", "runs"], set()
    for q in page.qualities:
        header += [f"{q.header} paper{' ' + label if label else ''}" for label, _ in page.paper_sets if q.paper]
        header.append(f"{q.header} ours")
    unit = time_unit(paper)
    if page.time:
        header += [f"time paper{' ' + label if label else ''}" for label, _ in page.paper_sets]
        header.append("time ours")
    body = []
    for model, prow, group in matched_rows(paper, groups):
        cells = [model, runs_cell(group) if group else "not run"]
        for q in page.qualities:
            if q.paper:
                cells += [paper_cell(prow, prefix + q.paper) for _, prefix in page.paper_sets]
            if group is None:
                cells.append("-")
            else:
                cell, name = fmt_our_quality(group, q)
                if name:
                    used_metrics.add(name)
                cells.append(cell)
        if page.time:
            cells += [fmt_paper_time(prow, prefix) if prow else "-" for _, prefix in page.paper_sets]
            cells.append(fmt_our_time(group, layernorm_of(groups, group), unit) if group else "-")
        body.append(cells)
    lines = table(header, body)
    notes = [f"{r['model']}: {r['note']}" for r in paper if r.get("note") and r["note"] != FAILS]
    if notes:
        lines += ["", "Paper notes: " + "; ".join(notes) + "."]
    if used_metrics:
        lines += ["", "Our metrics: " + ", ".join(f"`{m}`" for m in sorted(used_metrics)) + "."]
    return lines


# Table 3's column pairs -> the codebase whose runs feed them (configs/codebase: the authors' norm settings)
CODEBASE_OF_SET = {"th_": "theano", "py_": "pytorch"}


def _codebase(group: Group) -> str | None:
    return next((json.loads(value) for key, value in group.swept if key == "codebase.name"), None)


def render_codebases(page: Page, runs: list[Run], groups: list[Group], paper: list[dict]) -> list[str]:
    """Table 3: each of the paper's column pairs (Th, Py) beside the runs of its own codebase; speed-ups
    against the LayerNorm runs of that codebase."""
    unit = time_unit(paper)
    header = ["model"]
    for label, _ in page.paper_sets:
        header += [f"runs {label}"] + [f"{q.header} {who} {label}" for q in page.qualities for who in ("paper", "ours")]
        header += [f"time paper {label}", f"time ours {label}"] if page.time else []
    body = []
    for prow in paper:
        cells = [prow["model"]]
        for _, prefix in page.paper_sets:
            codebase = CODEBASE_OF_SET[prefix]
            mine = next((g for g in groups if g.norm == prow.get("norm") and _codebase(g) == codebase), None)
            ln = next((g for g in groups if g.norm == "layernorm" and _codebase(g) == codebase), None)
            cells.append(runs_cell(mine) if mine else "not run")
            for q in page.qualities:
                cells += [paper_cell(prow, prefix + q.paper), fmt_our_quality(mine, q)[0] if mine else "-"]
            if page.time:
                cells += [fmt_paper_time(prow, prefix), fmt_our_time(mine, ln, unit) if mine else "-"]
        body.append(cells)
    lines = table(header, body)
    if not any(_codebase(g) in CODEBASE_OF_SET.values() for g in groups):
        lines += ["", "None of these runs has either codebase's norm settings (Table 2's runs are Nematus-TF's): "
                  f"run `{table_command('table3')}` (codebase=theano,pytorch)."]
    return lines


def render_table5(page: Page, runs: list[Run], groups: list[Group], paper: list[dict]) -> list[str]:
    """Mean M and std S of the decoder's hidden-to-hidden summed inputs at positions 1-4 and overall."""
    positions = [("1", "pos1"), ("2", "pos2"), ("3", "pos3"), ("4", "pos4"), ("all", "all")]
    header = ["model", "stat"] + [f"{p} {who}" for p, _ in positions for who in ("paper", "ours")]
    body = []
    by_norm = {}
    for prow in paper:
        by_norm.setdefault(prow["norm"], []).append(prow)
    rows = matched_rows([rows[0] for rows in by_norm.values()], groups)
    for model, prow, group in rows:
        for stat, word in (("M", "mean"), ("S", "std")):
            prow_stat = next((r for r in by_norm.get(prow["norm"], []) if r["stat"] == stat), {}) if prow else {}
            cells = [model, stat]
            for pos, column in positions:
                cells.append(prow_stat.get(column) or "-")
                ours = group.stat(f"table5_{word}_{pos}") if group else None
                cells.append(FAILS if group and group.fails_to_train else fmt_stat(ours, digits=2))
            body.append(cells)
    return table(header, body)


def render_curve_summary(page: Page, runs: list[Run], groups: list[Group], paper: list[dict]) -> list[str]:
    """Pages whose paper counterpart is a curve: our final numbers per group, no paper column."""
    header = ["model", "runs"] + [q.header for q in page.qualities] + (["s / 1k steps"] if page.time else [])
    body = []
    for group in groups:
        cells = [group.label, runs_cell(group)] + [fmt_our_quality(group, q)[0] for q in page.qualities]
        if page.time:
            cells.append(fmt_our_time(group, layernorm_of(groups, group), "1k steps"))
        body.append(cells)
    return table(header, body)


def authors_retrieval_scores(runs: list[Run]) -> list[tuple[str, dict | str]]:
    """(file name, import_oe's result or why it is unreadable) for each COCO folder our runs read
    (data.root) that holds the authors' model scored by import_oe."""
    roots = sorted({str(run.config.get("data", {}).get("root")) for run in runs
                    if run.config.get("data", {}).get("name") == "coco"})
    if not roots:
        return []
    from ..tasks.retrieval import import_oe  # here, not above: it loads torch, which pages without COCO runs never need
    found = []
    for path in (Path(root) / import_oe.RESULT_FILE for root in roots):
        if path.is_file():
            try:
                found.append((path.name, import_oe.read_result(path)))
            except ValueError as e:
                found.append((path.name, str(e)))
    return found


def render_retrieval(page: Page, runs: list[Run], groups: list[Group], paper: list[dict]) -> list[str]:
    """Table 7's layout: "R@1 / R@5 / R@10 / mean r" per direction, paper beside ours; then the
    authors' own trained model scored by our evaluation, where import_oe left its result."""
    keys = ("r1", "r5", "r10", "meanr")
    header = ["model", "runs"] + [f"{side} {who}" for side in ("caption retrieval", "image retrieval")
                                  for who in ("paper", "ours")]
    body = []
    for model, prow, group in matched_rows(paper, groups):
        cells = [model, runs_cell(group) if group else "not run"]
        for side in ("caption", "image"):
            cells.append(" / ".join((prow or {}).get(f"{side}_{k}") or "-" for k in keys) if prow else "-")
            if group is None:
                cells.append("-")
            elif group.fails_to_train:
                cells.append(FAILS)
            else:
                cells.append(" / ".join(fmt_stat(group.stat(f"{side}_{k}"), digits=1) for k in keys))
        body.append(cells)
    for name, result in authors_retrieval_scores(runs):
        if isinstance(result, str):
            body.append([f"the authors' model ({name})", f"unreadable: {result}", "-", "-", "-", "-"])
            continue
        prow = next((row for row in paper if row.get("norm") == result["norm"]), None)
        eos = "" if result["caption_eos"] else ", captions without <eos>"
        cells = [f"{prow['model'] if prow else result['norm']}: the authors' model ({result['model']}.npz, OE "
                 f"{result['encoder']}{eos}), scored here", f"their weights, {result['test_images']} test images"]
        for side in ("caption", "image"):
            cells.append(" / ".join((prow or {}).get(f"{side}_{k}") or "-" for k in keys))
            cells.append(" / ".join(f"{result['metrics'][f'{side}_{k}']:.1f}" for k in keys))
        body.append(cells)
    return table(header, body)


def _no_p_sweep(runs: list[Run]) -> str | None:
    """Figure 3 plots pRMSNorm against p: it needs prmsnorm runs at two or more values of p."""
    ps = sorted({run.p for run in runs if run.norm == "prmsnorm"})
    if len(ps) >= 2:
        return None
    have = f"p={ps[0]:g} only" if ps else "none"
    return f"needs prmsnorm runs at two or more values of p (these have {have}): run `{table_command('fig3')}`"


def _init_centre(run: Run) -> float:
    model = (run.config.get("task") or {}).get("model") or {}
    centre = model.get("init_center", 0.0) if isinstance(model, dict) else 0.0
    return float(centre) if isinstance(centre, (int, float)) else 0.0


def _no_init_shift(runs: list[Run]) -> str | None:
    """Figure 4 is the init centre shifted away from 0 (task.model.init_center, 0.2 in the paper)."""
    if any(_init_centre(run) != 0.0 for run in runs):
        return None
    return f"needs runs with the init centre shifted (task.model.init_center != 0; these have 0): run `{table_command('fig4')}`"


TEST14 = Quality("Test14", "test14", ("test14_bleu", "test_bleu"))
TEST17 = Quality("Test17", "test17", ("test17_bleu",))
VALID_BLEU = Quality("best valid BLEU", None, ("bleu",), source="best")
TEST_BLEU = Quality("test BLEU", None, ("test14_bleu", "test_bleu"))
FINAL_LOSS = Quality("last train loss", None, ("loss",), source="last", digits=3)
RSUM = Quality("best valid R@K sum", None, ("rsum",), source="best")

PAGES: dict[str, Page] = {p.name: p for p in (
    Page("table2", "Table 2: RNNSearch (Nematus-TF), BLEU and seconds per 1k steps", "rnnsearch",
         (TEST14, TEST17), figures=("fig1", "fig2")),
    Page("table3", "Table 3: RNNSearch (Theano and PyTorch Nematus), BLEU and seconds per 1k steps", "rnnsearch",
         (TEST14, TEST17), paper_sets=(("Th", "th_"), ("Py", "py_")), figures=("fig1", "fig2"),
         render=render_codebases),
    Page("table4", "Table 4: Transformer base, BLEU and seconds per 1k steps", "transformer", (TEST14, TEST17)),
    Page("table5", "Table 5: decoder hidden-to-hidden summed inputs, mean M and std S on the validation set",
         "rnnsearch", time=False, render=render_table5),
    Page("table6", "Table 6: CNN attentive reader, seconds per 0.1k steps", "reader",
         (Quality("test error %", None, ("error",), scale=100.0),
          Quality("best valid accuracy %", None, ("accuracy",), source="best", scale=100.0)), figures=("fig5",)),
    Page("table7", "Table 7: caption / image retrieval on COCO (R@1 / R@5 / R@10 / mean rank)", "retrieval",
         time=False, render=render_retrieval, figures=("fig6",)),
    Page("table8", "Table 8: order embeddings, seconds per 0.1k steps", "retrieval", (RSUM,), figures=("fig6",)),
    Page("table9", "Table 9: ConvPool-CNN-C training error (the paper gives the curve only)", "convpool",
         (Quality("final train error % (training batches, the authors')", None, ("train_batch_error",)),
          Quality("final train error % (eval mode)", None, ("train_error",)), Quality("test error %", None, ("error",), digits=2)),
         render=render_curve_summary, figures=("table9",)),
    Page("table10", "Table 10: ConvPool-CNN-C on CIFAR-10, test error and seconds per epoch", "convpool",
         (Quality("test error %", "test_error_pct", ("error",), digits=2),), figures=("table9",)),
    Page("fig1", "Figure 1: RNNSearch training loss against steps and wall-clock time", "rnnsearch",
         (FINAL_LOSS, VALID_BLEU, TEST_BLEU), render=render_curve_summary, figures=("fig1", "fig2")),
    Page("fig2", "Figure 2: RNNSearch validation BLEU over training steps", "rnnsearch",
         (VALID_BLEU, TEST_BLEU), time=False, render=render_curve_summary, figures=("fig2",)),
    Page("fig3", "Figure 3: pRMSNorm validation BLEU as p varies", "rnnsearch",
         (VALID_BLEU, TEST_BLEU), render=render_curve_summary, figures=("fig3",), unfit=_no_p_sweep),
    Page("fig4", "Figure 4: weight-init centre 0.2, LayerNorm against RMSNorm", "rnnsearch",
         (FINAL_LOSS, VALID_BLEU, TEST_BLEU), time=False, render=render_curve_summary, figures=("fig4",),
         unfit=_no_init_shift),
    Page("fig5", "Figure 5: attentive reader validation error over training steps", "reader",
         (Quality("best valid error %", None, ("error",), source="best", scale=100.0),), time=False,
         render=render_curve_summary, figures=("fig5",)),
    Page("fig6", "Figure 6: order embeddings, validation R@K sum over training steps", "retrieval",
         (RSUM,), time=False, render=render_curve_summary, figures=("fig6",)),
)}


def page_runs(page: Page, runs: list[Run]) -> list[Run]:
    return [run for run in runs if run.task == page.task]


def render_page(name: str, runs: list[Run], runs_dir: str, figure_paths: dict[str, Path | None],
                md_dir: Path, heading: str = "#", own_clock: bool = True) -> str:
    """The Markdown page of one table or figure; figure_paths: figure name -> PNG (None: no data).

    runs_dir: the runs' folder as the page names it (relative to md_dir: no machine's absolute path).
    ValueError when the runs are not the page's setting (Page.unfit). own_clock=False: the runs shared the
    machine, so their own step times are not comparable: the page shows none (the campaign's side-by-side
    times stand in)."""
    if name not in PAGES:
        raise ValueError(f"unknown table {name!r}; choose one of: {', '.join(PAGES)}")
    page = PAGES[name] if own_clock else replace(PAGES[name], time=False)
    runs_all = runs
    unfinished = [run for run in getattr(runs, "in_progress", []) if run.task in (page.task, "?")]
    runs = page_runs(page, runs)
    if not runs:
        waiting = f" ({len(unfinished)} in progress, without summary.json yet)" if unfinished else ""
        raise ValueError(f"no {page.task} runs under {runs_dir} for {name}{waiting}: run `{table_command(name)}` first")
    if page.unfit is not None and (why := page.unfit(runs)):
        raise ValueError(f"{name} {why}")
    groups = group_runs(runs)
    paper = read_paper(name)
    scales = sorted({r.scale for r in runs})
    datas = sorted({r.data for r in runs})
    lines = [f"{heading} {page.title}", ""]
    lines.append(f"Ours: task `{page.task}`, data {', '.join(datas)}, scale {', '.join(scales)}, "
                 f"{len(runs)} run{'s' if len(runs) != 1 else ''} from `{runs_dir}` "
                 "(each row's folders under Runs).  ")
    if unfinished:
        lines.append(f"Not counted, in progress: {len(unfinished)} run{'s' if len(unfinished) != 1 else ''}: "
                     f"{', '.join(_shown(run.path, getattr(runs_all, 'root', None)) for run in unfinished)} "
                     "(no summary.json yet; "
                     "a run killed before writing one looks the same).  ")
    lines.append(f"Our machine: {describe_env(runs)}.  ")
    hardware = sorted({r["hardware"] for r in paper if r.get("hardware")})
    if hardware:
        lines.append(f"Paper: {', '.join(hardware)}; time in seconds per {time_unit(paper)}, "
                     "speed-up over LayerNorm in brackets, (T_LN - T_X) / T_LN.  ")
    if not own_clock and PAGES[name].time:
        lines.append("Our time: not from these runs: they shared the machine, so their own clocks are not comparable; "
                     "the step times measured side by side (speed.json) stand in.  ")
    if page.time:
        unit = time_unit(paper) if time_unit(paper) in STEPS_PER_UNIT else "1k steps"
        lines.append(f"Our time: seconds per {unit} from `s_per_1k_steps` (each run's median device-synchronized "
                     "step time, evaluation excluded; runs from before the median: the mean), speed-up computed "
                     "the same way. [lo, hi]: a 95% interval (one run: the bootstrap interval of its median; "
                     "several: a bootstrap over the runs and their intervals), for the speed-up too; \"within "
                     "noise\" when that interval holds 0. Runs that did not record an interval show none.  ")
        cuda_fp32 = [r for r in runs if str(r.summary.get("env", {}).get("device", "")).startswith("cuda")
                     and r.summary["env"].get("precision", "fp32") == "fp32"]
        if cuda_fp32:
            tf32 = sum(bool(r.summary["env"].get("tf32")) for r in cuda_fp32)
            lines.append(f"TF32: {tf32} of our {len(cuda_fp32)} fp32 CUDA runs ran their products on TF32 cores "
                         "(`train.tf32`); the paper's fp32 times had none (its GPUs predate TF32).  ")
    if page.task == "reader":
        lines.append(f"Reader passages (every number on this page): {reader_passages(runs)}.  ")
    if page.task in ("rnnsearch", "transformer"):
        lines.append(f"Valid BLEU at evaluation steps (curves, \"best valid BLEU\"): {valid_decode(runs)}; "
                     "test BLEU: beam search (`task.decode.beam`).  ")
    lines.append("Ours: mean ± sample std over seeds (one value: a single run); \"runs\" counts completed runs "
                 "(\"CAPPED\": stopped by the wall-clock cap train.max_minutes before its steps, not complete); "
                 f"a row whose every run diverged reads \"{FAILS}\", as in the paper.")
    lines.append("")
    render = page.render or render_comparison
    lines += render(page, runs, groups, paper)
    for figure in page.figures:
        path = figure_paths.get(figure)
        if path is not None:
            lines += ["", f"![{figure}]({Path(os.path.relpath(path, md_dir)).as_posix()})"]
    lines += ["", "Runs (relative to this page):", ""]
    lines += [f"- {group.label} (completed: {runs_cell(group)}): " +
              ", ".join(f"`{relative_to_page(run.path, md_dir)}`" for run in group.runs) for group in groups]
    return "\n".join(lines) + "\n"


def reader_passages(runs: list[Run]) -> str:
    """What the reader runs read: the authors' top4 passages, or what stands in for them (data_info)."""
    def one(run: Run) -> str:
        info = run.summary.get("data_info") or {}
        if run.data != "cnn":
            return f"data={run.data} (generated documents, not CNN)"
        if info.get("layout") == "top4":
            return "the authors' top4 passages"
        k = info.get("top_sentences")
        if k is None:
            return ("WHOLE CNN documents (.question files, data.whole_documents=true): not the authors' top4, "
                    "so time and error are not comparable with Table 6 and Figure 5")
        return f"the top {k} sentences by word overlap with the query (an approximation of the authors' top4)"
    return "; ".join(sorted({one(run) for run in runs}))


def valid_decode(runs: list[Run]) -> str:
    """How the runs decoded their eval-step BLEU: greedy (task.decode.valid_beam=1) or beam k."""
    beams = sorted({int(((r.config.get("task") or {}).get("decode") or {}).get("valid_beam") or 1) for r in runs})
    return ", ".join("greedy" if b == 1 else f"beam {b}" for b in beams) + " (`task.decode.valid_beam`)"


def relative_to_page(path: str | Path, md_dir: Path) -> str:
    """A path as a page names it: relative to the page's folder, never the machine's absolute path; a
    folder above the page by its name too ("../../runs", not "..")."""
    target = Path(path).resolve()
    relative = Path(os.path.relpath(target, Path(md_dir).resolve()))
    if relative.parts and set(relative.parts) == {".."} and target.name:
        relative = relative / ".." / target.name
    return printable(relative.as_posix())


def _shown(path: Path, root: Path | None) -> str:
    """A run directory as the page names it: relative to the directory the runs were read from."""
    try:
        return printable(path.relative_to(root).as_posix() if root is not None else path.as_posix())
    except ValueError:
        return printable(path.as_posix())
