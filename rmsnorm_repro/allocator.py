"""Take the CPU allocator out of the way of large tensors (docs/performance.md, "The allocator dominates").

PyTorch's CPU allocator calls malloc directly, and glibc serves every block above its mmap
threshold (up to 32 MiB) with fresh pages that fault on first touch at a few GB/s, and gives freed
memory at the top of the heap back to the system: a large new output (an activation, a gradient)
then costs more than the arithmetic that fills it. `apply("tuned")` tells glibc, through mallopt in this
process, never to mmap and never to trim, so freed blocks are reused warm (after the first few
allocations of a size: glibc's aligned allocations fit a freed block once its neighbours have
coalesced with it; measured here, from the 10th allocation of 32 MiB on no page faults at all). It is what
GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=... does, without a restart.

It applies to every later allocation of the process alike (every norm compared pays the same),
costs nothing on a GPU run, and keeps the process's resident memory at its peak (training holds
its peak anyway). Other C libraries (musl, macOS) are left as they are.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import logging
import platform

log = logging.getLogger(__name__)
MODES = ("tuned", "default")
_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4  # glibc's mallopt parameter numbers (malloc.h)
_INT_MAX = 2**31 - 1  # mallopt takes an int: trim only when 2 GiB lie free at the top of the heap
_state = "default"


def check_mode(mode: str) -> None:
    if mode not in MODES:
        raise ValueError(f"allocator must be one of {', '.join(MODES)}, got {mode!r}")


def apply(mode: str) -> str:
    """Put the allocator setting `mode` in effect where it can be; returns what holds now.

    'default' leaves malloc alone (a process tuned earlier stays tuned); 'tuned' sets glibc's
    malloc to reuse freed memory and answers 'tuned', or 'default (why not)'.
    """
    global _state
    check_mode(mode)
    if mode == "tuned" and _state != "tuned":
        _state = _tune()
    return _state


def in_effect() -> str:
    """What holds in this process: 'tuned', 'default' or 'default (why not tuned)'."""
    return _state


def _tune() -> str:
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return f"default (not glibc: {platform.system()} {platform.libc_ver()[0] or 'libc'})"
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    if libc.mallopt(_M_MMAP_MAX, 0) != 1 or libc.mallopt(_M_TRIM_THRESHOLD, _INT_MAX) != 1:
        return "default (glibc refused mallopt)"
    log.debug("glibc malloc tuned: no mmap, no trim (freed memory is reused)")
    return "tuned"
