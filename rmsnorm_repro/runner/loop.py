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
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig

from .. import allocator, record
from ..atomic import atomic_write_text
from ..errors import ConfigError
from ..redact import scrub
from ..tasks.base import EvaluationInterrupted
from . import checkpoint, distributed
from .checkpoint import TrainState
from .console import Progress, end_of_run_block, log
from .files import write_json
from .setup import Run, build, environment, plan_run
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
    plan = plan_run(cfg, Path(run_dir), experiment, overrides)
    try:
        if plan.resume.finished is not None:
            log.info(f"{plan.run_dir} is finished: nothing to do")
            log.info(end_of_run_block(plan.resume.finished, plan.run_dir))
            return plan.resume.finished
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
            "record_version": record.RECORD_VERSION, record.CONFIG_SEALED: True,
            **record.identity(run.cfg), "status": "failed", "steps": state.step, "step_ms_median": None,
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
    return Loop(run, state, stop).train()


@dataclass
class Window:
    """The training numbers since the previous metrics line: its throughput and window_loss."""
    units: int = 0
    ms: float = 0.0
    loss: float = 0.0  # summed over units

    def add(self, units: int, ms: float, summed_loss: float) -> None:
        self.units, self.ms, self.loss = self.units + units, self.ms + ms, self.loss + summed_loss


