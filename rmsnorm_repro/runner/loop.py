"""The training loop: one run of one task with one norm, timed, logged and resumable.

    summary = run(cfg, run_dir)

Like nanoGPT's train.py, top to bottom: check the config and build everything (setup.py), resume
from checkpoints/last.pt when the run directory has one, then step / log / evaluate / checkpoint
until train.steps, the wall-clock budget, a NaN loss or a signal stops it, and write summary.json.
The loop knows tasks only through rmsnorm_repro.tasks.base.Task.
"""
from __future__ import annotations

import contextlib
import math
import signal
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig

from .. import allocator, record
from ..atomic import atomic_write_text
from ..tasks.base import EvaluationInterrupted
from . import checkpoint, distributed
from .checkpoint import TrainState
from .config import ConfigError, scrub
from .console import Progress, end_of_run_block, log
from .files import write_json
from .setup import Run, build, environment, prepare
from .signals import stop_requests
from .step import train_step

# keys the runner writes on every metrics line; eval metrics with these names get a "valid_" prefix
# (window_loss: the training loss per unit, e.g. per target token, over the steps since the previous
# line: the quantity Nematus displays and the paper's Figure 1 plots; loss is the step's own)
RUNNER_KEYS = ("step", "wall_s", "loss", "window_loss", "step_ms", "lr", "examples_per_s", "tokens_per_s")


def run(cfg: DictConfig, run_dir: Path, experiment: str | None = None,
        overrides: list[str] | None = None) -> dict[str, Any]:
    """Train cfg's task in run_dir (resuming if it holds a checkpoint) and return the summary.

    Bad input raises ConfigError before anything is written. `overrides`, the command line's, are
    noted in config.yaml (a sweep job's folder name may be a shortened form of them). Under torchrun (or a SLURM job with
    several tasks) every process calls this and they train one model with DDP (distributed.py):
    rank 0 alone writes files and logs, every rank returns the summary.
    """
    plan = prepare(cfg, Path(run_dir), experiment, overrides)
    try:
        if plan.finished is not None:
            log.info(f"{plan.run_dir} is finished: nothing to do")
            log.info(end_of_run_block(plan.finished, plan.run_dir))
            return plan.finished
        allocator.apply(cfg.allocator)
        with distributed.process_group(plan.device) as world:
            run, state = build(plan, world)
            summary = train_and_summarize(run, state)
            log.info(end_of_run_block(summary, plan.run_dir))
            return summary
    finally:
        if plan.lock is not None:
            plan.lock.release()


def train_and_summarize(run: Run, state: TrainState) -> dict[str, Any]:
    """train(), then summary.json; a crash still leaves a summary that says so, and wandb finished."""
    summary: dict[str, Any] = {}
    try:
        with stop_requests() as stop:
            run.task.stop_requested = lambda: stop["signal"] is not None  # long evaluations poll this
            summary = train(run, state, stop)
        summary["env"] = environment(run)
        summary.update(run.task.provenance())
        if run.world.main:
            write_json(run.run_dir / "summary.json", summary)
        if run.wandb is not None:
            run.wandb.summary(summary)
        return summary
    except Exception as e:
        if not run.world.main:
            raise
        # a crash (a bug, out of memory, a full disk): never leave a summary that claims anything else
        failed = scrub({
            "record_version": record.RECORD_VERSION, **record.identity(run.cfg), "status": "failed", "steps": state.step, "step_ms_median": None,
            "step_ms_mean": None, "s_per_1k_steps": None, "final": {}, "best": state.best,
            "env": environment(run), "error": f"{type(e).__name__}: {e}",
            "traceback": traceback.format_exc(limit=-8),
        })
        with contextlib.suppress(OSError):
            write_json(run.run_dir / "summary.json", failed)
        log.error(end_of_run_block(failed, run.run_dir))
        raise
    finally:
        if run.metrics is not None:
            run.metrics.close()
        if run.wandb is not None:
            run.wandb.finish(exit_code=0 if summary.get("status") in ("completed", "diverged", "interrupted") else 1)


