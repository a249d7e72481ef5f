"""checkpoints/last.pt: everything a run needs to continue as if it had never stopped.

Model, optimizer, scheduler, the RNG states (python, numpy, torch CPU and CUDA), and the loop's
TrainState: the step (which is also the data position: a task's batch is a pure function of
config, seed and step), every evaluation so far, the clocks. Only tensors and plain Python types go
in, so `torch.load(weights_only=True)` reads it back: loading never runs pickled code.

Every checkpoint (last.pt, best.pt) also carries its run's identity (rmsnorm_repro/record.py: task,
norm, p, seed, data, scale, and the config that was trained, with its fingerprint); loading one into
another run is refused with one line that names both.
"""
from __future__ import annotations

import dataclasses
import errno
import random
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from .. import record
from ..atomic import atomic_path
from ..errors import ConfigError
from .console import log

if TYPE_CHECKING:
    from .distributed import World


@dataclass
class TrainState:
    """What the training loop carries from step to step and across a resume."""
    step: int = 0  # optimizer steps done
    wall_s: float = 0.0  # wall clock of the run so far, across resumes
    step_ms: list[float] = field(default_factory=list)  # timed steps (each segment's first is warm-up, left out)
    units: int = 0  # examples or tokens of the timed steps
    best: dict[str, float] = field(default_factory=dict)  # the best validation metrics and their step
    last_valid: dict[str, float] = field(default_factory=dict)
    last_eval_step: int = 0
    evals_since_best: int = 0  # for early stopping
    evals: list[dict[str, float]] = field(default_factory=list)  # {"step": s, **valid} of every evaluation
    # the metrics line of a step whose evaluation a signal cut short: the resumed run evaluates it first
    pending_eval: dict[str, Any] | None = None

    def save(self, path: Path, owner: dict[str, Any], model: torch.nn.Module, optimizer: torch.optim.Optimizer,
             scheduler: Any, rng_ranks: list[dict[str, Any]], scaler: Any = None) -> None:
        """owner: stamp(config) of the run; rng_ranks: every rank's RNG states (one entry without
        DDP); scaler: fp16's GradScaler."""
        fields = dataclasses.asdict(self)
        fields["step_ms"] = torch.tensor(self.step_ms, dtype=torch.float64)
        save(path, {**fields, **owner, "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                    "scheduler": scheduler.state_dict(), "rng": rng_ranks[0],
                    **({"rng_ranks": rng_ranks} if len(rng_ranks) > 1 else {}),
                    **({"scaler": scaler.state_dict()} if scaler is not None else {})})

    @classmethod
    def load(cls, path: Path, config: dict[str, Any], model: torch.nn.Module, optimizer: torch.optim.Optimizer,
             scheduler: Any, world: World, seed: int, scaler: Any = None) -> TrainState:
        """Restore model, optimizer, scheduler and this rank's RNG from `path`, a checkpoint of the
        run whose resolved config is `config`; return the loop's state."""
        saved = load(path, config)
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        scheduler.load_state_dict(saved["scheduler"])
        if scaler is not None and "scaler" in saved:
            scaler.load_state_dict(saved["scaler"])
        set_rng_state(saved["rng"] if world.main else _rank_rng(saved, world, seed))
        state = cls(**{f.name: saved[f.name] for f in dataclasses.fields(cls) if f.name in saved})
        state.step_ms = saved["step_ms"].tolist()
        return state


def _rank_rng(saved: dict[str, Any], world: World, seed: int) -> dict[str, Any]:
    """This rank's RNG states from the checkpoint; a run resumed on another number of processes
    cannot continue the other ranks' streams, so they start fresh ones from (seed, rank, step)."""
    ranks = saved.get("rng_ranks")
    if ranks is not None and len(ranks) == world.world_size:
        return ranks[world.rank]
    seed_everything(seed + 1_000_003 * world.rank + 7919 * int(saved["step"]))
    return rng_state()


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # seeds CUDA too


def rng_state() -> dict[str, Any]:
    version, mt, gauss = random.getstate()
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    state = {
        "python": [version, list(mt), gauss],
        "numpy": [kind, torch.from_numpy(keys.astype(np.int64)), int(pos), int(has_gauss), float(cached)],
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    version, mt, gauss = state["python"]
    random.setstate((version, tuple(mt), gauss))
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available() and len(state["cuda"]) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(state["cuda"])


def stamp(config: dict[str, Any]) -> dict[str, Any]:
    """What a checkpoint carries of its run: record version, identity, the trained config, its fingerprint."""
    return {"record_version": record.RECORD_VERSION, "identity": record.identity(config),
            "config": config, "fingerprint": record.fingerprint(config)}


def save(path: Path, state: dict[str, Any]) -> None:
    """Write atomically: a kill mid-write (or a full disk) leaves the previous checkpoint intact."""
    try:
        with atomic_path(path) as tmp:
            torch.save(state, tmp)
    except RuntimeError:  # torch reports a full disk as iostream errors, without an errno
        if _disk_full(path):
            raise OSError(errno.ENOSPC, "No space left on device", str(path)) from None
        raise


def _disk_full(path: Path) -> bool:
    """Whether path's folder lacks the room of the checkpoint it replaces (1 MiB at least)."""
    needed = max(1 << 20, path.stat().st_size if path.exists() else 0)
    return shutil.disk_usage(path.parent).free < needed


def load(path: Path, config: dict[str, Any] | None = None) -> dict[str, Any]:
    """A checkpoint, on CPU (RNG states must stay there; load_state_dict moves weights and Adam
    moments to their device). With `config`, the run it must belong to: another run's is refused."""
    try:
        saved = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # torch says why in many lines (and suggests weights_only=False: never)
        raise ConfigError(f"{path} is damaged and cannot be read ({type(e).__name__}); to start over "
                          f"from step 0, move it away (or give this run a new folder)") from None
    if config is not None:
        check_owner(path, saved, config)
    return saved


def check_owner(path: Path, saved: dict[str, Any], config: dict[str, Any]) -> None:
    """Refuse a checkpoint written by another run (copied in, or a folder reused by hand)."""
    if "identity" not in saved:  # written before checkpoints carried their run: config.yaml was checked
        log.info(f"{path.name} predates run identities in checkpoints: checked against config.yaml only")
        return
    mine = record.identity(config)
    differs = record.changes(saved["config"], config).refused
    if saved["identity"] != mine or differs:
        why = f" ({'; '.join(differs[:2])})" if differs else ""
        raise ConfigError(f"{path} belongs to another run: {record.describe(saved['identity'])}, config "
                          f"{saved['fingerprint']}{why}; this run is {record.describe(mine)}, config "
                          f"{record.fingerprint(config)}: move that file away, or run it in its own folder")
