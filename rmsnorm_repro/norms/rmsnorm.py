"""RMSNorm and pRMSNorm (the subject of the paper)."""
from __future__ import annotations

import torch
from torch import Tensor, nn

from . import formulas, fused
from .base import ChannelNorm, Normalization, RowNorm, register


class RMSNorm(nn.Module):
    """y = x / RMS(x[..., :k]) * g (+ b) over the last dimension; k = ceil(dim * p).

    p = 1.0 is RMSNorm, p < 1 is pRMSNorm. See `formulas.rms_norm` for the eps placement.
    impl: auto (fastest exact path here) | reference | fused | compile; see norms/fused.
    p and eps are checked and k computed once, here. The implementation is chosen at the first call
    and kept (`kernel`), chosen again only for input of another dtype (autocast) or after the module
    moves (`.to()`, `.cuda()`, `.double()`): a call is one check and the kernel's own call.
    Under torch.compile / torch.export it traces `fused.traced`: the kernel as custom ops on CPU, the
    reference formulas elsewhere and in export.
    """

    def __init__(self, dim: int, p: float = 1.0, eps: float = 1e-8, eps_inside: bool = False, bias: bool = False,
                 impl: str = "auto"):
        super().__init__()
        formulas.check_norm_args(dim, p, eps)
        fused.check_impl(impl)
        self.dim, self.p, self.eps, self.eps_inside, self.impl = dim, float(p), float(eps), bool(eps_inside), impl
        self.k = formulas.partial_k(dim, p)
        self.weight = nn.Parameter(torch.ones(dim))
        self.register_parameter("bias", nn.Parameter(torch.zeros(dim)) if bias else None)  # in _parameters either way
        self._forget_kernel()

    def _forget_kernel(self) -> None:
        self._kernel: fused.Kernel | None = None  # f(x, weight, bias, k, eps, eps_inside) for x of _kernel_dtype
        self._kernel_dtype: torch.dtype | None = None
        self.kernel_name: str | None = None  # what runs: fused-cpu, triton, compile, reference (None before a call)

    def _choose_kernel(self, x: Tensor) -> fused.Kernel:
        params = self._parameters
        self.kernel_name, self._kernel = fused.kernel(self.impl, x.device.type, x.dtype,
                                                      fused.param_dtype(x, params["weight"], params["bias"]),
                                                      self.dim, self.k, self.eps_inside, params["bias"] is not None)
        self._kernel_dtype = x.dtype
        return self._kernel

    def _apply(self, fn, recurse=True):
        self._forget_kernel()  # moved or cast: choose again at the next call
        return super()._apply(fn, recurse)

    def __getstate__(self):
        state = self.__dict__.copy()  # a compiled extension's function does not pickle
        state.update(_kernel=None, _kernel_dtype=None, kernel_name=None)
        return state

    def forward(self, x: Tensor) -> Tensor:
        params = self._parameters  # one dict read instead of two nn.Module.__getattr__ calls
        if torch.compiler.is_compiling():
            return fused.traced(x, params["weight"], params["bias"], self.k, self.eps, self.eps_inside, self.impl)
        kernel = self._kernel
        if kernel is None or x.dtype is not self._kernel_dtype:
            kernel = self._choose_kernel(x)
        return kernel(x, params["weight"], params["bias"], self.k, self.eps, self.eps_inside)

    def row_norm(self) -> RowNorm | None:
        """This norm for a kernel that computes it inside its own loop (the fused GRU cell), or None
        when norm.impl asks for the formulas op by op (reference, compile)."""
        if self.impl not in ("auto", "fused"):
            return None
        return RowNorm("rms", self.k, self.eps, self.eps_inside, self.weight, self.bias)

    def extra_repr(self) -> str:
        return f"{self.dim}, p={self.p}, k={self.k}, eps={self.eps}, eps_inside={self.eps_inside}, bias={self.bias is not None}, impl={self.impl}"


class RowRMSNorm:
    """RMSNorm without gain over the rows of a conv map (ChannelNorm), with p and eps already checked.

    The row length (H x W, or C x H x W) is known only at the first map, so k is computed then, once
    per length.
    """

    def __init__(self, p: float, eps: float, eps_inside: bool, impl: str):
        self.p, self.eps, self.eps_inside, self.impl = p, eps, eps_inside, impl
        self.k: dict[int, int] = {}  # row length -> k
        self.kernel_names: set[str] = set()  # what ran (kernels_in)

    def __call__(self, rows: Tensor) -> Tensor:
        dim = rows.shape[-1]
        if dim not in self.k:
            self.k[dim] = formulas.partial_k(dim, self.p)
        if torch.compiler.is_compiling():
            return fused.traced(rows, None, None, self.k[dim], self.eps, self.eps_inside, self.impl)
        name, kernel = fused.kernel(self.impl, rows.device.type, rows.dtype, rows.dtype, dim, self.k[dim],
                                    self.eps_inside, False)
        self.kernel_names.add(name)
        return kernel(rows, None, None, self.k[dim], self.eps, self.eps_inside)


def kernels_in(model: nn.Module) -> list[str]:
    """The RMSNorm kernels this model's own modules ran (sorted; empty before a call): per model, where
    RMSNormalization.describe() reports the whole process's (fused.implementations_used)."""
    names: set[str] = set()
    for module in model.modules():
        if isinstance(module, RMSNorm) and module.kernel_name is not None:
            names.add(module.kernel_name)
        elif isinstance(module, ChannelNorm) and isinstance(module.row_norm, RowRMSNorm):
            names |= module.row_norm.kernel_names
    return sorted(names)


@register("rmsnorm", "prmsnorm")
class RMSNormalization(Normalization):
    """norm=rmsnorm (p = 1) and norm=prmsnorm (p < 1, 6.25% by default)."""

    def __init__(self, name, options=None):
        super().__init__(name, options)
        o = self.options
        self.p, self.eps = float(o.get("p", 1.0)), float(o.get("eps", 1e-8))
        self.eps_inside, self.bias = bool(o.get("eps_inside", False)), bool(o.get("bias", False))
        self.conv_axes, self.impl = o.get("conv_axes", "hw"), str(o.get("impl", "auto"))
        formulas.check_norm_args(1, self.p, self.eps)
        fused.check_impl(self.impl)

    def act(self, dim: int) -> nn.Module:
        return RMSNorm(dim, self.p, self.eps, self.eps_inside, self.bias, self.impl)

    def channels(self, num_channels: int) -> nn.Module:
        rows = RowRMSNorm(self.p, self.eps, self.eps_inside, self.impl)
        return ChannelNorm(num_channels, rows, self.conv_axes, bias=True)

    def prepare(self, device: torch.device | str = "cpu") -> str:
        """Build / load the kernel norm.impl runs on `device` now (fused.prepare): 'fused-cpu', 'triton',
        'compile' or 'reference'."""
        return fused.prepare(device, self.impl)

    def describe(self) -> dict:
        # impl_used: what actually ran in this process (e.g. auto -> fused-cpu), or, before the
        # first forward, what `impl` resolves to on the default device.
        used = fused.implementations_used(self.impl)
        default_device = "cuda" if torch.cuda.is_available() else "cpu"
        return {**super().describe(), "impl": self.impl,
                "impl_used": ",".join(used) or fused.resolve(self.impl, default_device)}
