"""Linear layers called at every step of a recurrent loop, with each weight's gradient computed once.

Autograd through `layer(x_t)` at each of T steps computes T weight-gradient products with K = batch
rows and adds them one by one into the weight's gradient: T extra passes over a weight-sized tensor,
the largest cost outside the matrix products in the recurrent parts of `bench floor`
(docs/performance.md). `LoopLinear` keeps each step's input instead, passes each step's output
gradient through, and in the backward computes the weight's (and bias's) gradient as one product over
all T x B rows. The gradients are the same sums in another order: equal within rounding (tests).

    linear = LoopLinear(T)
    for t in range(T):
        linear.t = t
        s = linear(cell.state_proj, h)  # = cell.state_proj(h)

Without autograd (evaluation, search), while torch.compile traces the model, or where forward hooks
watch the layer, it calls the layer.
"""
from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.autograd.function import once_differentiable


def call_layer(layer: nn.Module, x: Tensor) -> Tensor:
    """The plain call, for code that takes a `linear(layer, x)` and runs outside a training loop."""
    return layer(x)


class _AllSteps(torch.autograd.Function):
    """The bias broadcast to (T, B, out) (zeros without one), which each step's product adds to. Its
    gradient is every step's output gradient; from it and the kept inputs the backward computes the
    weight's and bias's gradients for all steps at once."""

    @staticmethod
    def forward(ctx, weight: Tensor, bias: Tensor | None, inputs: list, shape: tuple[int, int, int]) -> Tensor:
        ctx.inputs, ctx.has_bias = inputs, bias is not None
        return (bias if bias is not None else weight.new_zeros(())).expand(shape)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: Tensor):
        used = [t for t, x in enumerate(ctx.inputs) if x is not None]  # a step never called has gradient 0
        x = torch.stack([ctx.inputs[t] for t in used]).flatten(0, 1)
        g = (grad if len(used) == grad.shape[0] else grad[used]).flatten(0, 1)
        return g.t().mm(x.to(g.dtype)), (g.sum(0) if ctx.has_bias else None), None, None


def hooked(layer: nn.Module) -> bool:
    """Forward hooks on the layer (or on every module) see its calls only through layer(x)."""
    hooks = nn.modules.module
    return bool(layer._forward_hooks or layer._forward_pre_hooks or hooks._global_forward_hooks
                or hooks._global_forward_pre_hooks)


class LoopLinear:
    """Calls `layer(x)` for nn.Linear layers (weight-normalized too) at step `t` of a loop of `steps`
    steps, batch (B, in) -> (B, out); each layer's weight gradient is one product over all steps
    (module docstring). Set `t` before each step's calls; one call per layer and step."""

    def __init__(self, steps: int):
        self.steps, self.t = steps, 0
        self._layers: dict[nn.Module, tuple[list, tuple[Tensor, ...], Tensor]] = {}

    def __call__(self, layer: nn.Module, x: Tensor) -> Tensor:
        weight = layer.weight
        if not (torch.is_grad_enabled() and weight.requires_grad) or torch.compiler.is_compiling() or hooked(layer):
            return layer(x)
        if layer not in self._layers:
            inputs: list[Tensor | None] = [None] * self.steps
            biases = _AllSteps.apply(weight, layer.bias, inputs, (self.steps, x.shape[0], weight.shape[0]))
            self._layers[layer] = (inputs, biases.unbind(0), weight.detach().t())
        inputs, biases, weight_t = self._layers[layer]
        if inputs[self.t] is not None:
            raise RuntimeError(f"LoopLinear: {layer} called twice at step {self.t}; set .t before each step")
        inputs[self.t] = x.detach()
        return torch.addmm(biases[self.t], x, weight_t)