def train(run: Run, state: TrainState, stop: dict[str, Any]) -> dict[str, Any]:
    """Steps from state.step to train.steps, then the test of the selected weights; returns the
    summary (without env).

    Under DDP every rank runs this loop in lockstep: the logged loss and throughput are all-reduced
    over ranks, stop requests (a signal, the time budget, a NaN) too, so all ranks stop at the same
    step. Rank 0 alone evaluates (on the unwrapped model, the others wait at a barrier), logs and
    checkpoints. step_ms is rank 0's and includes DDP's gradient all-reduce.
    """
    cfg, task, world, device = run.cfg, run.task, run.world, run.device
    loop = Loop(run, state, stop)
    total = int(cfg.train.steps)
    max_loss = cfg.train.get("max_loss")  # a finite blow-up is divergence too
    budget_s = cfg.train.max_minutes * 60 if cfg.train.max_minutes else math.inf
    # token shards differ in size: weigh each rank's mean so DDP's average is the global mean
    loss_weight = ((lambda n: distributed.token_weight(n, device, world))
                   if world.distributed and task.loss_mean_over == "tokens" else None)
    status, stopping, first_ms, stopped_by = "completed", None, None, None

    # a run stopped during an evaluation evaluates that step first, exactly as it would have
    if state.pending_eval is not None and not loop.finish_pending_eval():
        status, stopping = "interrupted", stop["signal"] or "SIGTERM"
    start = state.step
    # a run whose budget was spent, or that stopped early, is finished: its rerun trains no further step
    end = start if status != "completed" or state.wall_s >= budget_s or loop.early_stopped() else total
    if end < total and status == "completed":
        stopped_by = "early_stopping" if loop.early_stopped() else "train.max_minutes"
    interval_units, interval_ms, interval_loss = 0, 0.0, 0.0
    progress = Progress(start, total, enabled=world.main)
    run.model.train()
    try:
        for step in range(start, end):
            batch = task.train_batch(step, world.rank, world.world_size)
            run.set_beta1(step)
            lr = run.optimizer.param_groups[0]["lr"]
            loss, n, ms = train_step(task, run.model, run.optimizer, batch, run.params, cfg.optim.clip,
                                     cfg.optim.get("clip_mode") or "global", run.scheduler, loss_weight, run.precision)

            done = step + 1
            # the global batch's loss and size; a signal or the time budget on any rank stops all of them.
            # The decisions below read this snapshot: a signal arriving later counts at the next step.
            loss_value, n, signum, out_of_time = distributed.reduce_step(
                loss.item(), int(n), _signum(stop["signal"]), loop.clock() >= budget_s, device, world)
            stopping = signal.Signals(signum).name if signum else None
            state.step = done
            if step == start:
                first_ms = ms  # warm-up (allocations, compilation): kept out of the statistics
            else:
                state.step_ms.append(ms)
                state.units += int(n)
            interval_units, interval_ms = interval_units + int(n), interval_ms + ms
            interval_loss += task.summed_loss(loss_value, int(n), batch, world.world_size)
            if run.wandb is not None:
                run.wandb.log({"loss": loss_value, "step_ms": ms, "lr": lr, "wall_s": round(loop.clock(), 3)}, step=done)
            diverged = not math.isfinite(loss_value) or (max_loss is not None and loss_value > max_loss)
            last = done == total or out_of_time or stopping is not None

            line = {"step": done, "wall_s": round(loop.clock(), 3), "loss": loss_value, "step_ms": round(ms, 3),
                    "lr": lr, loop.per_s: round(interval_units / (interval_ms / 1e3), 2),
                    "window_loss": interval_loss / interval_units if interval_units else loss_value}
            valid: dict[str, float] = {}  # rank 0's; empty on the other ranks
            evaluated_now = False
            if not diverged and stopping is None and (done % cfg.train.eval_every == 0 or last):
                evaluated = loop.evaluate("valid")
                if evaluated is None:  # cut short by a signal: redone first thing on resume
                    stopping, state.pending_eval = stop["signal"] or "SIGTERM", line
                else:
                    valid, evaluated_now = evaluated, True
                    loop.record_eval(done, valid)
            if state.pending_eval is None and (done % cfg.train.log_every == 0 or valid or last or diverged):
                loop.log_line(line, valid)
                interval_units, interval_ms, interval_loss = 0, 0.0, 0.0
            progress.step(done, total, loss_value, ms, valid)

            if diverged:
                status = "diverged"  # no checkpoint: the last one holds the last finite state
                above = f" (above train.max_loss {max_loss:g})" if math.isfinite(loss_value) else ""
                log.warning(f"loss is {loss_value} at step {done}{above}: run diverged, stopping")
                break
            early_stopped = evaluated_now and distributed.any_rank(loop.early_stopped(), device, world)
            if done % cfg.train.checkpoint_every == 0 or last or stopping is not None or early_stopped:
                loop.save_checkpoint()
            if stopping is not None:
                status = "interrupted"
                log.warning(f"{stopping} received: checkpoint saved at step {done}, stopping")
                break
            if out_of_time:
                log.info(f"train.max_minutes={cfg.train.max_minutes} spent after {done} steps: stopping")
                break
            if early_stopped:
                stopped_by = "early_stopping"
                log.info(f"no better valid {loop.best_name} in {loop.patience} evaluations: stopping early at step {done}")
                break
    finally:
        progress.close()

    final, selected_step, selected_valid = {}, state.step, state.last_valid
    if status == "completed" and (state.last_eval_step != state.step or run.plan.reevaluate):
        # the checkpoint's last evaluation is older than its step (resumed with train.steps lowered to
        # where it stopped), or only the evaluation settings changed: evaluate the final model now
        evaluated = loop.evaluate("valid")
        if evaluated is None:
            status, stopping = "interrupted", stop["signal"] or "SIGTERM"
        else:
            state.last_valid, state.last_eval_step, selected_valid = evaluated, state.step, evaluated
    if status == "completed":
        selected_step, selected_valid = loop.load_selected()
        log.info(f"final evaluation on the test split (weights of step {selected_step})")
        t0 = time.perf_counter()
        evaluated = loop.evaluate("test")
        if evaluated is None:
            status, stopping = "interrupted", stop["signal"] or "SIGTERM"
        else:
            final = evaluated
            log.info(f"final evaluation done in {time.perf_counter() - t0:.1f} s")
            if world.main:
                write_outputs(run.run_dir / "outputs", task.test_outputs())
    final = {**final, **{f"valid_{k}": v for k, v in selected_valid.items()}}

    times = state.step_ms or ([first_ms] if first_ms is not None else [])
    timed_s = sum(state.step_ms) / 1e3
    summary = {
        "record_version": record.RECORD_VERSION,
        **record.identity(cfg),
        "status": status,
        "steps": state.step,
        **step_time_stats(times),
        loop.per_s: state.units / timed_s if timed_s > 0 else None,
        "final": final,
        "selected_step": selected_step if status == "completed" else None,
        "selection": f"best valid {loop.best_name} ({loop.best_mode})" if loop.select is not None else "last",
        "best": state.best,
        "wall_s": round(loop.clock(), 3),
    }
    if status == "completed" and state.step < total:
        summary["stopped_by"] = stopped_by or "train.max_minutes"
    if status == "interrupted":
        summary["interrupted_by"] = stopping
    if status == "diverged":
        summary["diverged_at"] = state.step
    return summary


