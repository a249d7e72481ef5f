"""Atomic file writes: a reader (the report, a resumed run, a concurrent job) sees the old file or the
new one, never half of one, and a kill mid-write leaves the old file intact.

    with atomic_path(run_dir / "checkpoints" / "last.pt") as tmp:
        torch.save(state, tmp)
    atomic_write_text(run_dir / "summary.json", text)
"""
from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Iterator


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
