"""Everything a run needs, built from the config once.

    plan = prepare(cfg, run_dir)        # checks only: bad input raises ConfigError, nothing is written
    with distributed.process_group(plan.device) as world:
        run, state = build(plan, world)  # task, model, optimizer, schedule, loggers; resumed state

The training loop (loop.py) then reads `run` and `state` and nothing else.
"""
from __future__ import annotations

import fcntl
import importlib
import json
import logging
import platform
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch
from omegaconf import DictConfig, OmegaConf

from .. import allocator, record
from ..atomic import atomic_write_text
from ..norms import Normalization, build_normalization
from ..tasks import TASKS, Task, codebases, get_task_class, paper_data
from . import checkpoint, distributed, precision
from .checkpoint import TrainState, seed_everything
from .config import ConfigError, check_config, check_data_root, scrub
from .console import log
from .files import MetricsFile
from .wandb_logger import WandbLogger, wandb_mode
from .optim import beta1_switch, build_optimizer, build_schedule, first_schedule_difference


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
    resume_from: Path | None = None
    saved_config: dict[str, Any] | None = None  # the run directory's config.yaml, when it has one
    finished: dict[str, Any] | None = None  # the summary of a run this command already finished
    reevaluate: bool = False  # only evaluation settings changed: score the trained model again
    reselect: bool = False  # train.select_metric/select_mode changed: pick the tested weights again


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


def prepare(cfg: DictConfig, run_dir: Path, experiment: str | None = None, overrides: list[str] | None = None) -> Plan:
    """Check cfg against everything that can be checked before training; raise ConfigError if bad."""
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
    lock = RunDirLock(run_dir) if world.main else None
    plan = Plan(cfg, run_dir, experiment, cls, norms, config, device, mixed, lock, scrub(list(overrides or [])))
    try:
        guard_resume(plan)
    except BaseException:
        if lock is not None:
            lock.release()
        raise
    return plan


def build(plan: Plan, world: distributed.World) -> tuple[Run, TrainState]:
    """The task, model, optimizer and schedule of this process (one rank under DDP), resumed from
    plan.resume_from if set; on rank 0 also the run directory's files and loggers."""
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

    state = TrainState()
    if plan.resume_from is not None:
        state = TrainState.load(plan.resume_from, plan.config, raw_model, optimizer, scheduler, world, cfg.seed,
                                mixed.scaler)
        if state.step > total:
            raise ConfigError(f"{plan.resume_from} is at step {state.step} but train.steps={total}; "
                              f"raise train.steps or choose another hydra.run.dir")
        check_schedule_continues(plan, state.step)
        if plan.reselect:
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


def guard_resume(plan: Plan) -> None:
    """Set what plan.run_dir holds: a checkpoint to resume from, a finished run, or nothing (a fresh
    start). A resume may change what record.changes accepts (the step budget, where files go, how
    runs are logged, keys a newer suite added, evaluation and selection settings), each named in
    one log line; a change to what is trained is refused, with how to run it beside this one."""
    run_dir = plan.run_dir
    saved = run_dir / "config.yaml"
    last = run_dir / "checkpoints" / "last.pt"
    if not saved.exists():
        if last.exists():
            raise ConfigError(f"{run_dir} holds a checkpoint but no config.yaml, so a resume cannot be checked; "
                              f"give this run a new folder (hydra.run.dir=<new folder>)")
        return
    try:
        plan.saved_config = OmegaConf.to_container(OmegaConf.load(saved))
        owner = record.describe(record.identity(plan.saved_config))
    except Exception as e:  # noqa: BLE001 (not YAML, or not a run's config: one line, whatever the cause)
        raise ConfigError(f"{saved} cannot be read as a run's config ({type(e).__name__}); repair it, or give "
                          f"this run a new folder (hydra.run.dir=<new folder>)") from None
    diff = record.changes(plan.saved_config, plan.config)
    if diff.refused:
        shown = "; ".join(diff.refused[:3]) + (f"; and {len(diff.refused) - 3} more" if len(diff.refused) > 3 else "")
        raise ConfigError(f"{run_dir} holds {owner} trained with another config ({shown}), which would change "
                          f"what is trained: to train this config as a separate run, give it its own folder "
                          f"(hydra.run.dir=<new folder>, or hydra.sweep.dir in a sweep); the run there is kept")
    if diff.noted():
        log.info(f"{run_dir}: resuming with {'; '.join(diff.noted())}")
    plan.resume_from = last if last.exists() else None
    plan.reevaluate = bool(diff.eval_only or diff.selection)
    plan.reselect = bool(diff.selection)
    summary = read_summary(run_dir / "summary.json")
    status = summary.get("status")
    needs_weights = diff.budget + diff.eval_only + diff.selection  # more steps, a new evaluation or selection
    if plan.resume_from is None and status in ("completed", "diverged"):
        # a run record kept without its weights (results/small/runs commits them so): it stands as it is
        if needs_weights:
            raise ConfigError(f"{run_dir} holds {owner}, finished ({status}) at step {summary.get('steps')} but its "
                              f"checkpoints are gone, so it cannot go on with {'; '.join(needs_weights)}: to train it "
                              f"again, give it its own folder (hydra.run.dir=<new folder>); the record there is kept")
        plan.finished = summary
    elif status == "completed" and not needs_weights:  # with its checkpoints (the branch above: without)
        plan.finished = summary


