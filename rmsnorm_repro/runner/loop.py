"""The training loop: one run of one task with one norm, timed, logged and resumable.

    summary = run(cfg, run_dir)

reads like nanoGPT's train.py: check the config, build task/model/optimizer, resume from
checkpoints/last.pt when the run directory has one, then step / log / evaluate / checkpoint until
train.steps, the wall-clock budget, a NaN loss or a signal stops it, and write summary.json.
The loop knows tasks only through rmsnorm_repro.tasks.base.Task.
"""
from __future__ import annotations

import contextlib
import importlib
import logging
import math
import platform
import random
import signal
import statistics
import time
import traceback
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from .. import allocator
from .. import config_resolvers  # noqa: F401  (the resolvers configs use, e.g. ${if_eq:...})
from ..norms import Normalization, build_normalization
from ..tasks import TASKS, Task, get_task_class
from . import checkpoint, distributed
from .config import ConfigError, check_config, check_data_root, config_differences, scrub
from .logs import MetricsFile, Progress, WandbLogger, log, wandb_mode, write_json
from .optim import beta1_switch, build_optimizer, build_schedule

# keys the runner writes on every metrics line; eval metrics with these names get a "valid_" prefix
RUNNER_KEYS = ("step", "wall_s", "loss", "step_ms", "lr", "examples_per_s", "tokens_per_s")


# Setup -----------------------------------------------------------------------------------------
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


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # seeds CUDA too


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


