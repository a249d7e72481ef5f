"""Everything a run needs, built from the config once.

    plan = prepare(cfg, run_dir)        # checks only: bad input raises ConfigError, nothing is written
    with distributed.process_group(plan.device) as world:
        run, state = build(plan, world)  # task, model, optimizer, schedule, loggers; resumed state

The training loop (loop.py) then reads `run` and `state` and nothing else.
"""
from __future__ import annotations

import importlib
import logging
import platform
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch
from omegaconf import DictConfig, OmegaConf

from .. import allocator
from ..norms import Normalization, build_normalization
from ..tasks import TASKS, Task, get_task_class
from . import distributed
from .checkpoint import TrainState, seed_everything
from .config import ConfigError, check_config, check_data_root, config_differences, scrub
from .logs import MetricsFile, WandbLogger, log, wandb_mode
from .optim import beta1_switch, build_optimizer, build_schedule


@dataclass
class Plan:
    """A checked config: what to train, where, and whether it resumes."""
    cfg: DictConfig
    run_dir: Path
    experiment: str | None
    task_cls: type[Task]
    norms: Normalization
    config: dict[str, Any]  # resolved, secrets scrubbed: what config.yaml and wandb get
    resume_from: Path | None
    device: torch.device


@dataclass
class Run:
    """One run's objects. `model` is what the step calls (DDP-wrapped and/or compiled); `raw_model`
    the module itself (state_dict, evaluation)."""
    plan: Plan
    world: distributed.World
    device: torch.device
    task: Task
    model: torch.nn.Module
    raw_model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    set_beta1: Callable[[int], None]
    params: list[torch.nn.Parameter]  # the trained ones, for clipping
    metrics: MetricsFile | None  # rank 0 only
    wandb: WandbLogger | None  # rank 0 with logger=wandb

    @property
    def cfg(self) -> DictConfig:
        return self.plan.cfg

    @property
    def run_dir(self) -> Path:
        return self.plan.run_dir


def prepare(cfg: DictConfig, run_dir: Path, experiment: str | None = None) -> Plan:
    """Check cfg against everything that can be checked before training; raise ConfigError if bad."""
    run_dir = Path(run_dir)
    check_config(cfg)
    cls = task_class(cfg)
    if cfg.data.name not in cls.supported_data:
        raise ConfigError(f"data={cfg.data.name} is not supported by task={cls.name}; supported: {', '.join(cls.supported_data)}")
    check_data_root(cfg)
    norms = normalization(cfg, cls)
    config = scrub(OmegaConf.to_container(cfg, resolve=True))
    resume_from = guard_resume(run_dir, config)
    if cfg.logger.name == "wandb":
        wandb_mode(cfg.logger)  # a missing API key fails now, not after the model is built
    # refused before joining the group, so no rank waits for one that already gave up
    if cls.ddp_unsupported and distributed.requested_world().distributed:
        raise ConfigError(f"task={cls.name} cannot train under DDP: {cls.ddp_unsupported}; run it in one process")
    return Plan(cfg, run_dir, experiment, cls, norms, config, resume_from, resolve_device(cfg.device))


