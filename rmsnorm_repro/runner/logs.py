"""Where numbers go: metrics.jsonl and summary.json (always), wandb (logger=wandb), the console."""
from __future__ import annotations

import json
import logging
import math
import os
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from ..atomic import atomic_write_text
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
    atomic_write_text(path, json.dumps(finite_or_none(obj), indent=2, allow_nan=False) + "\n")


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
        atomic_write_text(self.path, "".join(kept))

    def log(self, record: dict[str, Any]) -> None:
        self.file.write(json.dumps(finite_or_none(record), allow_nan=False) + "\n")
        self.file.flush()

    def close(self) -> None:
        self.file.close()


# wandb -----------------------------------------------------------------------------------------
ONLINE_MODES = ("online", "shared", "run")
PROBE_TIMEOUT_S = 3.0
_reachable: dict[str, str | None] = {}  # base URL -> None (reachable) or why not, once per process


def _wandb_base_url() -> str:
    """The server wandb will talk to: $WANDB_BASE_URL, else wandb's own settings (`wandb login --host`)."""
    if os.environ.get("WANDB_BASE_URL"):
        return os.environ["WANDB_BASE_URL"]
    try:
        from wandb.sdk import wandb_setup

        return str(wandb_setup.singleton().settings.base_url)
    except Exception:  # noqa: BLE001 (an older client, or settings it cannot read: wandb's default)
        return "https://api.wandb.ai"


def _has_wandb_key() -> bool:
    """Whether wandb has credentials for its server, read the way wandb reads them; no network.

    wandb >= 0.2x: $WANDB_API_KEY, an identity token file, the .netrc entry of the configured host
    (`wandb login` writes it) or an api_key in wandb's settings. Older clients: their `wandb.api`.
    (`wandb.login(verify=False)` would ask the server who is logged in, so it is not used here.)
    """
    if os.environ.get("WANDB_API_KEY") or os.environ.get("WANDB_IDENTITY_TOKEN_FILE"):
        return True
    import wandb

    try:
        from wandb.sdk.lib import wbauth
    except ImportError:  # wandb before wbauth: the internal API reads env, .netrc and settings
        try:
            return bool(wandb.api.api_key)
        except Exception:  # noqa: BLE001
            return False
    try:
        from wandb.sdk import wandb_setup

        if wbauth.read_netrc_auth(host=_wandb_base_url()):
            return True
        return bool(wandb_setup.singleton().settings.api_key)
    except Exception:  # noqa: BLE001 (a malformed .netrc or settings file: no usable key)
        return False


def _unreachable(url: str, timeout: float = PROBE_TIMEOUT_S) -> str | None:
    """None when the server at `url` answers an HTTP request within `timeout` seconds (any status:
    it answered), else why not. Run before wandb.init, whose own retries take minutes offline.
    The request runs in a daemon thread, so a name lookup that hangs cannot hold the process."""
    if url in _reachable:
        return _reachable[url]
    result: dict[str, str | None] = {}

    def request() -> None:
        try:
            urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=timeout).close()
            result["error"] = None
        except urllib.error.HTTPError:  # 401, 404, ...: the server is there
            result["error"] = None
        except (OSError, ValueError) as e:  # URLError (refused, no such host), timeouts, TLS errors
            reason = getattr(e, "reason", e)
            result["error"] = f"{type(reason).__name__}: {reason}"

    worker = threading.Thread(target=request, daemon=True)
    worker.start()
    worker.join(timeout + 0.5)
    reason = result["error"] if "error" in result else f"no answer in {timeout:g} s"
    _reachable[url] = reason
    return reason


def wandb_mode(logger: DictConfig) -> str:
    """The wandb mode of a run (logger.mode, $WANDB_MODE, else offline); online needs a key and the server.

    Both are checked here, in seconds, so a run fails before it builds anything, with one line."""
    mode = logger.get("mode") or os.environ.get("WANDB_MODE") or "offline"
    if mode not in ("online", "offline", "disabled", "shared", "dryrun", "run"):
        raise ConfigError(f"logger.mode={mode!r} is unknown; choose online, offline or disabled")
    if mode in ONLINE_MODES:
        if not _has_wandb_key():
            raise ConfigError("wandb online mode needs an API key: run `wandb login` or set WANDB_API_KEY, "
                              "or log offline with logger.mode=offline (upload later with `wandb sync`)")
        url = _wandb_base_url()
        reason = _unreachable(url)
        if reason:
            raise ConfigError(f"wandb online mode cannot reach {url} ({reason}): check the network or "
                              f"WANDB_BASE_URL, or log offline with logger.mode=offline and `wandb sync` later")
    return mode


def wandb_settings(cfg: DictConfig, config: dict[str, Any], experiment: str | None) -> dict[str, Any]:
    """The arguments of wandb.init for this run (config already scrubbed of secrets)."""
    lg = cfg.logger
    p = f"-p{cfg.norm.p:g}" if float(cfg.norm.p) != 1.0 else ""
    tags = [f"task:{cfg.task.name}", f"data:{cfg.data.name}", f"scale:{cfg.scale.name}", f"norm:{cfg.norm.name}",
            *lg.get("tags", [])]
    return {
        "project": lg.get("project", "rmsnorm-repro"),
        "entity": lg.get("entity"),
        "group": lg.get("group") or experiment or cfg.task.name,
        "name": f"{cfg.norm.name}{p}-s{cfg.seed}",
        "job_type": "train",
        "tags": tags,
        "config": config,
    }


# Validation metrics where lower is better; every other one is better higher (bleu, accuracy, R@K, rsum).
LOWER_IS_BETTER = ("loss", "error", "medr", "meanr", "ppl", "perplexity")


def metric_goal(name: str) -> str:
    """"min" or "max": which end of a metric's history is its best (valid/bleu: max, valid/error: min)."""
    leaf = name.rsplit("/", 1)[-1]
    return "min" if any(leaf == w or leaf.endswith("_" + w) or leaf.startswith(w + "_") for w in LOWER_IS_BETTER) else "max"


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
                                  **wandb_settings(cfg, config, experiment))
        finally:
            sys.argv = argv
        self._defined: set[str] = set()
        self._define("step")
        self._define("*", step_metric="step")  # every curve against the training step by default

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
        for key in ("status", "steps", "step_ms_median", "step_ms_mean", "s_per_1k_steps", "s_per_1k_steps_ci95",
                    "selected_step", "selection", "diverged_at", "interrupted_by", "wall_s",
                    "examples_per_s", "tokens_per_s"):
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


# console ---------------------------------------------------------------------------------------
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
