"""The wandb comparison views, built and checked offline on the spec wandb would store; and the
fields they group by, which the runner gives every wandb run."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from hydra.core.hydra_config import HydraConfig
from omegaconf import open_dict

from rmsnorm_repro.report.__main__ import main as report_main
from rmsnorm_repro.runner import wandb_logger
from runner_fixtures.helpers import compose_cfg, tiny


def panels(section: dict) -> list[dict]:
    return section["panels"]

# wandb-workspaces' own pydantic models warn of their deprecated validators
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def test_offline_the_views_spec_is_written_and_says_so(tmp_path: Path, capsys, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    out = tmp_path / "views.json"
    assert report_main(["wandb-workspace", "--entity", "me", "--project", "rms", "--spec", str(out)]) == 0
    err = capsys.readouterr().err
    assert "not saved to wandb" in err and "wrote the spec of 5 view(s)" in err and err.count("\n") == 1
    views = json.loads(out.read_text())
    assert list(views) == ["rnnsearch", "transformer", "reader", "retrieval", "convpool"]
    view = views["rnnsearch"]
    assert (view["entity"], view["project"], view["displayName"]) == ("me", "rms", "rmsnorm-repro: rnnsearch")
    sections = view["spec"]["section"]["panelBankConfig"]["sections"]
    curves, speed, tables = sections
    plots = [(p["config"]["metrics"], p["config"]["xAxis"], p["config"]["groupBy"], p["config"]["groupArea"])
             for p in panels(curves)]
    assert plots == [(["valid/bleu"], "step", "norm_name.value", "stddev"),
                     (["valid/bleu"], "wall_s", "norm_name.value", "stddev"),
                     (["loss"], "step", "norm_name.value", "stddev"),
                     (["loss"], "wall_s", "norm_name.value", "stddev")]
    assert [p["viewType"] for p in panels(speed)] == ["Bar Chart", "Bar Chart"]
    assert [p["config"]["metrics"] for p in panels(speed)] == [["s_per_1k_steps"], ["final/test14_bleu"]]
    # the report's tables of every rnnsearch page (table2, table3, table5, fig1-fig4)
    assert {p["viewType"] for p in panels(tables)} == {"Weave"}
    shown = json.dumps(panels(tables))
    for page in ("table2", "table3", "table5", "fig1", "fig3", "fig4"):
        assert f"{page}/table" in shown, page
    assert "task_name" in json.dumps(view["spec"]["section"]["runSets"]) and "rnnsearch" in json.dumps(
        view["spec"]["section"]["runSets"])
    assert views["convpool"]["spec"]["section"]["panelBankConfig"]["sections"][0]["panels"][0]["config"]["metrics"] \
        == ["valid/error"]


def test_a_runs_wandb_config_has_the_keys_that_name_it_at_the_top(tmp_path: Path):
    cfg = tiny(tmp_path, "norm=prmsnorm", "norm.p=0.5", "seed=2", "optim.lr=0.003", "logger=wandb")
    overrides = ["task=tiny", "norm=prmsnorm", "norm.p=0.5", "seed=2", "optim.lr=0.003", "logger=wandb",
                 f"paths.runs_dir={tmp_path}", "train.steps=4"]
    settings = wandb_logger.wandb_settings(cfg, {"norm": {"name": "prmsnorm"}}, None, overrides)
    fields = {k: v for k, v in settings["config"].items() if k != "norm"}
    assert fields == {"task_name": "tiny", "data_name": "synthetic", "scale_name": "mini", "norm_name": "prmsnorm",
                      "norm_p": 0.5, "seed": 2, "optim_lr": 0.003}
    assert settings["config"]["norm"] == {"name": "prmsnorm"} and settings["job_type"] == "train"
    assert settings["group"] == "tiny"  # not a multirun: the experiment, else the task


def test_a_multirun_job_is_grouped_by_its_sweep_folder(tmp_path: Path):
    cfg = compose_cfg(["task=tiny", f"paths.runs_dir={tmp_path}", "logger=wandb"], hydra_node=True)
    with open_dict(cfg):
        cfg.hydra.mode = "MULTIRUN"
        cfg.hydra.sweep.dir = str(tmp_path / "multirun" / "tiny-fig3" / "synthetic-mini")
    HydraConfig.instance().set_config(cfg)
    try:
        assert wandb_logger.sweep_group() == "tiny-fig3/synthetic-mini"
        assert wandb_logger.wandb_settings(cfg, {}, "fig3")["group"] == "tiny-fig3/synthetic-mini"
    finally:
        HydraConfig.instance().cfg = None
    assert wandb_logger.sweep_group() is None
