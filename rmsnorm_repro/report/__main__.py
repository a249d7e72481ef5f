"""python -m rmsnorm_repro.report <runs dir> --table table4 (console script: rmsnorm-report).

`rmsnorm-report compare RUN_OR_DIR...` compares any runs instead (report/compare.py), `rmsnorm-report claims
RUN_OR_DIR...` judges the paper's claims on any runs (report/claims.py), and
`rmsnorm-report wandb-workspace --entity E --project P` builds the wandb comparison views (report/workspace.py).

Reads every run under the directory (summary.json, config.yaml, metrics.jsonl), writes <table>.md
with the paper's numbers beside ours and the table's figures, and prints the page. The pages go
beside the runs they read (<runs dir>/report/, figures in <runs dir>/report/figures/) unless --out
and --figures say where; the Makefile's table targets write results/tables/ and results/figures/.
`--table all` renders every page the runs have data for; `--wandb` also logs each page's tables
(ours beside the paper's) and figures to a wandb run of job type "report" (offline by default).
"""
from __future__ import annotations

import argparse
import importlib
import os
import re
import sys
from pathlib import Path

from . import figures as figs
from .aggregate import load_runs
from ..atomic import atomic_write_text, cannot_write
from ..paths import table_command
from .tables import PAGES, page_runs, relative_to_page, render_page


def build(runs_dir: str | Path, names: list[str], tables_dir: Path, figures_dir: Path,
          drawn: dict[str, Path | None] | None = None,
          unreadable: list[tuple[Path, str]] | None = None) -> dict[str, Path]:
    """Write the pages `names` (and their figures); returns page name -> Markdown path.

    `drawn`, when given, receives figure name -> PNG path (None: no data for it). A run that cannot be
    read raises ValueError, or, with `unreadable`, is appended to it, left out and named on each page."""
    found = load_runs(runs_dir, unreadable)
    if not found and unreadable:
        raise ValueError(f"no readable runs under {runs_dir}: " + "; ".join(why for _, why in unreadable))
    if not found:
        raise ValueError(f"no runs (summary.json files) under {runs_dir}: run the sweep first, e.g. "
                         f"{table_command(names[0] if names[0] in PAGES else 'table2')}")
    runs = figs.unique_runs(found)  # the same seed of the same settings trained twice counts once
    if len(runs) < len(found):
        print(f"rmsnorm-report: {len(found) - len(runs)} duplicate run(s) of a seed left out: "
              f"{', '.join(str(r.path) for r in found if r not in runs)}", file=sys.stderr)
    if names == ["all"]:  # the pages whose setting these runs are (no Figure 3 without a p sweep)
        names = [name for name, page in PAGES.items() if page.why_not(runs) is None]
        if not names:
            tasks = ", ".join(sorted({run.task for run in runs}))
            raise ValueError(f"the runs under {runs_dir} ({tasks}) fit none of the pages ({', '.join(PAGES)}): each "
                             f"needs its task's sweep, e.g. {table_command('table2')}; `rmsnorm-report compare "
                             f"{runs_dir}` compares any runs")
    written = {}
    drawn = {} if drawn is None else drawn
    for name in names:
        if name not in PAGES:
            raise ValueError(f"unknown table {name!r}; choose one of: all, {', '.join(PAGES)}")
        unfit = PAGES[name].unfit
        if unfit is not None and (why := unfit(page_runs(PAGES[name], runs))):  # before its figure is drawn
            raise ValueError(f"{name} {why}")
        for figure in PAGES[name].figures:
            if figure not in drawn:
                drawn[figure] = figs.draw(figure, runs, figures_dir / f"{figure}.png")
        text = render_page(name, runs, relative_to_page(runs_dir, tables_dir), drawn, tables_dir)
        if unreadable:
            text += "\nLeft out as damaged (the numbers above lack them): " + "; ".join(
                f"`{relative_to_page(path, tables_dir)}` ({why.replace(str(path), '').lstrip(':/ ') or why})"
                for path, why in unreadable) + ".\n"
        path = tables_dir / f"{name}.md"
        atomic_write_text(path, text)
        written[name] = path
    return written


# wandb ------------------------------------------------------------------------------------------
def markdown_tables(text: str) -> list[tuple[list[str], list[list[str]]]]:
    """Every pipe table of a Markdown page as (header, rows); cells as written ("22.4", "21.0 ± 0.3")."""
    def cells(line: str) -> list[str]:
        parts = re.split(r"(?<!\\)\|", line.strip()[1:-1])
        return [p.strip().replace("\\|", "|") for p in parts]

    tables, block = [], []
    for line in [*text.splitlines(), ""]:
        if line.strip().startswith("|") and line.strip().endswith("|"):
            block.append(line)
            continue
        if len(block) >= 2 and re.fullmatch(r"\|(\s*:?-+:?\s*\|)+", block[1].strip()):
            header, rows = cells(block[0]), [cells(b) for b in block[2:]]
            tables.append((header, [r + [""] * (len(header) - len(r)) for r in rows]))
        block = []
    return tables


