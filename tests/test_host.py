"""The host's description: the CPU's model name and flags from /proc/cpuinfo, and its bf16 matrix hardware."""
from rmsnorm_repro import host

CPUINFO = ["processor\t: 0\n", "model name\t: AMD EPYC 9B14\n", "flags\t\t: fpu avx2 avx512_bf16\n",
           "processor\t: 1\n", "model name\t: AMD EPYC 9B14\n", "flags\t\t: fpu avx2 avx512_bf16\n"]


def test_the_cpu_is_named_and_its_flags_read_from_cpuinfo(monkeypatch):
    monkeypatch.setattr(host, "_cpuinfo", lambda: CPUINFO)
    assert host.cpu_name() == "AMD EPYC 9B14"
    assert host.cpu_flags() == "flags\t\t: fpu avx2 avx512_bf16\n"  # the line as it is: a build cache key
    assert host.cpu_bf16_matmul() == "avx512_bf16"
    monkeypatch.setattr(host, "_cpuinfo", lambda: [line.replace("avx512_bf16", "amx_bf16 avx512_bf16") for line in CPUINFO])
    assert host.cpu_bf16_matmul() == "amx"


def test_without_cpuinfo_the_platform_names_the_cpu(monkeypatch):
    monkeypatch.setattr(host, "_cpuinfo", lambda: None)
    monkeypatch.setattr(host.platform, "processor", lambda: "")
    assert host.cpu_name() == host.platform.machine() and host.cpu_flags() == ""
    assert host.cpu_bf16_matmul() == "unknown"