class Loop:
    """One session of training: the steps, and what it does besides stepping (evaluate, keep the best,
    log, checkpoint), then the test of the selected weights and the summary."""

    def __init__(self, run: Run, state: TrainState, stop: dict[str, Any]):
        self.run, self.state, self.stop = run, state, stop
        cfg, task, world = run.cfg, run.task, run.world
        self.select = record.selection(cfg.train, task.best_metric)  # (metric, mode) that picks best.pt; None: test the last weights
        self.best_name, self.best_mode = self.select or task.best_metric
        self.patience = cfg.train.get("early_stop_patience")
        self.per_s = f"{task.unit}_per_s"
        self.clock0 = time.perf_counter() - state.wall_s  # wall_s continues across resumes
        self.total = int(cfg.train.steps)
        self.budget_s = cfg.train.max_minutes * 60 if cfg.train.max_minutes else math.inf
        self.max_loss = cfg.train.get("max_loss")  # a finite blow-up is divergence too
        # token shards differ in size: weigh each rank's mean so DDP's average is the global mean
        self.loss_weight = ((lambda n: distributed.token_weight(n, run.device, world))
                            if world.distributed and task.loss_mean_over == "tokens" else None)
        self.status, self.stopping, self.stopped_by = "completed", None, None
        self.first_ms: float | None = None  # the session's first step (warm-up): kept out of the statistics
        self.window = Window()

    def train(self) -> dict[str, Any]:
        start, end = self.session_steps()
        progress = Progress(start, self.total, enabled=self.run.world.main)
        self.run.model.train()
        try:
            for step in range(start, end):
                if not self.step(step, first=step == start, progress=progress):
                    break
        finally:
            progress.close()
        final, selected_step = self.test_selected()
        return self.summary(final, selected_step)

    def interrupted(self) -> None:
        self.status, self.stopping = "interrupted", self.stop["signal"] or "SIGTERM"

    def session_steps(self) -> tuple[int, int]:
        """The steps this session trains, range(start, end). A run stopped during an evaluation evaluates
        that step first, exactly as it would have; a run whose budget was spent, or that stopped early, is
        finished: its rerun trains no further step."""
        state = self.state
        if state.pending_eval is not None and not self.finish_pending_eval():
            self.interrupted()
        start = state.step
        end = (start if self.status != "completed" or state.wall_s >= self.budget_s or self.early_stopped()
               else self.total)
        if end < self.total and self.status == "completed":
            self.stopped_by = "early_stopping" if self.early_stopped() else "train.max_minutes"
        return start, end

    def step(self, step: int, first: bool, progress: Progress) -> bool:
        """One training step with its metrics line, evaluation and checkpoint; False when training stops here."""
        run, state, cfg, world = self.run, self.state, self.run.cfg, self.run.world
        batch = run.task.train_batch(step, world.rank, world.world_size)
        run.set_beta1(step)
        lr = run.optimizer.param_groups[0]["lr"]
        loss, n, ms = train_step(run.task, run.model, run.optimizer, batch, run.params, cfg.optim.clip,
                                 cfg.optim.get("clip_mode") or "global", run.scheduler, self.loss_weight, run.precision)

        done = step + 1
        # the global batch's loss and size; a signal or the time budget on any rank stops all of them.
        # The decisions below read this snapshot: a signal arriving later counts at the next step.
        loss_value, n, signum, out_of_time = distributed.reduce_step(
            loss.item(), int(n), _signum(self.stop["signal"]), self.clock() >= self.budget_s, run.device, world)
        self.stopping = signal.Signals(signum).name if signum else None
        state.step = done
        if first:
            self.first_ms = ms
        else:
            state.step_ms.append(ms)
            state.units += int(n)
        self.window.add(int(n), ms, run.task.summed_loss(loss_value, int(n), batch, world.world_size))
        if run.wandb is not None:
            run.wandb.log({"loss": loss_value, "step_ms": ms, "lr": lr, "wall_s": round(self.clock(), 3)}, step=done)
        diverged = not math.isfinite(loss_value) or (self.max_loss is not None and loss_value > self.max_loss)
        last = done == self.total or out_of_time or self.stopping is not None

        window = self.window
        line = {"step": done, "wall_s": round(self.clock(), 3), "loss": loss_value, "step_ms": round(ms, 3),
                "lr": lr, self.per_s: round(window.units / (window.ms / 1e3), 2),
                "window_loss": window.loss / window.units if window.units else loss_value}
        valid: dict[str, float] = {}  # rank 0's; empty on the other ranks
        evaluated_now = False
        if not diverged and self.stopping is None and (done % cfg.train.eval_every == 0 or last):
            evaluated = self.evaluate("valid")
            if evaluated is None:  # cut short by a signal: redone first thing on resume
                self.stopping, state.pending_eval = self.stop["signal"] or "SIGTERM", line
            else:
                valid, evaluated_now = evaluated, True
                self.record_eval(done, valid)
        if state.pending_eval is None and (done % cfg.train.log_every == 0 or valid or last or diverged):
            self.log_line(line, valid)
            self.window = Window()
        progress.step(done, self.total, loss_value, ms, valid)
        return self.goes_on(done, loss_value, diverged=diverged, last=last, out_of_time=out_of_time,
                            evaluated_now=evaluated_now)

    def goes_on(self, done: int, loss_value: float, diverged: bool, last: bool, out_of_time: bool,
                evaluated_now: bool) -> bool:
        """After step `done`: checkpoint when due, and whether training goes on (not diverged, no signal,
        time left, no early stop)."""
        run = self.run
        if diverged:
            self.status = "diverged"  # no checkpoint: the last one holds the last finite state
            above = f" (above train.max_loss {self.max_loss:g})" if math.isfinite(loss_value) else ""
            log.warning(f"loss is {loss_value} at step {done}{above}: run diverged, stopping")
            return False
        early_stopped = evaluated_now and distributed.any_rank(self.early_stopped(), run.device, run.world)
        if done % run.cfg.train.checkpoint_every == 0 or last or self.stopping is not None or early_stopped:
            self.save_checkpoint()
        if self.stopping is not None:
            self.status = "interrupted"
            log.warning(f"{self.stopping} received: checkpoint saved at step {done}, stopping")
            return False
        if out_of_time:
            log.info(f"train.max_minutes={run.cfg.train.max_minutes} spent after {done} steps: stopping")
            return False
        if early_stopped:
            self.stopped_by = "early_stopping"
            log.info(f"no better valid {self.best_name} in {self.patience} evaluations: stopping early at step {done}")
            return False
        return True

    def test_selected(self) -> tuple[dict[str, float], int]:
        """The test split scored with the selected weights (their validation metrics beside, valid_*), and
        their step; nothing scored unless training completed."""
        run, state = self.run, self.state
        final, selected_step, selected_valid = {}, state.step, state.last_valid
        if self.status == "completed" and (state.last_eval_step != state.step or run.plan.resume.reevaluate):
            # the checkpoint's last evaluation is older than its step (resumed with train.steps lowered to
            # where it stopped), or only the evaluation settings changed: evaluate the final model now
            evaluated = self.evaluate("valid")
            if evaluated is None:
                self.interrupted()
            else:
                state.last_valid, state.last_eval_step, selected_valid = evaluated, state.step, evaluated
        if self.status == "completed":
            selected_step, selected_valid = self.load_selected()
            log.info(f"final evaluation on the test split (weights of step {selected_step})")
            t0 = time.perf_counter()
            evaluated = self.evaluate("test")
            if evaluated is None:
                self.interrupted()
            else:
                final = evaluated
                log.info(f"final evaluation done in {time.perf_counter() - t0:.1f} s")
                if run.world.main:
                    write_outputs(run.run_dir / "outputs", run.task.test_outputs())
        return {**final, **{f"valid_{k}": v for k, v in selected_valid.items()}}, selected_step

    def summary(self, final: dict[str, float], selected_step: int) -> dict[str, Any]:
        """summary.json's content (without env): what the run is, how it ended, its times and results."""
        state, status = self.state, self.status
        times = state.step_ms or ([self.first_ms] if self.first_ms is not None else [])
        timed_s = sum(state.step_ms) / 1e3
        summary = {
            "record_version": record.RECORD_VERSION,
            record.CONFIG_SEALED: True,  # config.yaml ends in its seal line (record.read_config checks it)
            **record.identity(self.run.cfg),
            "status": status,
            "steps": state.step,
            **step_time_stats(times),
            self.per_s: state.units / timed_s if timed_s > 0 else None,
            "final": final,
            "selected_step": selected_step if status == "completed" else None,
            "selection": f"best valid {self.best_name} ({self.best_mode})" if self.select is not None else "last",
            "best": state.best,
            "wall_s": round(self.clock(), 3),
            # a file's mtime is its checkout's time: reports say when runs ended from this
            "ended_utc": datetime.now(timezone.utc).strftime(record.ENDED_FORMAT),
        }
        if status == "completed" and state.step < self.total:
            summary["stopped_by"] = self.stopped_by or "train.max_minutes"
        if status == "interrupted":
            summary["interrupted_by"] = self.stopping
        if status == "diverged":
            summary["diverged_at"] = state.step
        return summary

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
