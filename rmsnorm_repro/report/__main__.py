"""python -m rmsnorm_repro.report <runs dir> --table table4 (console script: rmsnorm-report).

Reads every run under the directory (summary.json, config.yaml, metrics.jsonl), writes
results/tables/<table>.md with the paper's numbers beside ours and the table's figures under
results/figures/, and prints the page. `--table all` renders every page the runs have data for.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import figures as figs
from .aggregate import load_runs
from .tables import PAGES, REPO, render_page, write_atomic


def build(runs_dir: str | Path, names: list[str], tables_dir: Path, figures_dir: Path) -> dict[str, Path]:
    """Write the pages `names` (and their figures); returns page name -> Markdown path."""
    runs = load_runs(runs_dir)
    if not runs:
        raise ValueError(f"no runs (summary.json files) under {runs_dir}: run the sweep first, e.g. make table2")
    if names == ["all"]:
        tasks = {run.task for run in runs}
        names = [name for name, page in PAGES.items() if page.task in tasks]
    written, drawn = {}, {}
    for name in names:
        if name not in PAGES:
            raise ValueError(f"unknown table {name!r}; choose one of: all, {', '.join(PAGES)}")
        for figure in PAGES[name].figures:
            if figure not in drawn:
                drawn[figure] = figs.draw(figure, runs, figures_dir / f"{figure}.png")
        text = render_page(name, runs, str(runs_dir), drawn, tables_dir)
        path = tables_dir / f"{name}.md"
        write_atomic(path, text)
        written[name] = path
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rmsnorm-report", description=__doc__.split("\n\n")[0])
    parser.add_argument("runs_dir", help="a directory of runs, searched recursively for summary.json")
    parser.add_argument("--table", action="append", required=True,
                        help=f"page to write (repeatable): all, {', '.join(PAGES)}")
    parser.add_argument("--out", type=Path, default=REPO / "results" / "tables", help="where <table>.md goes")
    parser.add_argument("--figures", type=Path, default=REPO / "results" / "figures", help="where PNGs go")
    args = parser.parse_args(argv)
    try:
        written = build(args.runs_dir, args.table, args.out, args.figures)
    except (ValueError, FileNotFoundError) as err:
        print(f"rmsnorm-report: {err}", file=sys.stderr)
        return 2
    for name, path in written.items():
        print(path.read_text())
        print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
