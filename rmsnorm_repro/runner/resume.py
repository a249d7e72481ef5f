"""Whether a run directory resumes, stands finished or refuses this config: the resume policy, by the
rules of what may change between sessions (record.changes)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from .. import record
from ..errors import ConfigError
from .console import log
from .optim import first_schedule_difference


@dataclass
class Resume:
    """What a run directory holds for a config; all empty: a fresh start."""
    checkpoint: Path | None = None  # checkpoints/last.pt to resume from
    saved_config: dict[str, Any] | None = None  # the run directory's config.yaml, when it has one
    finished: dict[str, Any] | None = None  # the summary of a run this command already finished
    reevaluate: bool = False  # only evaluation settings changed: score the trained model again
    reselect: bool = False  # train.select_metric/select_mode changed: pick the tested weights again


def inspect(run_dir: Path, config: dict[str, Any]) -> Resume:
    """What run_dir holds for `config` (resolved, scrubbed): a checkpoint to resume from, a finished run,
    or nothing (a fresh start). A resume may change what record.changes accepts (the step budget, where
    files go, how runs are logged, keys a newer suite added, evaluation and selection settings), each named
    in one log line; a change to what is trained is refused, with how to run it beside this one."""
    found = Resume()
    saved = run_dir / "config.yaml"
    last = run_dir / "checkpoints" / "last.pt"
    if not saved.exists():
        if last.exists():
            raise ConfigError(f"{run_dir} holds a checkpoint but no config.yaml, so a resume cannot be checked; "
                              f"give this run a new folder (hydra.run.dir=<new folder>)")
        return found
    try:  # a seal line that does not match: the file was cut short or edited
        record.unsealed(saved.read_text(errors="replace"), saved, seal_required=False)
    except record.RecordError as e:
        raise ConfigError(str(e)) from None
    try:
        found.saved_config = OmegaConf.to_container(OmegaConf.load(saved))
        owner = record.describe(record.identity(found.saved_config))
    except Exception as e:  # noqa: BLE001 (not YAML, or not a run's config: one line, whatever the cause)
        raise ConfigError(f"{saved} cannot be read as a run's config ({type(e).__name__}); repair it, or give "
                          f"this run a new folder (hydra.run.dir=<new folder>)") from None
    diff = record.changes(found.saved_config, config)
    if diff.refused:
        shown = "; ".join(diff.refused[:3]) + (f"; and {len(diff.refused) - 3} more" if len(diff.refused) > 3 else "")
        raise ConfigError(f"{run_dir} holds {owner} trained with another config ({shown}), which would change "
                          f"what is trained: to train this config as a separate run, give it its own folder "
                          f"(hydra.run.dir=<new folder>, or hydra.sweep.dir in a sweep); the run there is kept")
    if diff.noted():
        log.info(f"{run_dir}: resuming with {'; '.join(diff.noted())}")
    found.checkpoint = last if last.exists() else None
    found.reevaluate = bool(diff.eval_only or diff.selection)
    found.reselect = bool(diff.selection)
    summary = record.read_summary(run_dir / "summary.json", strict=False)  # unreadable: the run goes on
    status = summary.get("status")
    needs_weights = diff.budget + diff.eval_only + diff.selection  # more steps, a new evaluation or selection
    if found.checkpoint is None and status in ("completed", "diverged"):
        # a run record kept without its weights (results/small/runs commits them so): it stands as it is
        if needs_weights:
            raise ConfigError(f"{run_dir} holds {owner}, finished ({status}) at step {summary.get('steps')} but its "
                              f"checkpoints are gone, so it cannot go on with {'; '.join(needs_weights)}: to train it "
                              f"again, give it its own folder (hydra.run.dir=<new folder>); the record there is kept")
        found.finished = summary
    elif status == "completed" and not needs_weights:  # with its checkpoints (the branch above: without)
        found.finished = summary
    return found


def check_schedule_continues(found: Resume, cfg: DictConfig, run_dir: Path, steps_done: int) -> None:
    """A run resumed with another train.steps must train like a fresh run of that length."""
    old_total = int(found.saved_config["train"]["steps"])
    new_total = int(cfg.train.steps)
    differs_at = first_schedule_difference(cfg.optim, old_total, new_total, steps_done)
    if differs_at is not None:
        raise ConfigError(
            f"{run_dir} holds {steps_done} steps of a train.steps={old_total} run; train.steps={new_total} changes its "
            f"{cfg.optim.schedule.name} schedule (lr or Adam's beta1) from step {differs_at + 1} on, so the "
            f"resumed run would not equal a fresh one: keep train.steps={old_total}, or start over: remove {run_dir} "
            f"or choose another hydra.run.dir")
