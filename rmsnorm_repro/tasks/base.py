"""The small interface between the runner and a paper task.

The runner builds the model, then for each step asks `train_batch(step)` and `loss(...)`, and at
eval steps `evaluate(model, "valid")`; at the end `evaluate(model, "test")`. It knows nothing else
about tasks. The data position is the step: `train_batch(step)` is a pure function of the config
(seed included) and the step, so a resumed run sees exactly the batches it would have seen.

Settings are checked when the task is built (`check_config`, before any data is read), so a typo
in an evaluation key fails at start, not after hours of training. A long evaluation can be cut
short: the runner sets `stop_requested` (e.g. to "a SIGTERM arrived"), evaluation loops call
`check_stop()` between batches and raise `EvaluationInterrupted`.

The data readers share `read_lines` / `read_text` + `split_lines`: strict UTF-8 (an error names the
file and the line), .gz read to its end (a truncated archive is an error, not a short corpus), and
lines split on LF only, so a stray CR inside a line can never shift one file against another.
"""
from __future__ import annotations

import gzip
import math
import zlib
from pathlib import Path
from typing import Any, Callable, ClassVar

import torch
from omegaconf import DictConfig
from torch import Tensor, nn

from ..norms import Normalization
from ..record import decode_utf8


class EvaluationInterrupted(Exception):
    """evaluate() stopped between batches because `Task.stop_requested()` returned True (a SIGTERM or
    SIGINT during a long evaluation). The runner handles it like a signal between training steps."""


def _never() -> bool:
    return False


class Task:
    name: ClassVar[str] = ""
    supported_norms: ClassVar[tuple[str, ...]] = ()
    supported_data: ClassVar[tuple[str, ...]] = ("synthetic",)
    #: what `loss` counts for throughput ("examples" or "tokens")
    unit: ClassVar[str] = "examples"
    #: what the loss is a mean over: under DDP, per-rank losses are re-weighted by "tokens" (shards
    #: of unequal size) and averaged as they are otherwise
    loss_mean_over: str = "examples"
    #: the validation metric that decides "best" and how ("max" or "min")
    best_metric: ClassVar[tuple[str, str]] = ("loss", "min")
    #: why the task cannot train under DDP (None: it can; its batches shard by rank)
    ddp_unsupported: ClassVar[str | None] = None

    #: set by the runner, e.g. `task.stop_requested = lambda: stop["signal"] is not None`; evaluation
    #: loops ask it between batches (check_stop) and raise EvaluationInterrupted once it says True
    stop_requested: Callable[[], bool] = staticmethod(_never)

    def __init__(self, cfg: DictConfig, norms: Normalization, device: torch.device):
        type(self).check_config(cfg)  # before any data is read: a bad setting fails in seconds
        self.cfg, self.norms, self.device = cfg, norms, device

    @classmethod
    def check_config(cls, cfg: DictConfig) -> None:
        """Refuse bad task settings with a one-line ValueError naming the key and its allowed range."""

    def check_stop(self) -> None:
        """Raise EvaluationInterrupted when a stop was requested (call it between evaluation batches)."""
        if self.stop_requested():
            raise EvaluationInterrupted(f"task={self.name}: evaluation stopped early: a stop was requested")

    def build_model(self) -> nn.Module:
        raise NotImplementedError

    def train_batch(self, step: int, rank: int = 0, world_size: int = 1) -> Any:
        """The batch of optimizer step `step` (0-based), on self.device; under DDP this rank's shard."""
        raise NotImplementedError

    def loss(self, model: nn.Module, batch: Any) -> tuple[Tensor, int]:
        """(scalar training loss, number of examples or tokens in the batch)."""
        raise NotImplementedError

    def summed_loss(self, loss: float, n: int, batch: Any, world_size: int = 1) -> float:
        """The global batch's loss summed over its n units (n global under DDP), so that a logging
        window's loss per unit is sum(summed) / sum(n) (Nematus' displayed "Loss/word"). Default:
        `loss` is a mean over the n units."""
        return loss * n

    def evaluate(self, model: nn.Module, split: str) -> dict[str, float]:
        """Metrics on split "valid" (eval steps) or "test" (end of run); model is in eval mode."""
        raise NotImplementedError

    def test_outputs(self) -> dict[str, list[str]]:
        """What the last evaluate("test") produced that a later comparison needs beside its metrics
        (a translation task: each split's translations, for paired significance tests), one line per
        example; the runner writes each as outputs/<name>.txt."""
        return {}

    def provenance(self) -> dict[str, Any]:
        """Where the numbers come from, for summary.json: data variant, test set sizes, a metric's signature."""
        return {}


