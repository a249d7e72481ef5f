"""Everything a run needs, built from the config once.

    plan = plan_run(cfg, run_dir)       # checks only: bad input raises ConfigError, nothing is written
    with distributed.process_group(plan.device) as world:
        run, state = build(plan, world)  # task, model, optimizer, schedule, loggers; resumed state

The training loop (loop.py) then reads `run` and `state` and nothing else.
"""
from __future__ import annotations

import fcntl
import importlib
import logging
import platform
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch
from omegaconf import DictConfig, OmegaConf

from .. import allocator, record
from ..atomic import atomic_write_text
from ..errors import ConfigError
from ..host import cpu_name
from ..norms import Normalization, build_normalization
from ..redact import scrub
from ..tasks import TASKS, Task, codebases, get_task_class, paper_data
from ..wandb_access import wandb_mode
from . import checkpoint, distributed, precision, resume
from .checkpoint import TrainState, seed_everything
from .config import check_config, check_data_root
from .console import log
from .files import MetricsFile
from .wandb_logger import WandbLogger
from .optim import beta1_switch, build_optimizer, build_schedule
from .resume import Resume


@dataclass
class Plan:
    """A checked config: what to train, where, and whether it resumes."""
    cfg: DictConfig
    run_dir: Path
    experiment: str | None
    task_cls: type[Task]
    norms: Normalization
    config: dict[str, Any]  # resolved, secrets scrubbed: what config.yaml and wandb get
    device: torch.device
    precision: str  # fp32 | bf16 | fp16
    lock: RunDirLock | None  # held by rank 0 until the run ends
    overrides: list[str]  # the command line's, secrets scrubbed: noted in config.yaml
    resume: Resume = field(default_factory=Resume)  # what the run directory holds for this config


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
    precision: precision.Precision
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


def plan_run(cfg: DictConfig, run_dir: Path, experiment: str | None = None, overrides: list[str] | None = None) -> Plan:
    """Check cfg against everything that can be checked before training, and what run_dir holds for it
    (resume.inspect); raise ConfigError if bad. Nothing is built or written."""
    run_dir = Path(run_dir)
    check_config(cfg)
    refused = paper_data.refusal(cfg, overrides or []) or codebases.refusal(cfg)
    if refused:
        raise ConfigError(refused)
    cls = task_class(cfg)
    if cfg.data.name not in cls.supported_data:
        raise ConfigError(f"data={cfg.data.name} is not supported by task={cls.name}; supported: {', '.join(cls.supported_data)}")
    check_data_root(cfg)
    norms = normalization(cfg, cls)
    config = scrub(OmegaConf.to_container(cfg, resolve=True))
    if cfg.logger.name == "wandb":
        wandb_mode(cfg.logger)  # a missing API key fails now, not after the model is built
    world = distributed.requested_world()
    # refused before joining the group, so no rank waits for one that already gave up
    if cls.ddp_unsupported and world.distributed:
        raise ConfigError(f"task={cls.name} cannot train under DDP: {cls.ddp_unsupported}; run it in one process")
    # one process per run directory (under DDP, rank 0 holds it for all): taken before the directory
    # is read, so two commands can never both decide to start or resume it
    device = resolve_device(cfg.device)
    mixed = precision.check(cfg.train.get("precision", "fp32"), device)
    precision.check_tf32(cfg.train.get("tf32", True))
    lock = RunDirLock(run_dir) if world.main else None
    plan = Plan(cfg, run_dir, experiment, cls, norms, config, device, mixed, lock, scrub(list(overrides or [])))
    try:
        plan.resume = resume.inspect(run_dir, config)
    except BaseException:
        if lock is not None:
            lock.release()
        raise
    return plan


