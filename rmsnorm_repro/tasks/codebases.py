"""`codebase=<name>`: the authors' codebase whose norm settings a run follows, where a table compares two
(Table 3: theano, pytorch). Its settings are configs/codebase_norm/<task>/<norm>/<codebase>.yaml; a
codebase that has none for the run's task would change nothing, so it is refused rather than recorded."""
from __future__ import annotations

from omegaconf import DictConfig

from ..paths import configs_dir

def refusal(cfg: DictConfig) -> str | None:
    if not cfg.get("codebase"):  # none chosen: the task's own settings (configs/task_norm)
        return None
    codebase = str(cfg.codebase.name)
    task = cfg.task.name
    if list((configs_dir() / "codebase_norm" / task).glob(f"*/{codebase}.yaml")):
        return None
    has = sorted({p.parent.parent.name for p in (configs_dir() / "codebase_norm").glob(f"*/*/{codebase}.yaml")})
    return (f"codebase={codebase} sets norm settings for task={', task='.join(has) or '(none)'} only, not task={task}: "
            f"drop codebase= (task={task} runs its own settings)")
