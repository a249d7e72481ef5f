"""Where numbers go: metrics.jsonl and summary.json (always), wandb (logger=wandb), the console."""
from __future__ import annotations

import json
import logging
import math
import netrc
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from omegaconf import DictConfig

from .config import ConfigError, scrub

log = logging.getLogger("rmsnorm_repro.train")


def finite_or_none(value: Any) -> Any:
    """NaN/inf become null, so every file stays strict JSON (a diverged run's loss is null)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite_or_none(v) for k, v in value.items()}
    return value


def write_json(path: Path, obj: dict[str, Any]) -> None:
    """Atomic: readers (the report, a sweep monitor) never see half a file."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(finite_or_none(obj), indent=2, allow_nan=False) + "\n")
    os.replace(tmp, path)


class MetricsFile:
    """metrics.jsonl: one JSON object per logged step, flushed as it is written."""

    def __init__(self, path: Path, resume_step: int):
        self.path = path
        self._truncate(resume_step)
        self.file = open(path, "a", encoding="utf-8")

    def _truncate(self, step: int) -> None:
        """Keep lines up to the checkpoint's step: steps after it are replayed by the resumed run.

        A line cut short by a kill does not parse and goes too.
        """
        kept = []
        if step > 0 and self.path.exists():
            for line in self.path.read_text(encoding="utf-8").splitlines():
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if record.get("step", math.inf) <= step:
                    kept.append(line + "\n")
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text("".join(kept), encoding="utf-8")
        os.replace(tmp, self.path)

    def log(self, record: dict[str, Any]) -> None:
        self.file.write(json.dumps(finite_or_none(record), allow_nan=False) + "\n")
        self.file.flush()

    def close(self) -> None:
        self.file.close()


# wandb -----------------------------------------------------------------------------------------
def _has_wandb_key() -> bool:
    """An API key in the environment or in ~/.netrc (where `wandb login` puts it); no network."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    host = urlparse(os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")).hostname
    try:
        return netrc.netrc().authenticators(host) is not None
    except (OSError, netrc.NetrcParseError):
        return False


def wandb_mode(logger: DictConfig) -> str:
    mode = logger.get("mode") or os.environ.get("WANDB_MODE") or "offline"
    if mode not in ("online", "offline", "disabled", "shared", "dryrun", "run"):
        raise ConfigError(f"logger.mode={mode!r} is unknown; choose online, offline or disabled")
    if mode in ("online", "shared", "run") and not _has_wandb_key():
        raise ConfigError("wandb online mode needs an API key: run `wandb login` or set WANDB_API_KEY, "
                          "or log offline with logger.mode=offline (upload later with `wandb sync`)")
    return mode


def wandb_settings(cfg: DictConfig, config: dict[str, Any], experiment: str | None) -> dict[str, Any]:
    """The arguments of wandb.init for this run (config already scrubbed of secrets)."""
    lg = cfg.logger
    p = f"-p{cfg.norm.p:g}" if float(cfg.norm.p) != 1.0 else ""
    tags = [f"task:{cfg.task.name}", f"scale:{cfg.scale.name}", f"norm:{cfg.norm.name}", *lg.get("tags", [])]
    return {
        "project": lg.get("project", "rmsnorm-repro"),
        "entity": lg.get("entity"),
        "group": lg.get("group") or experiment or cfg.task.name,
        "name": f"{cfg.norm.name}{p}-s{cfg.seed}",
        "tags": tags,
        "config": config,
    }


class WandbLogger:
    """Thin wrapper so the loop logs and finishes without knowing wandb's API."""

    def __init__(self, cfg: DictConfig, config: dict[str, Any], run_dir: Path, experiment: str | None):
        mode = wandb_mode(cfg.logger)  # before the import: a missing key fails at once
        import wandb

        # One wandb run per run directory: a resumed run continues the same wandb run.
        id_file = run_dir / "wandb_id.txt"
        run_id = id_file.read_text().strip() if id_file.exists() else uuid.uuid4().hex[:12]
        id_file.write_text(run_id + "\n")
        # wandb records the command line with the run: show it the scrubbed one
        argv, sys.argv = sys.argv, scrub(sys.argv)
        try:
            self.run = wandb.init(mode=mode, dir=str(run_dir), id=run_id, resume="allow",
                                  **wandb_settings(cfg, config, experiment))
        finally:
            sys.argv = argv

    def log(self, record: dict[str, Any], step: int) -> None:
        self.run.log(record, step=step)

    def summary(self, summary: dict[str, Any]) -> None:
        for key in ("status", "steps", "step_ms_median", "step_ms_mean", "s_per_1k_steps"):
            self.run.summary[key] = summary[key]
        for key, value in summary["final"].items():
            self.run.summary[f"final/{key}"] = value

    def finish(self, exit_code: int) -> None:
        self.run.finish(exit_code=exit_code)


# console ---------------------------------------------------------------------------------------
class Progress:
    """A tqdm bar on a terminal; plain log lines (every 30 s and at each eval) in CI and files.

    Disabled (silent) on DDP ranks other than 0.
    """

    def __init__(self, start: int, total: int, enabled: bool = True):
        self.bar = None
        self.enabled = enabled
        self.last_line = time.perf_counter()
        if enabled and sys.stderr.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=total, initial=start, unit="step", dynamic_ncols=True, file=sys.stderr)

    def step(self, step: int, total: int, loss: float, step_ms: float, evaluated: dict[str, float] | None) -> None:
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.update(1)
            self.bar.set_postfix(loss=f"{loss:.4g}", step_ms=f"{step_ms:.1f}", refresh=False)
            if evaluated:
                self.bar.write(f"step {step}: " + _fmt(evaluated))
            return
        now = time.perf_counter()
        if evaluated or now - self.last_line >= 30 or step == total:
            self.last_line = now
            extra = f" | valid {_fmt(evaluated)}" if evaluated else ""
            log.info(f"step {step}/{total} loss {loss:.4g} step {step_ms:.1f} ms{extra}")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _fmt(metrics: dict[str, float]) -> str:
    return " ".join(f"{k} {v:.4g}" for k, v in metrics.items())