def build(plan: Plan, world: distributed.World) -> tuple[Run, TrainState]:
    """The task, model, optimizer and schedule of this process (one rank under DDP), resumed from
    plan.resume.checkpoint if set; on rank 0 also the run directory's files and loggers."""
    cfg = plan.cfg
    if not world.main:
        log.setLevel(logging.WARNING)  # rank 0 reports progress; the others only what goes wrong
    device = distributed.rank_device(plan.device, world)
    # the norm's kernel (the fused CPU build: 30-60 s the first time) is ready before any clock starts
    plan.norms.prepare(device)
    seed_everything(cfg.seed)  # the same initial weights everywhere (DDP broadcasts rank 0's anyway)
    try:
        task = plan.task_cls(cfg, plan.norms, device)
        raw_model = task.build_model().to(device)
    except (ValueError, FileNotFoundError) as e:  # tasks report bad input (a missing data file) this way
        raise ConfigError(str(e)) from e
    for module in raw_model.modules():  # its layers' own kernels (the fused GRU cell) are built before the clock too
        if hasattr(module, "prepare_kernel"):
            module.prepare_kernel(device)
    if world.rank > 0:
        # own dropout masks per rank; rank 0 keeps the one-process stream
        seed_everything(cfg.seed + 1_000_003 * world.rank)
    total = int(cfg.train.steps)
    optimizer = build_optimizer(raw_model.parameters(), cfg.optim)
    scheduler = build_schedule(optimizer, cfg.optim, total)
    mixed = precision.build(plan.precision, device)
    precision.apply_tf32(cfg.train.get("tf32", True), device)

    state = TrainState()
    resume_from = plan.resume.checkpoint
    if resume_from is not None:
        state = TrainState.load(resume_from, plan.config, raw_model, optimizer, scheduler, world, cfg.seed,
                                mixed.scaler)
        if state.step > total:
            raise ConfigError(f"{resume_from} is at step {state.step} but train.steps={total}; "
                              f"raise train.steps or choose another hydra.run.dir")
        resume.check_schedule_continues(plan.resume, cfg, run_dir=plan.run_dir, steps_done=state.step)
        if plan.resume.reselect:
            reselect(plan, state, raw_model)
        log.info(f"resuming {plan.run_dir} from step {state.step}")

    # DDP's construction is a collective: past it, every rank has read the run dir, so rank 0 may write
    model = distributed.wrap(raw_model, device, world)
    model = torch.compile(model) if cfg.train.compile else model
    metrics, wandb = None, None
    if world.main:
        plan.run_dir.mkdir(parents=True, exist_ok=True)
        write_config(plan.run_dir, plan.config, plan.overrides)
        metrics = MetricsFile(plan.run_dir / "metrics.jsonl", state.step)
        wandb = WandbLogger(cfg, plan.config, plan.run_dir, plan.experiment) if cfg.logger.name == "wandb" else None
    params = [p for p in raw_model.parameters() if p.requires_grad]
    run = Run(plan, world, device, task, model, raw_model, optimizer, scheduler, mixed,
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
    return torch.device(record.resolved_device(name))


def reselect(plan: Plan, state: TrainState, model: torch.nn.Module) -> None:
    """A resume with another train.select_metric/select_mode: the best evaluation under the new rule,
    from the run's evaluation history, if its weights were kept (best.pt's step or the last one)."""
    select = record.selection(plan.cfg.train, plan.task_cls.best_metric)
    if select is None:  # `last`: the last weights are tested, nothing to pick
        state.best, state.evals_since_best = {}, 0
        return
    metric, mode = select
    separate = "to select by it, train it as a separate run (hydra.run.dir=<new folder>)"
    if not state.evals:
        raise ConfigError(f"{plan.resume.checkpoint} predates evaluation histories in checkpoints, so train.select_metric "
                          f"cannot change on resume; {separate}")
    if metric not in state.evals[-1]:
        raise ConfigError(f"train.select_metric={metric} is not a validation metric of task={plan.task_cls.name}; "
                          f"choose one of: {', '.join(k for k in state.evals[-1] if k != 'step')} (or last)")
    best, since = None, 0
    for evaluation in state.evals:
        if best is None or record.better(evaluation[metric], best[metric], mode):
            best, since = evaluation, 0
        else:
            since += 1
    best_pt = plan.run_dir / "checkpoints" / "best.pt"
    kept = checkpoint.load(best_pt, plan.config)["step"] if best_pt.exists() else None
    if best["step"] == state.step:  # the loaded weights: they become best.pt
        checkpoint.save(best_pt, {**checkpoint.stamp(plan.config), "model": model.state_dict(), "step": state.step,
                                  "valid": {k: v for k, v in best.items() if k != "step"}})
    elif best["step"] != kept:
        raise ConfigError(f"by valid {metric} ({mode}) the best weights are those of step {best['step']}, which "
                          f"{plan.run_dir} did not keep (it kept steps {kept} and {state.step}); {separate}")
    state.best, state.evals_since_best = dict(best), since
    log.info(f"selection by valid {metric} ({mode}): step {best['step']}")


class RunDirLock:
    """An exclusive flock on <run_dir>/.lock (record.LOCK_FILE), released when the run ends or its process dies (even by
    SIGKILL, so a killed run never leaves a stale lock). A single run takes it before Hydra writes into the folder
    (launchers/busy_run.py); the run's own RunDirLock(run_dir) then is that lock, not a second one."""

    held: dict[Path, "RunDirLock"] = {}  # this process's locks, by folder

    def __new__(cls, run_dir: Path):
        mine = cls.held.get(Path(run_dir).resolve())
        return mine if mine is not None and not mine.file.closed else super().__new__(cls)

    def __init__(self, run_dir: Path):
        if getattr(self, "file", None) is not None and not self.file.closed:  # held already (busy_run)
            return
        run_dir.mkdir(parents=True, exist_ok=True)
        self.path = run_dir / record.LOCK_FILE
        self.file = open(self.path, "a")
        try:
            fcntl.flock(self.file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.file.close()
            raise ConfigError(record.busy(run_dir, record.lock_holder(run_dir))) from None
        self.held[run_dir.resolve()] = self

    def release(self) -> None:
        if not self.file.closed:
            fcntl.flock(self.file, fcntl.LOCK_UN)
            self.file.close()
        self.held.pop(self.path.parent.resolve(), None)

    @classmethod
    def release_held(cls, run_dir: Path) -> None:
        """Release this process's lock on run_dir, if it holds one (a run that ended before taking it over)."""
        mine = cls.held.get(Path(run_dir).resolve())
        if mine is not None:
            mine.release()


def write_config(run_dir: Path, config: dict[str, Any], overrides: list[str]) -> None:
    """config.yaml: the resolved config, the overrides it came from (record.RECORD_ONLY) and its seal line."""
    text = OmegaConf.to_yaml(OmegaConf.create({**config, "overrides": overrides}))
    atomic_write_text(run_dir / "config.yaml", record.sealed(text))  # its last line tells a whole file from a cut one


def environment(run: Run) -> dict[str, Any]:
    """What summary.json's `env` records: where and how the numbers were made."""
    device, described = run.device, run.plan.norms.describe()
    return {
        "torch": torch.__version__,
        # the GPU's index too where the run chose none (a sweep's job on its own GPU: runner/gpus.py)
        "device": f"cuda:{torch.cuda.current_device()}" if device.type == "cuda" and device.index is None else str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_name(),
        "threads": torch.get_num_threads(),
        "allocator": allocator.in_effect(),  # run() applied cfg.allocator
        "impl": described.get("impl_used", described.get("impl")),  # what ran, where the norm says
        "norm": described,
        "compile": bool(run.cfg.train.compile),
        "precision": run.plan.precision,
        "tf32": precision.tf32_in_effect(device),
        "python": platform.python_version(),
        "world_size": run.world.world_size,
    }