def read_summary(path: Path) -> dict[str, Any]:
    """A run's summary.json, or {} when there is none or it cannot be read (the run then goes on)."""
    try:
        summary = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return summary if isinstance(summary, dict) else {}


def check_schedule_continues(plan: Plan, steps_done: int) -> None:
    """A run resumed with another train.steps must train like a fresh run of that length."""
    old_total = int(plan.saved_config["train"]["steps"])
    new_total = int(plan.cfg.train.steps)
    differs_at = first_schedule_difference(plan.cfg.optim, old_total, new_total, steps_done)
    if differs_at is not None:
        run_dir = plan.run_dir
        raise ConfigError(
            f"{run_dir} holds {steps_done} steps of a train.steps={old_total} run; train.steps={new_total} changes its "
            f"{plan.cfg.optim.schedule.name} schedule (lr or Adam's beta1) from step {differs_at + 1} on, so the "
            f"resumed run would not equal a fresh one: keep train.steps={old_total}, or start over: remove {run_dir} "
            f"or choose another hydra.run.dir")


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
        raise ConfigError(f"{plan.resume_from} predates evaluation histories in checkpoints, so train.select_metric "
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
    """An exclusive flock on <run_dir>/.lock, released when the run ends or its process dies (even by
    SIGKILL, so a killed run never leaves a stale lock)."""

    def __init__(self, run_dir: Path):
        run_dir.mkdir(parents=True, exist_ok=True)
        self.path = run_dir / ".lock"
        self.file = open(self.path, "a")
        try:
            fcntl.flock(self.file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.file.close()
            holder = _lock_holder(self.path)
            raise ConfigError(f"another process{f' (pid {holder})' if holder else ''} is running in {run_dir}: "
                              f"wait for it to end, or choose another hydra.run.dir") from None

    def release(self) -> None:
        if not self.file.closed:
            fcntl.flock(self.file, fcntl.LOCK_UN)
            self.file.close()


def _lock_holder(path: Path) -> int | None:
    """The pid holding a flock on path, from /proc/locks (Linux); None where that cannot be told."""
    try:
        inode = path.stat().st_ino
        for line in Path("/proc/locks").read_text().splitlines():
            fields = line.split()
            if len(fields) > 5 and fields[1] == "FLOCK" and fields[5].rsplit(":", 1)[-1] == str(inode):
                return int(fields[4])
    except (OSError, ValueError):
        pass
    return None


def write_config(run_dir: Path, config: dict[str, Any], overrides: list[str]) -> None:
    """config.yaml: the resolved config, and the overrides it came from (record.RECORD_ONLY)."""
    atomic_write_text(run_dir / "config.yaml", OmegaConf.to_yaml(OmegaConf.create({**config, "overrides": overrides})))


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
        "precision": run.plan.precision,
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
