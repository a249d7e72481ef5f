"""What a run shows on the terminal (and in train.log): the progress bar, eval lines, the end-of-run block."""
from __future__ import annotations

import logging
import math
import sys
import time
from pathlib import Path
from typing import Any

log = logging.getLogger("rmsnorm_repro.train")


def eval_line(step: int, total: int, loss: float, step_ms: float, evaluated: dict[str, float] | None) -> str:
    """`step 200/400 | train loss 2.31 | 66.2 ms/step | eval: bleu 3.4, valid loss 3.66`: the
    training batch's loss, and the evaluation's metrics (a task's own `loss` there is the valid loss)."""
    line = f"step {step}/{total} | train loss {loss:.4g} | {step_ms:.1f} ms/step"
    if evaluated:
        line += " | eval: " + ", ".join(f"{'valid loss' if k == 'loss' else k} {v:.4g}" for k, v in evaluated.items())
    return line


class Progress:
    """A tqdm bar on a terminal; plain log lines (every 30 s) in CI and files; a log line at each eval.

    Eval lines go through the logger, so they reach the run's log file (Hydra's <run dir>/train.log)
    on a terminal too: while the bar is up, the console handlers of the logging tree write through
    tqdm (tqdm.contrib.logging), so a log line never breaks the bar. Silent on DDP ranks other than 0.
    """

    def __init__(self, start: int, total: int, enabled: bool = True):
        self.bar = None
        self.enabled = enabled
        self.last_line = time.perf_counter()
        self._redirect = None
        if enabled and sys.stderr.isatty():
            from tqdm import tqdm
            from tqdm.contrib.logging import logging_redirect_tqdm

            self.bar = tqdm(total=total, initial=start, unit="step", dynamic_ncols=True, file=sys.stderr)
            self._redirect = logging_redirect_tqdm()
            self._redirect.__enter__()

    def step(self, step: int, total: int, loss: float, step_ms: float, evaluated: dict[str, float] | None) -> None:
        if not self.enabled:
            return
        now = time.perf_counter()
        if self.bar is not None:
            self.bar.update(1)
            self.bar.set_postfix(train_loss=f"{loss:.4g}", step_ms=f"{step_ms:.1f}", refresh=False)
            if evaluated:
                log.info(eval_line(step, total, loss, step_ms, evaluated))
            return
        if evaluated or now - self.last_line >= 30 or step == total:
            self.last_line = now
            log.info(eval_line(step, total, loss, step_ms, evaluated))

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        if self._redirect is not None:
            self._redirect.__exit__(None, None, None)
            self._redirect = None


# end of a run ----------------------------------------------------------------------------------
# summary["final"] keys shown as a run's headline, in this order, with their labels; translation's
# per-test-set BLEU (test14_bleu, test17_bleu, test_bleu, valid_beam_bleu) is found by its suffix.
HEADLINE = {"error": "test error", "accuracy": "test accuracy", "train_error": "train error",
            "rsum": "R@K sum", "caption_r1": "caption R@1", "image_r1": "image R@1"}


def headline_metrics(final: dict[str, Any]) -> list[tuple[str, Any]]:
    """(label, value) of a run's headline test metrics: BLEU per test set / error / accuracy / R@K sum."""
    bleu = sorted((k for k in final if k.endswith("_bleu") and k != "valid_bleu"), key=lambda k: k.startswith("valid"))
    shown = [(f"{k[:-5].replace('_', ' ')} BLEU", final[k]) for k in bleu]  # test sets first, then valid beam
    shown += [(label, final[k]) for k, label in HEADLINE.items() if k in final]
    if not shown:  # another task (or an unfinished run: validation numbers only)
        tested = [k for k in final if not k.startswith("valid_")] or list(final)
        shown = [(k.replace("_", " "), final[k]) for k in tested[:4]]
    return shown


def _num(value: Any, digits: int = 4) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    return "nan" if not math.isfinite(value) else f"{value:.{digits}g}"


def _interval(ci: Any) -> str:
    """" (95% CI 350.1-388.3)" from [low, high], {"low":, "high":} or a half-width; "" when absent."""
    if isinstance(ci, dict):
        ci = [ci.get("low", ci.get("lo")), ci.get("high", ci.get("hi"))]
    if isinstance(ci, (list, tuple)) and len(ci) == 2 and all(isinstance(x, (int, float)) for x in ci):
        return f" (95% CI {ci[0]:.1f}-{ci[1]:.1f})"
    if isinstance(ci, (int, float)) and not isinstance(ci, bool):
        return f" (± {ci:.1f}, 95% CI)"
    return ""


def _shown_path(path: Path) -> str:
    path = Path(path)
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def end_of_run_block(summary: dict[str, Any], run_dir: Path) -> str:
    """The few lines a run ends with: status, headline test metrics, the selected step, speed, where it is.

        run completed: transformer rmsnorm seed 1, 400 steps in 121.6 s
          test      test14 BLEU 35.98 | test17 BLEU 34.1 | valid beam BLEU 37.03
          selected  step 400 (best valid bleu)
          speed     369.2 s/1k steps (95% CI 350.1-388.3), median step 369.0 ms, 14123 tokens/s
          run dir   results/runs/transformer/synthetic-mini/rmsnorm-p1.0-s1
    """
    status = str(summary.get("status", "unknown"))
    p = summary.get("p")
    who = " ".join(str(x) for x in (summary.get("task"), summary.get("norm")) if x)
    if isinstance(p, (int, float)) and p != 1.0:
        who += f" p={p:g}"
    if summary.get("seed") is not None:
        who += f" seed {summary['seed']}"
    steps = f", {summary['steps']} steps" if summary.get("steps") is not None else ""
    wall = f" in {summary['wall_s']:.1f} s" if isinstance(summary.get("wall_s"), (int, float)) else ""
    state = {"diverged": f"diverged at step {summary.get('diverged_at', summary.get('steps'))}",
             "interrupted": f"interrupted by {summary.get('interrupted_by') or 'a signal'}"}.get(status, status)
    lines = [f"run {state}: {who}{steps}{wall}"]

    def row(label: str, text: str) -> None:
        lines.append(f"  {label:<9} {text}")

    final = summary.get("final") or {}
    if status == "failed":
        row("error", str(summary.get("error", "see the traceback above")))
    elif status == "diverged":
        row("test", "none: a diverged run is not tested (the paper's \"fails to train\")")
    elif final and status == "completed":
        row("test", " | ".join(f"{k} {_num(v)}" for k, v in headline_metrics(final)))
    elif final:  # stopped before the test: the last validation numbers
        row("valid", " | ".join(f"{k.removeprefix('valid ')} {_num(v)}" for k, v in headline_metrics(final)))
    if summary.get("selected_step") is not None:
        how = summary.get("selection")
        row("selected", f"step {summary['selected_step']}" + (f" ({how})" if how else ""))
    if isinstance(summary.get("s_per_1k_steps"), (int, float)):
        speed = f"{summary['s_per_1k_steps']:.1f} s/1k steps{_interval(summary.get('s_per_1k_steps_ci95'))}"
        if isinstance(summary.get("step_ms_median"), (int, float)):
            speed += f", median step {summary['step_ms_median']:.1f} ms"
        for unit in ("tokens", "examples"):
            if isinstance(summary.get(f"{unit}_per_s"), (int, float)):
                speed += f", {summary[f'{unit}_per_s']:.0f} {unit}/s"
        row("speed", speed)
    row("run dir", _shown_path(run_dir))
    if status == "interrupted":
        row("resume", "rerun the same command: it continues from the last checkpoint")
    return "\n".join(lines)
