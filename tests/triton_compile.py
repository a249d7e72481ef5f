"""Compiling a Triton kernel for a GPU on a machine without one: the interpreter (TRITON_INTERPRET=1) runs
code a GPU build rejects (a global that is not a constexpr, for one), so the kernels' tests also build
them for an H100 (sm_90) down to its binary, which needs Triton's bundled ptxas and no GPU:

    from triton_compile import compile_for_gpu
    compile_for_gpu(kernel, X="*fp16", N="i32", BLOCK=512, ...)  # a str: a runtime argument's type; else a constexpr
"""
from __future__ import annotations

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

H100 = GPUTarget("cuda", 90, 32)


def compile_for_gpu(kernel, **args):
    """The kernel built for H100 with these arguments (every one named): raises where Triton cannot build it."""
    missing = set(kernel.arg_names) - set(args)
    if missing:
        raise TypeError(f"compile_for_gpu: give every argument of {kernel.__name__}, missing {sorted(missing)}")
    signature = {name: args[name] if isinstance(args[name], str) else "constexpr" for name in kernel.arg_names}
    constants = {name: args[name] for name in kernel.arg_names if not isinstance(args[name], str)}
    return triton.compile(ASTSource(kernel, signature, constants), target=H100)