def log_to_wandb(written: dict[str, Path], drawn: dict[str, Path | None], runs_dir: str | Path, *, project: str,
                 entity: str | None, mode: str | None, out: Path) -> str:
    """One wandb run (job_type "report") holding each page's tables and figures; returns its directory."""
    from omegaconf import OmegaConf

    from ..wandb_access import wandb_mode  # checks an online mode's key and reachability first

    mode = wandb_mode(OmegaConf.create({"mode": mode}))
    import wandb

    names = list(written)
    out.mkdir(parents=True, exist_ok=True)
    run = wandb.init(project=project, entity=entity, mode=mode, dir=str(out), job_type="report",
                     group=names[0] if len(names) == 1 else None, name=f"report-{'+'.join(names)}",
                     tags=["report", *names], config={"runs_dir": str(runs_dir), "tables": names})
    try:
        record = {}
        for name, path in written.items():
            for i, (header, rows) in enumerate(markdown_tables(path.read_text())):
                record[f"{name}/table" + (f"_{i + 1}" if i else "")] = wandb.Table(columns=header, data=rows)
            run.summary[f"{name}/markdown"] = str(path)
        record.update({f"figures/{figure}": wandb.Image(str(png)) for figure, png in drawn.items() if png is not None})
        run.log(record)
    finally:
        run.finish()
    files = getattr(run, "dir", None)  # <out>/wandb/<offline-run-...>/files
    return str(Path(files).parent) if files else str(out / "wandb")


# subcommands (`rmsnorm-report compare RUN_OR_DIR...`); without one, the paper's pages
SUBCOMMANDS = {"claims": "rmsnorm_repro.report.claims", "compare": "rmsnorm_repro.report.compare", "wandb-workspace": "rmsnorm_repro.report.workspace"}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in SUBCOMMANDS:
        return importlib.import_module(SUBCOMMANDS[argv[0]]).main(argv[1:])
    parser = argparse.ArgumentParser(prog="rmsnorm-report", description=__doc__.split("\n\n")[0],
                                     epilog="Subcommands (--help for each): rmsnorm-report compare RUN_OR_DIR...; "
                                            "rmsnorm-report claims RUN_OR_DIR... [--speed speed.json]; "
                                            "rmsnorm-report wandb-workspace --entity E --project P.")
    parser.add_argument("runs_dir", type=Path, help="a directory of runs, searched recursively for summary.json")
    parser.add_argument("--table", action="append", required=True,
                        help=f"page to write (repeatable): all, {', '.join(PAGES)}")
    parser.add_argument("--out", type=Path, default=None, help="where <table>.md goes (default: <runs_dir>/report)")
    parser.add_argument("--figures", type=Path, default=None, help="where PNGs go (default: <out>/figures)")
    parser.add_argument("--wandb", action="store_true",
                        help="also log the tables and figures to wandb (offline unless --wandb-mode/WANDB_MODE say online)")
    parser.add_argument("--wandb-mode", default=None, help="online | offline | disabled (default: $WANDB_MODE, else offline)")
    parser.add_argument("--wandb-project", default=os.environ.get("WANDB_PROJECT", "rmsnorm-repro"))
    parser.add_argument("--wandb-entity", default=os.environ.get("WANDB_ENTITY"))
    args = parser.parse_args(argv)
    out = args.out if args.out is not None else args.runs_dir / "report"
    figures_dir = args.figures if args.figures is not None else out / "figures"
    drawn: dict[str, Path | None] = {}
    unreadable: list[tuple[Path, str]] = []
    try:
        written = build(args.runs_dir, args.table, out, figures_dir, drawn, unreadable)
        for name, path in written.items():
            print(path.read_text())
            print(f"wrote {path}", file=sys.stderr)
        if args.wandb:
            where = log_to_wandb(written, drawn, args.runs_dir, project=args.wandb_project, entity=args.wandb_entity,
                                 mode=args.wandb_mode, out=out)
            print(f"logged {', '.join(written)} to wandb ({where})", file=sys.stderr)
    except (ValueError, FileNotFoundError) as err:  # ConfigError (a wandb key or network problem) is a ValueError
        print(f"rmsnorm-report: {err}", file=sys.stderr)
        return 2
    except OSError as err:
        print(f"rmsnorm-report: {cannot_write(err, 'choose folders you can write to with --out and --figures')}",
              file=sys.stderr)
        return 2
    for path, why in unreadable:  # the pages lack these runs: never exit 0 on numbers the damage changed
        print(f"rmsnorm-report: left out {path}: {why}", file=sys.stderr)
    return 1 if unreadable else 0


if __name__ == "__main__":
    sys.exit(main())
