"""LSTM with the norm placement of the attentive reader the paper used (Cooijmans et al.'s code): two
norms over the gate inputs, one over the cell state before its tanh (NormLSTM's docstring; docs/paper.md
section 2). norm=batchnorm gives BN-LSTM, statistics per time step (`norms.step_norm`). On CUDA each step
after its state product runs as one Triton launch each way where its norms are one per step (triton_lstm.py).
"""
from __future__ import annotations

import torch
from torch import Tensor, nn

from ..norms import Normalization, init_weight_
from . import triton_lstm
from .loop_linear import LoopLinear

INITS = ("xavier", "cooijmans")
SQUARE_SCALE = 0.05  # Cooijmans' utils.ortho_weight(ndim, scale=0.05)


def cooijmans_matrix(rows: int, cols: int, init: str = "cooijmans") -> Tensor:
    """One (rows, cols) block. cooijmans: utils.norm_weight: 0.05 x orthogonal when square, else
    U(-r, r) with r = sqrt(6 / (rows + cols + 1)); xavier: orthogonal when square, else Xavier-uniform."""
    if init not in INITS:
        raise ValueError(f"init must be one of {', '.join(INITS)}, got {init!r}")
    block = torch.empty(rows, cols)
    if rows == cols:
        return nn.init.orthogonal_(block) * (SQUARE_SCALE if init == "cooijmans" else 1.0)
    if init == "cooijmans":
        r = (6.0 / (rows + cols + 1)) ** 0.5
        return nn.init.uniform_(block, -r, r)
    return nn.init.xavier_uniform_(block)


