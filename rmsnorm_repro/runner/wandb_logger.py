"""wandb (logger=wandb): one wandb run per run directory (the mode check before anything is built: wandb_access.py)."""
from __future__ import annotations

import sys
import uuid
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from .. import record
from ..record import SUMMARY_SCALARS, metric_goal
from ..redact import is_secret_key, scrub
from ..wandb_access import wandb_mode
from .files import finite_or_none

def sweep_group() -> str | None:
    """A multirun job's wandb group: its sweep folder, as "<parent>/<folder>" ("rnnsearch/synthetic-mini",
    "rnnsearch-fig3/synthetic-mini"), so one multirun is one group; None outside a multirun."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if not HydraConfig.initialized() or HydraConfig.get().mode != RunMode.MULTIRUN:
        return None
    sweep = Path(HydraConfig.get().sweep.dir)
    return "/".join(sweep.parts[-2:])


def naming_fields(cfg: DictConfig, overrides: list[str]) -> dict[str, Any]:
    """The keys that name the run, as top-level config fields ("norm.p" -> "norm_p") so a dashboard
    groups by them: task, data, scale, norm, p, seed, and every override that names its folder."""
    fields = {"task_name": cfg.task.name, "data_name": cfg.data.name, "scale_name": cfg.scale.name,
              "norm_name": cfg.norm.name, "norm_p": float(cfg.norm.p), "seed": int(cfg.seed)}
    for line in overrides:
        key = str(line).split("=", 1)[0].lstrip("+~")
        if key in record.NAME_EXCLUDED or is_secret_key(key) or key.startswith("hydra"):
            continue
        value = OmegaConf.select(cfg, key, default=None)
        if not isinstance(value, DictConfig):  # a config group (norm=rmsnorm) is named by its fields above
            fields.setdefault(key.replace(".", "_"), OmegaConf.to_container(value) if OmegaConf.is_config(value) else value)
    return fields


def recorded_overrides(run_dir: Path) -> list[str]:
    """The command line's overrides as config.yaml notes them (the runner writes it before wandb starts)."""
    path = run_dir / "config.yaml"
    if not path.exists():
        return []
    return [str(line) for line in OmegaConf.load(path).get("overrides") or []]


def wandb_settings(cfg: DictConfig, config: dict[str, Any], experiment: str | None,
                   overrides: list[str] | None = None) -> dict[str, Any]:
    """The arguments of wandb.init for this run (config and overrides already scrubbed of secrets)."""
    lg = cfg.logger
    p = f"-p{cfg.norm.p:g}" if float(cfg.norm.p) != 1.0 else ""
    tags = [f"task:{cfg.task.name}", f"data:{cfg.data.name}", f"scale:{cfg.scale.name}", f"norm:{cfg.norm.name}",
            *lg.get("tags", [])]
    return {
        "project": lg.get("project", "rmsnorm-repro"),
        "entity": lg.get("entity"),
        "group": lg.get("group") or sweep_group() or experiment or cfg.task.name,
        "name": f"{cfg.norm.name}{p}-s{cfg.seed}",
        "job_type": "train",
        "tags": tags,
        "config": {**config, **naming_fields(cfg, list(overrides or ()))},
    }


class WandbLogger:
    """Thin wrapper so the loop logs and finishes without knowing wandb's API.

    One wandb run per run directory, across resumes: its id lives in <run dir>/wandb_id.txt and
    wandb.init resumes it (resume="allow"). Every record carries `step` (the training step, the
    declared step metric); each validation metric is declared with its best (min or max) and its
    last value in the summary; `wall_s` (training wall-clock, continued across resumes) and the
    throughput are logged at each metrics line, so curves can be drawn against wall-clock time.
    """

    def __init__(self, cfg: DictConfig, config: dict[str, Any], run_dir: Path, experiment: str | None):
        mode = wandb_mode(cfg.logger)  # before the import: a missing key or no network fails at once
        import wandb

        id_file = run_dir / "wandb_id.txt"
        run_id = id_file.read_text().strip() if id_file.exists() else uuid.uuid4().hex[:12]
        id_file.write_text(run_id + "\n")
        # wandb records the command line with the run: show it the scrubbed one
        argv, sys.argv = sys.argv, scrub(sys.argv)
        try:
            self.run = wandb.init(mode=mode, dir=str(run_dir), id=run_id, resume="allow",
                                  **wandb_settings(cfg, config, experiment, recorded_overrides(run_dir)))
        finally:
            sys.argv = argv
        self._defined: set[str] = set()
        self._define("step")
        # every curve against the training step by default; wall_s (logged with each metrics line, in
        # the same wandb row as that step's metrics) is declared too, so a panel can take it as x-axis
        self._define("wall_s", step_metric="step", summary="max")
        self._define("*", step_metric="step")

    def _define(self, name: str, **kwargs: Any) -> None:
        define = getattr(self.run, "define_metric", None)
        if define is not None and name not in self._defined:
            define(name, **kwargs)
        self._defined.add(name)

    def log(self, record: dict[str, Any], step: int) -> None:
        for key in record:
            if key.startswith("valid/") and key not in self._defined:
                goal = metric_goal(key)
                self._define(key, step_metric="step", summary=f"{goal},last")
        self.run.log({**record, "step": step}, step=step)

    def log_line(self, record: dict[str, Any], valid: dict[str, float]) -> None:
        """A metrics.jsonl line's wall-clock and throughput, and the step's validation metrics as valid/<name>."""
        extra = {k: v for k, v in record.items() if k == "wall_s" or k.endswith("_per_s")}
        extra.update({f"valid/{k}": v for k, v in valid.items()})
        self.log(finite_or_none(extra), step=int(record["step"]))

    def summary(self, summary: dict[str, Any]) -> None:
        for key in SUMMARY_SCALARS:
            if summary.get(key) is not None:
                self.run.summary[key] = summary[key]
        for key, value in (summary.get("final") or {}).items():
            self.run.summary[f"final/{key}"] = value
        for key, value in (summary.get("best") or {}).items():
            self.run.summary[f"best/{key}"] = value
        env = summary.get("env") or {}
        for key in ("device", "device_name", "threads", "impl", "world_size", "torch"):
            if env.get(key) is not None:
                self.run.summary[f"env/{key}"] = env[key]

    def finish(self, exit_code: int) -> None:
        self.run.finish(exit_code=exit_code)