class Loop:
    """What the training loop does besides stepping: evaluate, keep the best, log, checkpoint."""

    def __init__(self, run: Run, state: TrainState, stop: dict[str, Any]):
        self.run, self.state, self.stop = run, state, stop
        self.select = record.selection(run.cfg.train, run.task.best_metric)  # (metric, mode) that picks best.pt; None: test the last weights
        self.best_name, self.best_mode = self.select or run.task.best_metric
        self.patience = run.cfg.train.get("early_stop_patience")
        self.per_s = f"{run.task.unit}_per_s"
        self.clock0 = time.perf_counter() - state.wall_s  # wall_s continues across resumes

    def clock(self) -> float:
        return time.perf_counter() - self.clock0

    def evaluate(self, split: str) -> dict[str, float] | None:
        """Rank 0's evaluation (the DDP wrapper's forward would wait for the other ranks); None when
        a signal cut it short (on any rank's word, so all ranks agree)."""
        run = self.run
        out: dict[str, float] | None = {}
        if run.world.main:
            eval_model = run.raw_model if run.world.distributed else run.model
            eval_model.eval()
            try:
                with torch.no_grad(), run.precision.autocast():
                    out = {k: float(v) for k, v in run.task.evaluate(eval_model, split).items()}
            except EvaluationInterrupted:
                out = None
            run.model.train()
        if distributed.any_rank(out is None, run.device, run.world):
            log.warning(f"{self.stop['signal'] or 'a signal'} received during the {split} evaluation: stopped it")
            return None
        return out

    def record_eval(self, step: int, valid: dict[str, float]) -> None:
        """Keep a validation result: the last and best so far (best.pt when it is new), the history."""
        state, run = self.state, self.run
        state.last_valid, state.last_eval_step = valid, step
        state.evals.append({"step": step, **valid})
        if not run.world.main:
            return
        if self.best_name not in valid:
            raise ConfigError(f"train.select_metric={self.best_name} is not a validation metric of "
                              f"task={run.task.name}; choose one of: {', '.join(valid)} (or last)")
        if not state.best or record.better(valid[self.best_name], state.best[self.best_name], self.best_mode):
            state.best, state.evals_since_best = {**valid, "step": step}, 0
            if self.select is not None:
                self.save_best(step, valid)
        else:
            state.evals_since_best += 1

    def early_stopped(self) -> bool:
        return bool(self.patience) and self.state.evals_since_best >= self.patience

    def finish_pending_eval(self) -> bool:
        """Evaluate the step a signal interrupted, log its line and checkpoint; False if cut short again."""
        state = self.state
        log.info(f"evaluating step {state.step}, whose evaluation was interrupted")
        valid = self.evaluate("valid")
        if valid is None:
            return False
        line, state.pending_eval = state.pending_eval, None
        self.record_eval(state.step, valid)
        self.log_line(line, valid)
        self.save_checkpoint()
        return True

    def log_line(self, line: dict[str, Any], valid: dict[str, float]) -> None:
        """A metrics.jsonl line (and wandb's): the step's numbers, its validation metrics beside them."""
        run = self.run
        if run.metrics is None:
            return
        line = {**line, **{(f"valid_{k}" if k in RUNNER_KEYS else k): v for k, v in valid.items()}}
        run.metrics.log(line)
        if run.wandb is not None:
            run.wandb.log_line(line, valid)

    def save_best(self, step: int, valid: dict[str, float]) -> None:
        run = self.run
        checkpoint.save(run.run_dir / "checkpoints" / "best.pt",
                        {**checkpoint.stamp(run.plan.config), "model": run.raw_model.state_dict(),
                         "step": step, "valid": valid})

    def save_checkpoint(self) -> None:
        run = self.run
        rng = distributed.gather(checkpoint.rng_state(), run.world)  # every rank's dropout stream, on rank 0
        if run.world.main:
            self.state.wall_s = self.clock()
            self.state.save(run.run_dir / "checkpoints" / "last.pt", checkpoint.stamp(run.plan.config),
                            run.raw_model, run.optimizer, run.scheduler, rng, run.precision.scaler)

    def load_selected(self) -> tuple[int, dict[str, float]]:
        """Load the weights the test scores (best.pt's, unless they are the last ones) and return
        their step and validation metrics."""
        run, state = self.run, self.state
        best_pt = run.run_dir / "checkpoints" / "best.pt"
        if self.select is None or not state.best or not run.world.main:
            return state.step, state.last_valid
        if state.best["step"] != state.step:
            if not best_pt.exists():
                return state.step, state.last_valid
            run.raw_model.load_state_dict(checkpoint.load(best_pt, run.plan.config)["model"])  # last.pt keeps the last weights
        return state.best["step"], {k: v for k, v in state.best.items() if k != "step"}