def _init_gate_blocks(layer: nn.Module, hidden_size: int, init: str = "xavier") -> None:
    """Each gate's block as `cooijmans_matrix`: xavier (orthogonal where square, the paper's words)
    or cooijmans (the authors' code)."""
    rows, cols = layer.weight.shape
    blocks = [cooijmans_matrix(hidden_size, cols, init) for _ in range(rows // hidden_size)]
    init_weight_(layer, torch.cat(blocks, 0).to(layer.weight))


class LSTMDirection(nn.Module):
    """One direction of a normalized LSTM over a time-major (T, B, I) sequence."""

    fused = True  # CUDA: a step after its state product as one Triton launch each way (triton_lstm.py); False: op by op

    def __init__(self, input_size: int, hidden_size: int, norms: Normalization, max_steps: int, forget_bias: float,
                 input_bias: str = "after", learn_h0: bool = False, init: str = "xavier"):
        super().__init__()
        if input_bias not in ("after", "both"):
            raise ValueError(f"input_bias must be 'after' or 'both', got {input_bias!r}")
        self.hidden_size, self.input_bias = hidden_size, input_bias
        self.input_proj = norms.linear(input_size, 4 * hidden_size, bias=False)
        self.hidden_proj = norms.linear(hidden_size, 4 * hidden_size, bias=False)
        self.norm_x = norms.step_norm(4 * hidden_size, max_steps)
        self.norm_h = norms.step_norm(4 * hidden_size, max_steps)
        self.norm_c = norms.step_norm(hidden_size, max_steps)
        self.bias = nn.Parameter(torch.zeros(4 * hidden_size))
        self.h0 = nn.Parameter(torch.zeros(hidden_size)) if learn_h0 else None
        _init_gate_blocks(self.input_proj, hidden_size, init)
        _init_gate_blocks(self.hidden_proj, hidden_size, init)
        with torch.no_grad():  # gate order i, f, g, o
            self.bias[hidden_size : 2 * hidden_size] = forget_bias

    def forward(self, x: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        """x (T, B, I), mask (T, B) bool -> outputs (T, B, H), last state (B, H)."""
        gx_all = self.input_proj(x)
        if self.input_bias == "both":
            gx_all = gx_all + self.bias
        gx_all = self.norm_x.forward_sequence(gx_all) + self.bias
        c = x.new_zeros(x.shape[1], self.hidden_size)
        h = c if self.h0 is None else self.h0.expand_as(c)
        outputs = []
        linear = LoopLinear(x.shape[0])  # hidden_proj's gradient as one product over all steps
        # unbind(0), not gx_all[t]: indexing makes every step's backward allocate a full (T, B, 4H) zero tensor.
        fused_step = triton_lstm.step_function(self, h) if self.fused else None  # CUDA: one launch each way
        for t, (gx, m) in enumerate(zip(gx_all.unbind(0), mask.unsqueeze(-1).unbind(0))):
            linear.t = t
            s = linear(self.hidden_proj, h)
            if fused_step is not None and (done := fused_step(gx, s, c, h, m)) is not None:
                h, c = done
            else:
                i, f, g, o = (gx + self.norm_h(s, t)).chunk(4, dim=-1)
                c_new = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
                h_new = torch.sigmoid(o) * torch.tanh(self.norm_c(c_new, t))
                c = torch.where(m, c_new, c)
                h = torch.where(m, h_new, h)
            outputs.append(h)
        return torch.stack(outputs), h


def reverse_within_length(x: Tensor, lengths: Tensor) -> Tensor:
    """Reverse each row of a time-major (T, B, ...) tensor over its first lengths[b] steps; padding stays put."""
    steps = torch.arange(x.shape[0], device=x.device).unsqueeze(1)  # (T, 1)
    index = torch.where(steps < lengths, lengths - 1 - steps, steps)  # (T, B)
    return x.gather(0, index.view(*index.shape, *([1] * (x.dim() - 2))).expand_as(x))


class NormLSTM(nn.Module):
    """(Bi)directional normalized LSTM, batch first: forward(x (B, T, I), mask (B, T)) ->
    (outputs (B, T, H * dirs), last (B, H * dirs)). `last` is the state after the last real token
    (forward) and after the first one (backward); outputs are 0 at padded positions (as NormGRU's).

    One step, with n_x, n_h, n_c the three norms the factory hands out:

        gates = n_x(W_x x_t) + n_h(W_h h_{t-1}) + b          # two norms over all 4H gate inputs jointly
        i, f, g, o = split(gates)
        c_t = sigmoid(f) * c_{t-1} + sigmoid(i) * tanh(g)
        h_t = sigmoid(o) * tanh(n_c(c_t))                     # the cell state normalized before its tanh

    The input projection and its norm do not depend on the state: they run once over the whole sequence,
    outside the time loop. Options that follow the authors' code (Cooijmans' Attentive_reader branch bn with
    bzhangGo/rmsnorm's rlnlstm_layer; docs/recipes.md, reader): input_bias="both" (their b inside n_x and
    again after it), learn_h0 (a learned h_0 per direction, c_0 = 0), init="cooijmans" (cooijmans_matrix),
    forget_bias (theirs: 0).

    `mask` is True on real tokens, a prefix of each row: at a padded step the state is kept, so padding
    changes no output at real positions; the backward direction reads each sequence reversed within its own
    length (its step t is the t-th real token from the end, per-step BatchNorm statistics line up too).
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        norms: Normalization,
        max_steps: int,
        bidirectional: bool = False,
        forget_bias: float = 1.0,
        input_bias: str = "after",
        learn_h0: bool = False,
        init: str = "xavier",
    ):
        super().__init__()
        self.hidden_size, self.bidirectional = hidden_size, bidirectional
        options = (forget_bias, input_bias, learn_h0, init)
        self.fwd = LSTMDirection(input_size, hidden_size, norms, max_steps, *options)
        self.bwd = LSTMDirection(input_size, hidden_size, norms, max_steps, *options) if bidirectional else None

    def forward(self, x: Tensor, mask: Tensor | None = None, x_bwd: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """x_bwd: another input for the backward direction (the same sequence with its own dropout
        mask, as the authors' code embeds the reversed batch anew); default x."""
        x = x.transpose(0, 1)
        mask = torch.ones(x.shape[:2], dtype=torch.bool, device=x.device) if mask is None else mask.transpose(0, 1)
        outputs, last = self.fwd(x, mask)
        if self.bwd is not None:
            lengths = mask.sum(0)
            xb = x if x_bwd is None else x_bwd.transpose(0, 1)
            out_b, last_b = self.bwd(reverse_within_length(xb, lengths), mask)
            outputs = torch.cat([outputs, reverse_within_length(out_b, lengths)], dim=-1)
            last = torch.cat([last, last_b], dim=-1)
        return (outputs * mask.unsqueeze(-1).to(outputs.dtype)).transpose(0, 1), last
