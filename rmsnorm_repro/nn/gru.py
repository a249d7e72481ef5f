"""GRU with the authors' four-norm placement, and Nematus' weight initialization.

The cell's formulas: NormGRUCell; the layer and how it runs fast: NormGRU.
"""
from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn.utils import parametrize

from ..norms import Normalization, init_weight_
from . import fused_gru, triton_gru
from .loop_linear import LoopLinear


# Initialization -----------------------------------------------------------------------------------
def nematus_matrix(rows: int, cols: int, std: float = 0.01, center: float = 0.0, blocks: int = 1,
                   dist: str = "normal") -> Tensor:
    """A (rows, cols) weight made of `blocks` row blocks, each like Nematus' `norm_weight`:

    orthogonal when the block is square, else N(0, std) (dist="normal", Nematus) or U(-std, std)
    (dist="uniform", ivendrov's order-embedding `norm_weight(scale=0.1)`); `center` is then added to
    every entry (Figure 4 shifts the initialization centre to 0.2).
    """
    if dist not in ("normal", "uniform"):
        raise ValueError(f"init distribution must be 'normal' or 'uniform', got {dist!r}")
    if rows % blocks:
        raise ValueError(f"{rows} rows cannot be split into {blocks} equal blocks")
    parts = []
    for _ in range(blocks):
        block = torch.empty(rows // blocks, cols)
        if rows // blocks == cols:
            nn.init.orthogonal_(block)
        elif dist == "uniform":
            nn.init.uniform_(block, -std, std)
        else:
            nn.init.normal_(block, 0.0, std)
        parts.append(block)
    return torch.cat(parts, 0) + center


def init_matrix_(layer: nn.Module, std: float = 0.01, center: float = 0.0, blocks: int = 1,
                 dist: str = "normal") -> None:
    """Nematus init of one nn.Linear / nn.Embedding (weight as `nematus_matrix`, bias 0)."""
    rows, cols = layer.weight.shape
    init_weight_(layer, nematus_matrix(rows, cols, std, center, blocks, dist).to(layer.weight))
    if getattr(layer, "bias", None) is not None:
        with torch.no_grad():
            layer.bias.zero_()


def nematus_init_(model: nn.Module, std: float = 0.01, center: float = 0.0, dist: str = "normal") -> None:
    """Initialize every Linear and Embedding of `model` the Nematus way (GRU cells per gate block).

    Norm gains and biases keep their own init (1 and 0).
    """
    in_cells: set[int] = set()
    for module in model.modules():
        if isinstance(module, NormGRUCell):
            module.reset_parameters(std, center, dist)
            in_cells.update(id(m) for m in module.modules())
    for module in model.modules():
        if id(module) not in in_cells and isinstance(module, (nn.Linear, nn.Embedding)):
            init_matrix_(module, std, center, dist=dist)


# The cell -----------------------------------------------------------------------------------------
class NormGRUCell(nn.Module):
    """A GRU transition with four norms. Split in two halves for speed:

    `input_part(x)` -> (a_gates, a_cand): everything that depends only on the input (any leading
    shape, so it can run over all time steps at once); `step(a_gates, a_cand, h)` -> h'.

    One transition (Nematus / the authors' Theano code; gates ordered reset, update):

        [a_r, a_z] = N1(W_g x + b_g)          input -> gates, reset and update normalized as ONE 2H vector
        a_c        = N2(W_c x + b_c)          input -> candidate
        [s_r, s_z] = N3(U_g h)                state -> gates, 2H jointly, no bias
        s_c        = N4(U_c h)                state -> candidate, normalized BEFORE the reset gate multiplies it
        r, z = sigmoid(a_r + s_r), sigmoid(a_z + s_z)
        n    = tanh(a_c + r * s_c)
        h'   = z * h + (1 - z) * n

    Each N is `norms.act(...)` with its own gain; the input bias is added before N1/N2 and no bias is
    added after (LayerNorm's own offset, where it has one, plays that part). Under norm=none every N is
    the identity and this is Nematus' plain GRU; under weightnorm the projections (`norms.linear`) are
    reparameterized instead.

    `bias_on="state"` moves the gate and candidate biases to the state side, before N3/N4 (b_g and b_c
    added to U_g h and U_c h; none on the input side): Nematus v0.3 builds the decoder's second GRU so
    (`nematus_compat=True`: layers.py `_get_gates_state`, `_get_proposal_state`, kept "for compatibility
    with dl4mt-tutorial").
    """

    fused = True  # combine() through the one-kernel transition where it applies (CPU: fused_gru.py, CUDA:
    # triton_gru.py); False: op by op

    def __init__(self, input_size: int, hidden_size: int, norms: Normalization, bias_on: str = "input"):
        super().__init__()
        if bias_on not in ("input", "state"):
            raise ValueError(f"bias_on must be 'input' or 'state', got {bias_on!r}")
        self.input_size, self.hidden_size, self.bias_on = input_size, hidden_size, bias_on
        H = hidden_size
        # rows: [W_r; W_z; W_c] and [U_r; U_z; U_c]; the biases [b_r; b_z; b_c] on one side (docstring)
        self.input_proj = norms.linear(input_size, 3 * H, bias=bias_on == "input")
        self.state_proj = norms.linear(H, 3 * H, bias=bias_on == "state")
        self.norm_input_gates = norms.act(2 * H)
        self.norm_input_cand = norms.act(H)
        self.norm_state_gates = norms.act(2 * H)
        self.norm_state_cand = norms.act(H)
        self.reset_parameters()

    def reset_parameters(self, std: float = 0.01, center: float = 0.0, dist: str = "normal") -> None:
        """Nematus init: each gate's block orthogonal if square (always for U), else N(center, std)
        (or U(-std, std) + center with dist="uniform"); biases 0."""
        init_matrix_(self.input_proj, std, center, blocks=3, dist=dist)
        init_matrix_(self.state_proj, std, center, blocks=3, dist=dist)

    def prepare_kernel(self, device: torch.device | str) -> None:
        """Build the fused transition's kernel now (30-60 s the first time on a machine), not at the first step."""
        if self.fused and torch.device(device).type == "cpu":
            fused_gru.load()

    def input_part(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """(..., I) -> normalized input summed inputs for the gates (..., 2H) and the candidate (..., H)."""
        return self.norm_input(self.input_proj(x))

    def norm_input(self, a: Tensor) -> tuple[Tensor, Tensor]:
        """`input_part` given a = input_proj(x) (..., 3H), for a caller that projects x itself (LoopLinear)."""
        a_gates, a_cand = a.split([2 * self.hidden_size, self.hidden_size], dim=-1)
        return self.norm_input_gates(a_gates), self.norm_input_cand(a_cand)

    def step(self, a_gates: Tensor, a_cand: Tensor, h: Tensor, h_in: Tensor | None = None) -> Tensor:
        """One transition from state h (B, H). h_in: h with recurrent dropout applied (default h)."""
        return self.combine(a_gates, a_cand, h, self.state_proj(h if h_in is None else h_in))

    def combine(self, a_gates: Tensor, a_cand: Tensor, h: Tensor, s: Tensor) -> Tensor:
        """The rest of a transition given s = U h, the state's summed inputs before their norms (B, 3H).

        Split from `step` so that a model can record s (Table 5) without computing it twice.
        """
        if self.fused and ((h_new := fused_gru.combine(self, a_gates, a_cand, h, s)) is not None
                           or (h_new := triton_gru.combine(self, a_gates, a_cand, h, s)) is not None):
            return h_new
        s_gates, s_cand = s.split([2 * self.hidden_size, self.hidden_size], dim=-1)
        r, z = torch.sigmoid(a_gates + self.norm_state_gates(s_gates)).chunk(2, dim=-1)
        n = torch.tanh(torch.addcmul(a_cand, r, self.norm_state_cand(s_cand)))
        if n.dtype is not h.dtype:  # autocast: bf16 n and z beside a float32 h0; the state keeps the wider dtype
            dtype = torch.promote_types(n.dtype, h.dtype)
            n, h, z = n.to(dtype), h.to(dtype), z.to(dtype)
        return torch.lerp(n, h, z)  # z * h + (1 - z) * n in one op

    def extra_repr(self) -> str:
        return f"{self.input_size}, {self.hidden_size}" + (", bias_on='state'" if self.bias_on == "state" else "")


def recurrent_dropout_mask(h: Tensor, p: float, training: bool) -> Tensor | None:
    """One Bernoulli mask per sequence, shared by all its time steps (Nematus / Gal & Ghahramani)."""
    if not training or p <= 0.0:
        return None
    return torch.empty_like(h).bernoulli_(1.0 - p).div_(1.0 - p)


# The layer ----------------------------------------------------------------------------------------
class NormGRU(nn.Module):
    """A (bidirectional) GRU layer of `NormGRUCell`s over padded batches.

    forward(x: (B, T, I), mask: (B, T) bool, True = real token, h0: (B, H * dirs) or None)
      -> outputs (B, T, H * dirs), last (B, H * dirs)

    Padded steps keep the previous state, so any padding pattern gives the same results for a
    sequence as running it alone. The backward direction runs from t = T-1 down to 0 and
    therefore starts at each sequence's own last real token. `outputs` are 0 at padded steps;
    `last` is the forward state after the last real token [, the backward state after token 0].
    recurrent_dropout applies one mask per sequence to h before the state projection (training only).

    Speed (docs/performance.md): the input half (one GEMM for W_g and W_c together, plus N1 and N2) does not
    depend on h, so `NormGRU` computes it for all time steps at once over T*B rows and the loop only
    does one GEMM for U_g and U_c together, N3, N4 and the elementwise gates; U's gradient is one GEMM over
    all steps after the loop (`LoopLinear`), not one per step added up. On CPU, N3, N4 and the gates run as
    one C++ kernel forward and one backward (`fused_gru.py`), where the norms are none, RMSNorm, pRMSNorm or
    LayerNorm; `NormGRU` runs each direction's whole loop (products included) as one kernel there. On CUDA
    they run as one Triton launch forward and one backward per step (`triton_gru.py`), for the same norms.
    """

    fused_loop = True  # each direction's whole loop as one kernel where it applies (fused_gru.sequence); False: step by step

    def __init__(
        self, input_size: int, hidden_size: int, norms: Normalization,
        bidirectional: bool = False, recurrent_dropout: float = 0.0,
    ):
        super().__init__()
        self.hidden_size, self.bidirectional = hidden_size, bidirectional
        self.recurrent_dropout = recurrent_dropout
        self.cells = nn.ModuleList(
            NormGRUCell(input_size, hidden_size, norms) for _ in range(2 if bidirectional else 1)
        )

    def forward(self, x: Tensor, mask: Tensor, h0: Tensor | None = None) -> tuple[Tensor, Tensor]:
        B, T, _ = x.shape
        if mask.shape != (B, T):
            raise ValueError(f"mask must have shape (B, T) = {(B, T)}, got {tuple(mask.shape)}")
        dirs = len(self.cells)
        if h0 is None:
            h0 = x.new_zeros(B, self.hidden_size * dirs)
        x_t = x.transpose(0, 1).contiguous()  # (T, B, I): each step's input rows are contiguous
        mask_t = None if bool(mask.all()) else mask.t()  # (T, B); None: no padding, no masking
        outputs, lasts = [], []
        with parametrize.cached():  # weightnorm: compute each g * v / ||v|| once, not once per step
            for d, (cell, h) in enumerate(zip(self.cells, h0.chunk(dirs, dim=-1))):
                out, h = self._run(cell, x_t, mask_t, h, reverse=d == 1)
                outputs.append(out)
                lasts.append(h)
        out = torch.cat(outputs, -1) if dirs > 1 else outputs[0]
        return out * mask.unsqueeze(-1).to(out.dtype), torch.cat(lasts, -1) if dirs > 1 else lasts[0]

    def _run(self, cell: NormGRUCell, x_t: Tensor, mask_t: Tensor | None, h: Tensor,
             reverse: bool) -> tuple[Tensor, Tensor]:
        """One direction over x_t (T, B, I) from h (B, H): -> outputs (B, T, H), the last state (B, H)."""
        a_gates, a_cand = cell.input_part(x_t)  # hoisted: one GEMM + norms over T*B rows
        drop = recurrent_dropout_mask(h, self.recurrent_dropout, self.training)
        if cell.fused and self.fused_loop and (
                done := fused_gru.sequence(cell, a_gates, a_cand, h, drop, mask_t, reverse)) is not None:
            return done[0].transpose(0, 1), done[1]
        T = x_t.shape[0]
        order = range(T - 1, -1, -1) if reverse else range(T)
        steps = [None] * T if mask_t is None else mask_t.unsqueeze(-1).unbind(0)  # T x (B, 1)
        full = [True] * T if mask_t is None else mask_t.all(1).tolist()  # steps with no padding skip the masking
        a_gates, a_cand = a_gates.unbind(0), a_cand.unbind(0)  # unbind, never [t] (docs/performance.md)
        outs: list[Tensor] = [h] * T
        linear = LoopLinear(T)  # U's gradient as one product over all steps
        for t in order:
            linear.t = t
            h_new = cell.combine(a_gates[t], a_cand[t], h, linear(cell.state_proj, h if drop is None else h * drop))
            h = h_new if full[t] else torch.where(steps[t], h_new, h)
            outs[t] = h
        return torch.stack(outs, dim=1), h
