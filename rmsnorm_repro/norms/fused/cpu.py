"""Builds the fused CPU kernel (rmsnorm_cpu.cpp) on first use and caches the build; `build` does the same
for the other C++ kernels (nn/gru_cell_cpu.cpp, nn/cross_entropy_cpu.cpp). Without a C++ compiler or ninja,
`load()` warns once and returns None: callers fall back to the reference implementation. How a build is
keyed: build_key; when the kernel streams its output: load.
"""
from __future__ import annotations

import hashlib
import logging
import os
import platform
import shutil
import sys
import sysconfig
import time
import warnings
from functools import lru_cache
from pathlib import Path

from ...host import cpu_flags

log = logging.getLogger(__name__)
SOURCE = Path(__file__).with_name("rmsnorm_cpu.cpp")


def build_key(source: Path = SOURCE, extra_cflags: tuple[str, ...] = (), headers: tuple[Path, ...] = ()) -> str:
    """The cache key of a build: a hash of the source's (and its own headers') content, the torch version
    and install, the Python headers, the flags, the compiler and this CPU's feature flags (-march=native: such
    a binary may crash on a CPU without them). Built from a copy inside its own directory, so two checkouts or
    virtual environments never rewrite each other's build, and a home shared by different machines gets one
    build per CPU kind."""
    import torch  # noqa: PLC0415 (torch is loaded by then; kept out of this module's import)

    content = hashlib.sha1(b"".join(f.read_bytes() for f in (source, *headers))).hexdigest()
    parts = [content, torch.__version__, str(Path(torch.__file__).parent),
             sysconfig.get_paths().get("include", ""), " ".join([*_cflags(), *extra_cflags]),
             os.environ.get("CXX", "c++"), platform.machine(), cpu_flags()]
    return hashlib.sha1("|".join(parts).encode()).hexdigest()[:12]


def _prefer_own_ninja() -> None:
    """Build with the ninja installed beside this Python (pip's, in a venv's bin/) whatever PATH says: two
    ninja versions on one build folder (a system 1.11 and pip's 1.13) read each other's logs as stale
    and rebuild, 30-60 s each time (a SLURM job, whose PATH starts with the venv, then a plain shell)."""
    own = Path(sys.executable).parent
    path = os.environ.get("PATH", "")
    if (own / "ninja").is_file() and path.split(os.pathsep)[0] != str(own):
        os.environ["PATH"] = os.pathsep.join([str(own), path])


def _cflags() -> list[str]:
    # 512-bit vectors where the CPU has them (GCC may default to 256 for some CPUs)
    arch = (["-march=native", "-mprefer-vector-width=512"] if platform.machine() in ("x86_64", "AMD64")
            else ["-mcpu=native"])
    # -fopenmp: at::parallel_for is an inline OpenMP region; without it the kernel runs serially.
    return ["-O3", *arch, "-fopenmp"]


def last_level_cache_bytes() -> int | None:
    """Size of CPU 0's largest cache level from sysfs (sysconf is wrong in some VMs), or None."""
    caches, units = {}, {"K": 2**10, "M": 2**20, "G": 2**30}
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            level, size = int((index / "level").read_text()), (index / "size").read_text().strip()
        except (OSError, ValueError):
            continue
        if size[:-1].isdigit() and size[-1] in units:
            caches[level] = int(size[:-1]) * units[size[-1]]
        elif size.isdigit():
            caches[level] = int(size)
    return caches[max(caches)] if caches else None


RMSNORM_FALLBACK = ("fused CPU RMSNorm unavailable: {reason}; using the reference implementation "
                    "(install a C++ compiler and ninja, or set norm.impl=reference to silence this)")


@lru_cache(maxsize=None)
def load():
    """The compiled extension module, or None (after one warning) when it cannot be built here.

    Streaming stores (x86 with AVX) for outputs of at least a quarter of the last-level cache: measured with
    scripts/bench_streaming.py, the next op reading such an output was not slower for it, while smaller ones
    (2-4 MiB) cost a memory-bound consumer more than streaming saved. No cache size from sysfs: no streaming."""
    module = build()
    if module is not None:
        llc = last_level_cache_bytes()
        if llc:
            module.set_stream_min_bytes(llc // 4)
    return module


def build(name: str = "rmsnorm_repro_cpu", extra_cflags: tuple[str, ...] = (), source: Path = SOURCE,
          fallback: str = RMSNORM_FALLBACK, headers: tuple[Path, ...] = ()):
    """Build (once per build_key) and load the extension of `source`; None after one warning (`fallback`
    with its {reason}) when it cannot be. headers: files the source includes by name ("gru_rows.h"),
    copied beside it.

    extra_cflags: e.g. ("-DRMSNORM_TORCH_LIBRARY=...",) for scripts/bench_binding.py's variant.
    """
    def _fallback(reason: str) -> None:
        warnings.warn(fallback.format(reason=reason), stacklevel=3)

    compiler = os.environ.get("CXX", "c++")
    if shutil.which(compiler) is None:
        _fallback(f"no C++ compiler found (CXX={compiler})")
        return None
    # Importing cpp_extension on a machine without CUDA warns "No CUDA runtime is found": irrelevant
    # to a CPU kernel, and it would break the one-line error output of runs that fail later.
    torch_ext_log = logging.getLogger("torch.utils.cpp_extension")
    level = torch_ext_log.level
    torch_ext_log.setLevel(logging.ERROR)
    try:
        from torch.utils import cpp_extension
    finally:
        torch_ext_log.setLevel(level)

    _prefer_own_ninja()
    try:
        cpp_extension.verify_ninja_availability()
    except RuntimeError:
        _fallback("ninja is not installed")
        return None
    log.info("loading the fused CPU kernel %s (the first use on a machine compiles it once, ~30-60 s)", source.name)
    start = time.perf_counter()
    try:
        full_name = f"{name}_{build_key(source, extra_cflags, headers)}"
        # $TORCH_EXTENSIONS_DIR or torch's default (~/.cache/torch_extensions/<python>_<accelerator>)
        directory = Path(cpp_extension._get_build_directory(full_name, verbose=False))
        # compile copies kept in the build directory: build.ninja then names no checkout's path
        for file in (*headers, source):
            copy = directory / file.name
            if not copy.exists() or copy.read_bytes() != file.read_bytes():
                tmp = directory / f".{file.name}.{os.getpid()}"
                shutil.copyfile(file, tmp)
                os.replace(tmp, copy)  # atomic: a concurrent build never reads half a file
        module = cpp_extension.load(
            name=full_name, sources=[str(directory / source.name)], build_directory=str(directory),
            extra_cflags=[*_cflags(), *extra_cflags], extra_ldflags=["-fopenmp"], verbose=False,
        )
    except Exception as err:  # a compiler error, a missing header: whatever it is, fall back
        _fallback(f"building {source.name} failed ({str(err).strip().splitlines()[-1] if str(err).strip() else type(err).__name__})")
        return None
    # the build cache's folder is this machine's (a home or checkout path): the run's log names none
    log.info("fused CPU kernel %s ready in %.1f s", source.name, time.perf_counter() - start)
    return module
