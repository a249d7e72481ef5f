"""What machine this is, for records, reports and kernel builds: the CPU's model name, its feature flags,
and how it multiplies bf16 matrices. A leaf: reads /proc/cpuinfo, imports nothing of the package."""
from __future__ import annotations

import platform


def _cpuinfo() -> list[str] | None:
    """/proc/cpuinfo's lines (newlines kept), None where there is none (not Linux)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            return f.readlines()
    except OSError:
        return None


def cpu_name() -> str:
    """The CPU model for the report's hardware line (platform.processor() is empty on Linux)."""
    for line in _cpuinfo() or ():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def cpu_flags() -> str:
    """The first feature-flags line of /proc/cpuinfo ("flags" on x86, "Features" on ARM; part of a compiled
    kernel's cache key, for -march=native), else platform.processor()."""
    return next((line for line in _cpuinfo() or () if line.startswith(("flags", "Features"))), platform.processor())


def cpu_bf16_matmul() -> str | None:
    """How this CPU multiplies bf16 matrices in hardware: "amx" (fast), "avx512_bf16", None, where torch
    falls back to a slow path (on an AVX2 AMD EPYC a 1024x512 @ 512x2048 product took 115x fp32's time), or
    "unknown" without /proc/cpuinfo."""
    lines = _cpuinfo()
    if lines is None:
        return "unknown"
    flags = "".join(lines)
    return "amx" if "amx_bf16" in flags else "avx512_bf16" if "avx512_bf16" in flags else None
