"""rmsnorm_repro.allocator: glibc's malloc set to reuse freed memory, checked by page-fault counts."""
import platform
import subprocess
import sys
import textwrap

import pytest

from rmsnorm_repro import allocator

FAULTS = textwrap.dedent("""
    import resource, sys, torch
    from rmsnorm_repro import allocator
    print(allocator.apply(sys.argv[1]))
    for _ in range(16):  # warm-up: freed blocks coalesce until one fits the next aligned request
        torch.empty(16, 2**20).fill_(1.0)  # 64 MiB: above glibc's largest mmap threshold
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(5):
        torch.empty(16, 2**20).fill_(1.0)
    print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
""")


@pytest.mark.slow
@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc only")
def test_tuned_allocator_reuses_large_blocks_without_page_faults():
    faults = {}
    for mode in ("default", "tuned"):
        out = subprocess.run([sys.executable, "-c", FAULTS, mode], capture_output=True, text=True, check=True).stdout.split()
        assert out[0] == mode
        faults[mode] = int(out[1])
    pages = 5 * 64 * 2**20 // 4096
    assert faults["default"] > pages / 2  # every fresh 64 MiB block faults its pages in again
    assert faults["tuned"] < pages / 20


def test_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="allocator must be one of tuned, default, got 'fast'"):
        allocator.apply("fast")
