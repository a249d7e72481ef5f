"""Atomic file writes: a reader (the report, a resumed run, a concurrent job) sees the old file or the
new one, never half of one, and a kill mid-write leaves the old file intact.

    with atomic_path(run_dir / "checkpoints" / "last.pt") as tmp:
        torch.save(state, tmp)
    atomic_write_text(run_dir / "summary.json", text)
    vocab = cached(cache_dir / "spm" / "x.model", read=Vocab, build=train_into)  # a cache file, rebuilt if damaged
"""
from __future__ import annotations

import contextlib
import logging
import os
import tempfile
from pathlib import Path
from typing import Callable, Iterator, TypeVar

T = TypeVar("T")


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """A fresh temporary path beside `path` (unique per call, so concurrent writers never share one);
    write it inside the block, and it replaces `path` when the block ends without an exception."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    tmp = Path(name)
    os.chmod(tmp, 0o666 & ~_umask())  # mkstemp's 0600 would hide results from the rest of a group
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_text(path: str | Path, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def cannot_write(err: OSError, advice: str) -> str:
    """A failed write as one line: where, why (read-only, a file where a folder should be, full disk),
    and `advice` (what to do, e.g. "choose a writable folder with --out")."""
    where = err.filename2 if isinstance(err.filename2, (str, os.PathLike)) and err.errno == 21 else err.filename
    return f"cannot write {where if where is not None else 'the output'} ({err.strerror or err}): {advice}"


def cached(path: str | Path, read: Callable[[Path], T], build: Callable[[Path], None]) -> T:
    """read(path) of a cache file; when it is missing, or damaged so that it does not read back (a disk
    error, a copy cut short), build(tmp) writes it anew, atomically, with a log line for the damage."""
    path = Path(path)
    if path.exists():
        try:
            return read(path)
        except Exception as e:  # noqa: BLE001 (whatever the reader says of a damaged file: rebuild it)
            logging.getLogger(__name__).warning(f"cache file {path} is damaged ({type(e).__name__}): rebuilding it")
    with atomic_path(path) as tmp:  # a concurrent run never reads half a file
        build(tmp)
    return read(path)