# Checking settings -------------------------------------------------------------------------------
_ABSENT = object()


def setting(cfg: Any, key: str) -> Any:
    """cfg's value at a dotted key ("task.decode.beam"); _ABSENT when the key is not there at all."""
    node = cfg
    for part in key.split("."):
        try:
            if part not in node:
                return _ABSENT
            node = node[part]
        except TypeError:  # not a mapping
            return _ABSENT
    return node


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_int(cfg: Any, key: str, low: int, high: int | None = None, *, optional: bool = False,
              name: str | None = None) -> None:
    """cfg[key] is an integer in [low, high] (null too when optional); an absent key is left alone.
    `name` is how the key is shown (default: key itself)."""
    value = setting(cfg, key)
    if value is _ABSENT or (value is None and optional):
        return
    if not (_is_number(value) and float(value).is_integer() and value >= low and (high is None or value <= high)):
        span = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise ValueError(f"{name or key} must be an integer {span}{' or null' if optional else ''}, got {value!r}")


def check_number(cfg: Any, key: str, low: float, high: float | None = None, *, high_open: bool = False,
                 optional: bool = False, name: str | None = None) -> None:
    """cfg[key] is a finite number in [low, high] (or [low, high) with high_open); absent: left alone."""
    value = setting(cfg, key)
    if value is _ABSENT or (value is None and optional):
        return
    ok = _is_number(value) and math.isfinite(value) and value >= low
    ok = ok and (high is None or (value < high if high_open else value <= high))
    if not ok:
        span = f">= {low:g}" if high is None else f"in [{low:g}, {high:g}{')' if high_open else ']'}"
        raise ValueError(f"{name or key} must be a finite number {span}{' or null' if optional else ''}, got {value!r}")


# Reading data files ------------------------------------------------------------------------------
NOT_UTF8_ADVICE = "fix that line or re-encode the file as UTF-8"


def read_lines(path: str | Path) -> list[str]:
    r"""The lines of a text data file (gunzipped when its name ends in .gz), strict UTF-8, read as a
    stream: lines end at "\n" and nothing else, as `wc -l` counts them. A "\r" inside a line stays
    there (and so do U+2028, \x85, form feeds), one "\r" ending a line (CRLF) is dropped, and a final
    newline does not start an empty last line.

    Bad input is one ValueError line naming the file: a truncated or corrupt .gz, or bytes that are
    not UTF-8 (with the line number and the byte's column).
    """
    path = Path(path)
    opener = gzip.open if path.name.endswith(".gz") else open
    try:
        try:
            with opener(path, "rt", encoding="utf-8", newline="\n") as f:  # newline="\n": split at "\n" only
                return [line.rstrip("\n").removesuffix("\r") for line in f]
        except UnicodeDecodeError:
            # text mode knows only the offset in its buffer: find the line and column in the bytes
            with opener(path, "rb") as f:
                decode_utf8(f.read(), path, NOT_UTF8_ADVICE)
            raise
    except (EOFError, gzip.BadGzipFile, zlib.error) as e:
        raise _bad_gzip(path, e) from e


def read_text(path: str | Path) -> str:
    """The whole text of a (small) data file, gunzipped when its name ends in .gz, strict UTF-8; bad
    input as in read_lines. Split it with split_lines, not str.splitlines."""
    path = Path(path)
    try:
        if path.name.endswith(".gz"):
            with gzip.open(path, "rb") as f:
                raw = f.read()
        else:
            raw = path.read_bytes()
    except (EOFError, gzip.BadGzipFile, zlib.error) as e:
        raise _bad_gzip(path, e) from e
    return decode_utf8(raw, path, NOT_UTF8_ADVICE)


def split_lines(text: str) -> list[str]:
    """Lines as read_lines makes them, from a text already read."""
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def _bad_gzip(path: Path, err: BaseException) -> ValueError:
    return ValueError(f"{path}: truncated or corrupt gzip file ({type(err).__name__}: {err}); download or copy it again")