def write_outputs(folder: Path, outputs: dict[str, list[str]]) -> None:
    """<folder>/<name>.txt, one line per example (the small report's paired bootstrap reads them)."""
    for name, lines in outputs.items():
        atomic_write_text(folder / f"{name}.txt", "".join(line.replace("\n", " ") + "\n" for line in lines))


def step_time_stats(times_ms: list[float]) -> dict[str, Any]:
    """Step time: median, quartiles and mean. s_per_1k_steps (the paper's unit) is the median, so a
    few slow steps (another job, a kernel build) do not move it, with a distribution-free 95%
    interval: the order statistics n/2 -+ 1.96 sqrt(n)/2 of the sorted times."""
    if not times_ms:
        return {"step_ms_median": None, "step_ms_mean": None, "step_ms_q1": None, "step_ms_q3": None,
                "s_per_1k_steps": None, "s_per_1k_steps_ci95": None}
    t = np.sort(np.asarray(times_ms, dtype=np.float64))
    n = len(t)
    q1, median, q3 = (float(v) for v in np.percentile(t, [25, 50, 75]))
    half = 1.96 * math.sqrt(n) / 2
    lo, hi = t[max(0, math.floor(n / 2 - half))], t[min(n - 1, math.ceil(n / 2 + half) - 1)]
    return {"step_ms_median": median, "step_ms_mean": float(t.mean()), "step_ms_q1": q1, "step_ms_q3": q3,
            "s_per_1k_steps": median, "s_per_1k_steps_ci95": [float(lo), float(hi)]}


def _signum(name: str | None) -> int:
    return signal.Signals[name].value if name else 0
