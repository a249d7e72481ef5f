"""Testing Triton kernels without a GPU.

`interpreted(script)`: runs a script with TRITON_INTERPRET=1 (in a subprocess: Triton reads the variable
when the kernels are defined), CPU tensors standing in for CUDA ones, and returns the JSON its last line
prints. `compile_for_gpu`: the interpreter runs code a GPU build rejects (a global that is not a
constexpr, for one), so the kernels are also built for an H100 (sm_90) down to its binary, which needs
Triton's bundled ptxas and no GPU:

    compile_for_gpu(kernel, X="*fp16", N="i32", BLOCK=512, ...)  # a str: a runtime argument's type; else a constexpr

`resources` reads a built kernel's registers and spills. `Launches` stands in for a kernel to count its
launches, `AtenOps` counts the aten ops a block runs.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from torch.utils._python_dispatch import TorchDispatchMode

H100 = GPUTarget("cuda", 90, 32)


def compile_for_gpu(kernel, num_warps: int = 4, **args):
    """The kernel built for H100 with these arguments (every one named): raises where Triton cannot build it."""
    missing = set(kernel.arg_names) - set(args)
    if missing:
        raise TypeError(f"compile_for_gpu: give every argument of {kernel.__name__}, missing {sorted(missing)}")
    signature = {name: args[name] if isinstance(args[name], str) else "constexpr" for name in kernel.arg_names}
    constants = {name: args[name] for name in kernel.arg_names if not isinstance(args[name], str)}
    return triton.compile(ASTSource(kernel, signature, constants), target=H100, options={"num_warps": num_warps})


def resources(compiled) -> dict[str, int]:
    """Registers per thread and stack / local bytes (spills) of a kernel built by compile_for_gpu, as
    cuobjdump (bundled with Triton) reads them from its binary."""
    cuobjdump = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    with tempfile.TemporaryDirectory() as folder:
        cubin = Path(folder) / "kernel.cubin"
        cubin.write_bytes(compiled.asm["cubin"])
        out = subprocess.run([str(cuobjdump), "-res-usage", str(cubin)], capture_output=True, text=True, check=True)
    return {key: int(value) for key, value in re.findall(r"(REG|STACK|LOCAL):(\d+)", out.stdout)}


def interpreted(script: str) -> dict:
    env = {**os.environ, "TRITON_INTERPRET": "1", "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


class Launches:
    """Stands in for a @triton.jit kernel: `kernel[grid](...)` counts and launches nothing."""

    def __init__(self):
        self.count = 0

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.count += 1
        return launch


class AtenOps(TorchDispatchMode):
    """The aten ops run inside it, by name (views and detaches included)."""

    def __init__(self):
        super().__init__()
        self.ops = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))