def environment(device: torch.device, norms: Normalization, compiled: bool) -> dict[str, Any]:
    described = norms.describe()
    return {
        "torch": torch.__version__,
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_name(),
        "threads": torch.get_num_threads(),
        "allocator": allocator.in_effect(),  # run() applied cfg.allocator
        "impl": described.get("impl_used", described.get("impl")),  # what ran, where the norm says
        "norm": described,
        "compile": compiled,
        "python": platform.python_version(),
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


@contextlib.contextmanager
def stop_requests() -> Iterator[dict[str, Any]]:
    """SIGINT/SIGTERM ask the loop to checkpoint and stop after the current step; a second one kills."""
    flag: dict[str, Any] = {"signal": None}
    previous = {}

    def handler(signum, frame):
        flag["signal"] = signal.Signals(signum).name
        signal.signal(signum, previous[signum])

    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            previous[sig] = signal.signal(sig, handler)
        except ValueError:  # not the main thread (e.g. some launchers): no graceful stop there
            pass
    try:
        yield flag
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


# The run ---------------------------------------------------------------------------------------
def run(cfg: DictConfig, run_dir: Path, experiment: str | None = None) -> dict[str, Any]:
    """Train cfg's task in run_dir (resuming if it holds a checkpoint) and return the summary.

    Bad input raises ConfigError before anything is written. Under torchrun (or a SLURM job with
    several tasks) every process calls this and they train one model with DDP (distributed.py):
    rank 0 alone writes files and logs, every rank returns the summary.
    """
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
    device = resolve_device(cfg.device)
    allocator.apply(cfg.allocator)
    with distributed.process_group(device) as world:
        return _run(cfg, run_dir, experiment, cls, norms, config, resume_from, distributed.rank_device(device, world), world)


def _run(cfg, run_dir, experiment, cls, norms, config, resume_from, device, world) -> dict[str, Any]:
    """run() in one process: the only one, or one rank of a DDP run."""
    if not world.main:
        log.setLevel(logging.WARNING)  # rank 0 reports progress; the others only what goes wrong
    seed_everything(cfg.seed)  # the same initial weights everywhere (DDP broadcasts rank 0's anyway)
    try:
        task = cls(cfg, norms, device)
        raw_model = task.build_model().to(device)
    except (ValueError, FileNotFoundError) as e:  # tasks report bad input (a missing data file) this way
        raise ConfigError(str(e)) from e
    if world.rank > 0:
        # own dropout masks per rank; rank 0 keeps the one-process stream
        seed_everything(cfg.seed + 1_000_003 * world.rank)
    total = int(cfg.train.steps)
    optimizer = build_optimizer(raw_model.parameters(), cfg.optim)
    scheduler = build_schedule(optimizer, cfg.optim, total)

    state: dict[str, Any] = {"step": 0, "wall_s": 0.0, "step_ms": [], "units": 0, "best": {}, "last_valid": {},
                             "last_eval_step": 0}
    if resume_from is not None:
        saved = checkpoint.load(resume_from)
        if saved["step"] > total:
            raise ConfigError(f"{resume_from} is at step {saved['step']} but train.steps={total}; "
                              f"raise train.steps or choose another hydra.run.dir")
        raw_model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        scheduler.load_state_dict(saved["scheduler"])
        checkpoint.set_rng_state(saved["rng"] if world.main else _rank_rng(saved, world, cfg.seed))
        state.update({k: saved[k] for k in state})
        state["step_ms"] = saved["step_ms"].tolist()
        log.info(f"resuming {run_dir} from step {state['step']}")

    # DDP's construction is a collective: past it, every rank has read the run dir, so rank 0 may write
    model = distributed.wrap(raw_model, device, world)
    model = torch.compile(model) if cfg.train.compile else model
    metrics, wandb = None, None
    if world.main:
        run_dir.mkdir(parents=True, exist_ok=True)
        write_config(run_dir, config)
        metrics = MetricsFile(run_dir / "metrics.jsonl", state["step"])
        wandb = WandbLogger(cfg, config, run_dir, experiment) if cfg.logger.name == "wandb" else None
    summary: dict[str, Any] = {}
    try:
        with stop_requests() as stop:
            summary = train(cfg, task, model, raw_model, optimizer, scheduler, state, run_dir, metrics, wandb,
                            stop, world)
        summary["env"] = {**environment(device, norms, bool(cfg.train.compile)), "world_size": world.world_size}
        if task.bleu_signature:
            summary["bleu_signature"] = task.bleu_signature
        if world.main:
            write_json(run_dir / "summary.json", summary)
        if wandb is not None:
            wandb.summary(summary)
        return summary
    except Exception as e:
        if not world.main:
            raise
        # a crash (a bug, out of memory): never leave a summary that claims anything else
        write_json(run_dir / "summary.json", scrub({
            **_identity(cfg), "status": "failed", "steps": state["step"], "step_ms_median": None,
            "step_ms_mean": None, "s_per_1k_steps": None, "final": {}, "best": state["best"],
            "env": environment(device, norms, bool(cfg.train.compile)), "error": f"{type(e).__name__}: {e}",
            "traceback": traceback.format_exc(limit=-8),
        }))
        raise
    finally:
        if metrics is not None:
            metrics.close()
        if wandb is not None:
            wandb.finish(exit_code=0 if summary.get("status") in ("completed", "diverged", "interrupted") else 1)


def write_config(run_dir: Path, config: dict[str, Any]) -> None:
    tmp = run_dir / "config.yaml.tmp"
    OmegaConf.save(OmegaConf.create(config), tmp)
    tmp.replace(run_dir / "config.yaml")


def _rank_rng(saved: dict[str, Any], world: distributed.World, seed: int) -> dict[str, Any]:
    """This rank's RNG states from the checkpoint; a run resumed on another number of processes
    cannot continue the other ranks' streams, so they start fresh ones from (seed, rank, step)."""
    ranks = saved.get("rng_ranks")
    if ranks is not None and len(ranks) == world.world_size:
        return ranks[world.rank]
    seed_everything(seed + 1_000_003 * world.rank + 7919 * int(saved["step"]))
    return checkpoint.rng_state()


def _identity(cfg: DictConfig) -> dict[str, Any]:
    return {"task": cfg.task.name, "norm": cfg.norm.name, "p": float(cfg.norm.p), "seed": int(cfg.seed),
            "data": cfg.data.name, "scale": cfg.scale.name}


def train(cfg, task, model, raw_model, optimizer, scheduler, state, run_dir, metrics, wandb, stop, world):
    """Steps from state["step"] to train.steps; returns the summary (without env).

    Under DDP every rank runs this loop in lockstep: the logged loss and throughput are all-reduced
    over ranks, stop requests (a signal, the time budget, a NaN) too, so all ranks stop at the same
    step. Rank 0 alone evaluates (on the unwrapped model, the others wait at a barrier), logs and
    checkpoints. step_ms is rank 0's and includes DDP's gradient all-reduce.
    """
    device = next(raw_model.parameters()).device
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    total, clip = int(cfg.train.steps), cfg.optim.clip
    eval_every, log_every, ckpt_every = cfg.train.eval_every, cfg.train.log_every, cfg.train.checkpoint_every
    budget_s = cfg.train.max_minutes * 60 if cfg.train.max_minutes else math.inf
    per_s = f"{task.unit}_per_s"
    set_beta1 = beta1_switch(optimizer, cfg.optim, total)
    params = [p for p in raw_model.parameters() if p.requires_grad]
    best_name, best_mode = task.best_metric
    clock0 = time.perf_counter() - state["wall_s"]  # wall_s continues across resumes
    start = step = state["step"]
    status, first_ms, stopping = "completed", None, None
    interval_units, interval_ms = 0, 0.0

    def evaluate(split: str) -> dict[str, float]:
        """Rank 0's evaluation (the DDP wrapper's forward would wait for the other ranks)."""
        if not world.main:
            distributed.barrier(world)
            return {}
        eval_model = raw_model if world.distributed else model
        eval_model.eval()
        with torch.no_grad():
            out = {k: float(v) for k, v in task.evaluate(eval_model, split).items()}
        model.train()
        distributed.barrier(world)
        return out

    def save_checkpoint() -> None:
        rng = distributed.gather(checkpoint.rng_state(), world)  # every rank's dropout stream, on rank 0
        if not world.main:
            return
        state["wall_s"] = time.perf_counter() - clock0
        checkpoint.save(run_dir / "checkpoints" / "last.pt", {
            **{k: v for k, v in state.items() if k != "step_ms"},
            "step_ms": torch.tensor(state["step_ms"], dtype=torch.float64),
            "model": raw_model.state_dict(), "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(), "rng": rng[0],
            **({"rng_ranks": rng} if world.distributed else {}),
        })

    progress = Progress(start, total, enabled=world.main)
    model.train()
    try:
        for step in range(start, total):
            batch = task.train_batch(step, world.rank, world.world_size)
            set_beta1(step)
            lr = optimizer.param_groups[0]["lr"]
            # The timed step: forward, backward, clip, update; the device synchronized on both sides.
            sync()
            t0 = time.perf_counter()
            optimizer.zero_grad(set_to_none=True)
            loss, n = task.loss(model, batch)
            if world.distributed and task.unit == "tokens":
                # token shards differ in size: weigh each rank's mean so DDP's average is the global mean
                (loss * distributed.token_weight(int(n), device, world)).backward()
            else:
                loss.backward()
            if clip:
                torch.nn.utils.clip_grad_norm_(params, clip)
            optimizer.step()
            scheduler.step()
            sync()
            ms = (time.perf_counter() - t0) * 1e3

            done = step + 1
            # the global batch's loss and size; a signal or the time budget on any rank stops all of them.
            # The decisions below read this snapshot: a signal arriving later counts at the next step.
            loss_value, n, signum, out_of_time = distributed.reduce_step(
                loss.item(), int(n), _signum(stop["signal"]), time.perf_counter() - clock0 >= budget_s, device, world)
            stopping = signal.Signals(signum).name if signum else None
            state["step"] = done
            if step == start:
                first_ms = ms  # warm-up (allocations, compilation): kept out of the statistics
            else:
                state["step_ms"].append(ms)
                state["units"] += int(n)
            interval_units, interval_ms = interval_units + int(n), interval_ms + ms
            if wandb is not None:
                wandb.log({"loss": loss_value, "step_ms": ms, "lr": lr}, step=done)
            diverged = not math.isfinite(loss_value)
            last = done == total or out_of_time or stopping is not None

            valid = {}
            if not diverged and stopping is None and (done % eval_every == 0 or last):
                valid = evaluate("valid")
                state["last_valid"], state["last_eval_step"] = valid, done
                if best_name in valid and (not state["best"] or _better(valid[best_name], state["best"][best_name], best_mode)):
                    state["best"] = {**valid, "step": done}
            if metrics is not None and (done % log_every == 0 or valid or last or diverged):
                record = {"step": done, "wall_s": round(time.perf_counter() - clock0, 3), "loss": loss_value,
                          "step_ms": round(ms, 3), "lr": lr, per_s: round(interval_units / (interval_ms / 1e3), 2)}
                record.update({(f"valid_{k}" if k in RUNNER_KEYS else k): v for k, v in valid.items()})
                metrics.log(record)
                if wandb is not None and valid:
                    wandb.log({f"valid/{k}": v for k, v in valid.items()}, step=done)
                interval_units, interval_ms = 0, 0.0
            progress.step(done, total, loss_value, ms, valid)

            if diverged:
                status = "diverged"  # no checkpoint: the last one holds the last finite state
                log.warning(f"loss is {loss_value} at step {done}: run diverged, stopping")
                break
            if done % ckpt_every == 0 or last:
                save_checkpoint()
            if stopping is not None:
                status = "interrupted"
                log.warning(f"{stopping} received: checkpoint saved at step {done}, stopping")
                break
            if out_of_time:
                log.info(f"train.max_minutes={cfg.train.max_minutes} spent after {done} steps: stopping")
                break
    finally:
        progress.close()

    if status == "completed" and state["last_eval_step"] != state["step"]:
        # no step ran, and the checkpoint's last evaluation is older than its step (an interrupted
        # run resumed with train.steps lowered to where it stopped): evaluate the final model now
        state["last_valid"], state["last_eval_step"] = evaluate("valid"), state["step"]
    final = {f"valid_{k}": v for k, v in state["last_valid"].items()}
    if status == "completed":
        final = {**evaluate("test"), **final}

    times = state["step_ms"] or ([first_ms] if first_ms is not None else [])
    timed_s = sum(state["step_ms"]) / 1e3
    summary = {
        **_identity(cfg),
        "status": status,
        "steps": state["step"],
        "step_ms_median": statistics.median(times) if times else None,
        "step_ms_mean": statistics.fmean(times) if times else None,
        # the paper's unit: seconds per 1000 training steps
        "s_per_1k_steps": statistics.fmean(times) if times else None,
        per_s: state["units"] / timed_s if timed_s > 0 else None,
        "final": final,
        "best": state["best"],
        "wall_s": round(time.perf_counter() - clock0, 3),
    }
    if status == "interrupted":
        summary["interrupted_by"] = stopping
    if status == "diverged":
        summary["diverged_at"] = state["step"]
    return summary


def _signum(name: str | None) -> int:
    return signal.Signals[name].value if name else 0


def _better(value: float, best: float, mode: str) -> bool:
    return value > best if mode == "max" else value < best
