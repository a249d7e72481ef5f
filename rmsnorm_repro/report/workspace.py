"""`rmsnorm-report wandb-workspace --entity E --project P`: the comparison view of the suite's runs in wandb.

One saved view (a wandb workspace) per task, built with wandb-workspaces: its runs filtered to the
task's training runs, curves grouped by norm with a band of one std over seeds (the validation
metric and the training loss against step and against wall time), bars of the step time and of the
test metric per norm, and the report's tables for that task's pages (`rmsnorm-report ... --wandb`
logs them). The fields it groups and filters by are the top-level config fields the runner gives
every wandb run (runner/wandb_logger.naming_fields: norm_name, task_name, ...).

Saving needs the network and a wandb key. Offline (WANDB_MODE=offline, --offline, no key, or no
server) it writes the views' spec to a JSON file instead and says so; run it again online to save.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from ..atomic import atomic_write_text, cannot_write
from .claims import TASK_ORDER
from .tables import PAGES

# the validation curve and the test number of each task's view (as WandbLogger logs them)
VALID = {"rnnsearch": "valid/bleu", "transformer": "valid/bleu", "reader": "valid/accuracy",
         "retrieval": "valid/rsum", "convpool": "valid/error"}
TEST = {"rnnsearch": "final/test14_bleu", "transformer": "final/test14_bleu", "reader": "final/error",
        "retrieval": "final/rsum", "convpool": "final/error"}
GROUP_BY = "norm_name"


def view(task: str, entity: str, project: str) -> Any:
    """The workspace (wandb_workspaces.workspaces.Workspace) comparing the norms of one task."""
    import wandb_workspaces.reports.v2 as wr
    import wandb_workspaces.workspaces as ws

    def curve(metric: str, x: str, title: str) -> Any:
        return wr.LinePlot(title=title, x=x, y=[metric], groupby=wr.Config(GROUP_BY), groupby_aggfunc="mean",
                           groupby_rangefunc="stddev")

    def bars(metric: str, title: str) -> Any:
        return wr.BarPlot(title=title, metrics=[metric], groupby=wr.Config(GROUP_BY), groupby_aggfunc="mean",
                          groupby_rangefunc="stddev")

    valid = VALID[task]
    sections = [
        ws.Section(name=f"{task}: curves by norm", is_open=True, panels=[
            curve(valid, "step", f"{valid} against step"), curve(valid, "wall_s", f"{valid} against wall time"),
            curve("loss", "step", "train loss against step"), curve("loss", "wall_s", "train loss against wall time")]),
        ws.Section(name=f"{task}: step time and test metric", is_open=True, panels=[
            bars("s_per_1k_steps", "ms per step (median; s per 1k steps)"), bars(TEST[task], TEST[task])]),
        ws.Section(name=f"{task}: the report's tables", is_open=True, panels=[
            wr.WeavePanelSummaryTable(table_name=f"{name}/table") for name, page in PAGES.items() if page.task == task]),
    ]
    return ws.Workspace(entity=entity, project=project, name=f"rmsnorm-repro: {task}", sections=sections,
                        runset_settings=ws.RunsetSettings(filters=[ws.Config("task_name") == task]))


def spec(workspace: Any) -> dict[str, Any]:
    """The view as wandb stores it (what save() sends), as plain JSON data."""
    return json.loads(workspace._to_model().model_dump_json(by_alias=True, exclude_none=True))


def offline_reason(force: bool) -> str | None:
    """Why the views cannot be saved now (None: they can): asked to stay offline, or wandb's online
    checks (a key, a server that answers; wandb_access.wandb_mode) fail."""
    from omegaconf import OmegaConf

    from ..errors import ConfigError
    from ..wandb_access import wandb_mode

    if force or os.environ.get("WANDB_MODE") in ("offline", "disabled", "dryrun"):
        return "offline (--offline or WANDB_MODE)"
    try:
        wandb_mode(OmegaConf.create({"mode": "online"}))
    except ConfigError as err:
        return str(err)
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rmsnorm-report wandb-workspace", description=__doc__.split("\n\n")[0])
    parser.add_argument("--entity", required=True, help="the wandb entity (user or team) of the project")
    parser.add_argument("--project", required=True, help="the wandb project the runs log to (logger.project)")
    parser.add_argument("--task", action="append", choices=TASK_ORDER, help="views to build (repeatable; default: all)")
    parser.add_argument("--offline", action="store_true", help="write the spec only, even with a network")
    parser.add_argument("--spec", type=Path, default=Path("wandb-workspace.json"),
                        help="where the spec goes when the views cannot be saved (default: ./wandb-workspace.json)")
    args = parser.parse_args(argv)
    views = {task: view(task, args.entity, args.project) for task in args.task or TASK_ORDER}
    reason = offline_reason(args.offline)
    if reason is not None:
        try:
            atomic_write_text(args.spec, json.dumps({task: spec(w) for task, w in views.items()}, indent=1) + "\n")
        except OSError as err:
            print(f"rmsnorm-report wandb-workspace: {cannot_write(err, 'give --spec a file path you can write to')}",
                  file=sys.stderr)
            return 2
        print(f"rmsnorm-report wandb-workspace: not saved to wandb ({reason}); wrote the spec of "
              f"{len(views)} view(s) to {args.spec}: run this again online (after `wandb login`) to save them",
              file=sys.stderr)
        return 0
    for task, workspace in views.items():
        print(f"saved the {task} view: {workspace.save().url}")
    return 0