def build(plan: Plan, world: distributed.World) -> tuple[Run, TrainState]:
    """The task, model, optimizer and schedule of this process (one rank under DDP), resumed from
    plan.resume_from if set; on rank 0 also the run directory's files and loggers."""
    cfg = plan.cfg
    if not world.main:
        log.setLevel(logging.WARNING)  # rank 0 reports progress; the others only what goes wrong
    device = distributed.rank_device(plan.device, world)
    seed_everything(cfg.seed)  # the same initial weights everywhere (DDP broadcasts rank 0's anyway)
    try:
        task = plan.task_cls(cfg, plan.norms, device)
        raw_model = task.build_model().to(device)
    except (ValueError, FileNotFoundError) as e:  # tasks report bad input (a missing data file) this way
        raise ConfigError(str(e)) from e
    if world.rank > 0:
        # own dropout masks per rank; rank 0 keeps the one-process stream
        seed_everything(cfg.seed + 1_000_003 * world.rank)
    total = int(cfg.train.steps)
    optimizer = build_optimizer(raw_model.parameters(), cfg.optim)
    scheduler = build_schedule(optimizer, cfg.optim, total)

    state = TrainState()
    if plan.resume_from is not None:
        state = TrainState.load(plan.resume_from, raw_model, optimizer, scheduler, world, cfg.seed)
        if state.step > total:
            raise ConfigError(f"{plan.resume_from} is at step {state.step} but train.steps={total}; "
                              f"raise train.steps or choose another hydra.run.dir")
        log.info(f"resuming {plan.run_dir} from step {state.step}")

    # DDP's construction is a collective: past it, every rank has read the run dir, so rank 0 may write
    model = distributed.wrap(raw_model, device, world)
    model = torch.compile(model) if cfg.train.compile else model
    metrics, wandb = None, None
    if world.main:
        plan.run_dir.mkdir(parents=True, exist_ok=True)
        write_config(plan.run_dir, plan.config)
        metrics = MetricsFile(plan.run_dir / "metrics.jsonl", state.step)
        wandb = WandbLogger(cfg, plan.config, plan.run_dir, plan.experiment) if cfg.logger.name == "wandb" else None
    params = [p for p in raw_model.parameters() if p.requires_grad]
    run = Run(plan, world, device, task, model, raw_model, optimizer, scheduler,
              beta1_switch(optimizer, cfg.optim, total), params, metrics, wandb)
    return run, state


# Pieces of the checks and of the build ---------------------------------------------------------
def task_class(cfg: DictConfig) -> type[Task]:
    """The registered task, or the one `task.class_path: module:Class` names (tasks kept outside the package)."""
    path = cfg.task.get("class_path")
    if path is None:
        try:
            return get_task_class(cfg.task.name)
        except ValueError as e:
            raise ConfigError(str(e)) from None
    module, _, name = str(path).partition(":")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        raise ConfigError(f"task.class_path={path} cannot be imported; give it as module:Class "
                          f"or use a registered task: {', '.join(TASKS)}") from None


def normalization(cfg: DictConfig, cls: type[Task]) -> Normalization:
    options = OmegaConf.to_container(cfg.norm, resolve=True)
    try:
        return build_normalization(cfg.norm.name, options, supported=cls.supported_norms, task=f"task={cls.name}")
    except ValueError as e:
        raise ConfigError(f"norm={cfg.norm.name}: {e}") from None


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def guard_resume(run_dir: Path, config: dict[str, Any]) -> Path | None:
    """The checkpoint to resume from, or None for a fresh start; refuses to mix two configs."""
    saved = run_dir / "config.yaml"
    last = run_dir / "checkpoints" / "last.pt"
    if not saved.exists():
        if last.exists():
            raise ConfigError(f"{run_dir} holds a checkpoint but no config.yaml, so a resume cannot be checked; "
                              f"remove {run_dir} or choose another hydra.run.dir")
        return None
    diffs = config_differences(OmegaConf.to_container(OmegaConf.load(saved)), config)
    if diffs:
        shown = "; ".join(diffs[:3]) + (f"; and {len(diffs) - 3} more" if len(diffs) > 3 else "")
        raise ConfigError(f"{run_dir} holds a run with another config ({shown}); only train.steps and "
                          f"train.max_minutes may change on resume: choose another hydra.run.dir or remove {run_dir}")
    return last if last.exists() else None


def write_config(run_dir: Path, config: dict[str, Any]) -> None:
    tmp = run_dir / "config.yaml.tmp"
    OmegaConf.save(OmegaConf.create(config), tmp)
    tmp.replace(run_dir / "config.yaml")


def environment(run: Run) -> dict[str, Any]:
    """What summary.json's `env` records: where and how the numbers were made."""
    device, described = run.device, run.plan.norms.describe()
    return {
        "torch": torch.__version__,
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_name(),
        "threads": torch.get_num_threads(),
        "allocator": allocator.in_effect(),  # run() applied cfg.allocator
        "impl": described.get("impl_used", described.get("impl")),  # what ran, where the norm says
        "norm": described,
        "compile": bool(run.cfg.train.compile),
        "python": platform.python_version(),
        "world_size": run.world.world_size,
    }


def cpu_name() -> str:
    """The CPU model for the report's hardware line (platform.processor() is empty on Linux)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
