"""RNNSearch as Nematus builds it (the paper's Tables 2, 3, 5 and Figures 1-4): the model, its attention
and deep output; the model keys and their why in configs/task/rnnsearch.yaml."""
from __future__ import annotations

from typing import Any, Mapping

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.utils import parametrize

from ...nn import LoopLinear, NormGRU, NormGRUCell, call_layer, fused_cgru, nematus_init_, recurrent_dropout_mask
from ...norms import Normalization

SUPPORTED_NORMS = ("none", "layernorm", "rmsnorm", "prmsnorm", "l2norm", "weightnorm")
CONFIG_KEYS = ("emb", "hidden", "dropout", "tie_embeddings", "init_std", "init_center")


class NormFeedForward(nn.Module):
    """y = N(W x + b): a projection normalized before whatever nonlinearity follows it."""

    def __init__(self, in_features: int, out_features: int, norms: Normalization, bias: bool = True):
        super().__init__()
        self.proj = norms.linear(in_features, out_features, bias=bias)
        self.norm = norms.act(out_features)

    def forward(self, x: Tensor) -> Tensor:
        return self.norm(self.proj(x))


class Attention(nn.Module):
    """Bahdanau's MLP attention with both projections normalized (the Nematus recipe).

    `keys(C)` precomputes N(W_C C + b) once per source sentence; `forward` scores one decoder state.
    """

    def __init__(self, ctx_size: int, state_size: int, hidden_size: int, norms: Normalization):
        super().__init__()
        self.ctx_proj = NormFeedForward(ctx_size, hidden_size, norms, bias=True)
        self.state_proj = NormFeedForward(state_size, hidden_size, norms, bias=False)
        self.score = norms.linear(hidden_size, 1, bias=False)

    def keys(self, ctx: Tensor) -> Tensor:
        return self.ctx_proj(ctx)

    def forward(self, h: Tensor, keys: Tensor, ctx: Tensor, src_mask: Tensor, linear=call_layer) -> Tensor:
        """h (B, H), keys (B, S, A), ctx (B, S, 2H), src_mask (B, S) -> context vector (B, 2H).
        linear(layer, x): how the state's projection is called (a LoopLinear inside the decoder's loop)."""
        query = self.state_proj.norm(linear(self.state_proj.proj, h))
        e = self.score(torch.tanh(keys + query.unsqueeze(1))).squeeze(-1)
        alpha = torch.softmax(e.masked_fill(~src_mask, float("-inf")), dim=-1)
        return torch.bmm(alpha.unsqueeze(1), ctx).squeeze(1)


def _check_config(cfg: Mapping[str, Any]) -> dict[str, Any]:
    keys = set(cfg)
    missing, unknown = set(CONFIG_KEYS) - keys, keys - set(CONFIG_KEYS)
    if missing or unknown:
        raise ValueError(
            f"task.model for rnnsearch: missing {sorted(missing)}, unknown {sorted(unknown)}; "
            f"the keys are exactly {list(CONFIG_KEYS)} (see configs/task/rnnsearch.yaml)"
        )
    if not 0.0 <= float(cfg["dropout"]) < 1.0:
        raise ValueError(f"task.model.dropout must be in [0, 1), got {cfg['dropout']}")
    return {k: cfg[k] for k in CONFIG_KEYS}


class RNNSearch(nn.Module):
    """Nematus-style attentional GRU encoder-decoder.

    model(src, src_mask, tgt_in) -> logits (B, T, V) with teacher forcing; for search:
    encode(src, src_mask) -> state dict (batch in dim 0), decode_step(state, prefix) -> (log_probs, state).

        encoder  embedding -> bidirectional NormGRU -> annotations C (B, S, 2H), 0 at padding
        init     h0 = tanh(N(W mean_s(C) + b))                            mean over real tokens only
        decoder  a conditional GRU per target step t:
                   h1 = GRU1(y_{t-1} embedding, h)                        (input half hoisted over all t)
                   c  = attention(h1, C):  e_s = v . tanh(N(W_C C_s + b) + N(W_h h1)),  softmax over real s
                   h  = GRU2(c, h1)
        output   deep output: tanh(N(W1 h + b1) + N(W2 y_{t-1} + b2) + N(W3 c + b3)) -> vocabulary projection

    Every N is `norms.act(...)`, every projection `norms.linear(...)`; the GRUs are `NormGRUCell`s with
    the authors' four norms. Biases are added before the norms: on the input side in GRU1 and the
    encoder, on the state side in GRU2 (Nematus v0.3 model.py builds GRU2 with nematus_compat=True,
    which adds its gate and candidate biases to U h before the state norms). This follows Nematus-TF
    (the paper's Table 2 toolkit); choices of ours, all documented: the first decoder input is the BOS embedding
    (Nematus uses a zero vector), and dropout sits at a subset of Nematus' sites: on the embeddings and
    on the recurrent states of every GRU (one mask per sequence, shared over time, Gal & Ghahramani) and
    before the vocabulary projection.
    """

    source_state = ("ctx", "keys", "src_mask")  # the state's tensors fixed by the source (beam.py)
    fused_loop = True  # teacher forcing's whole decoder loop as one kernel where it applies; False: step by step

    def __init__(self, model_cfg: Mapping[str, Any], vocab_size: int, pad_id: int, norms: Normalization,
                 src_vocab_size: int | None = None):
        """vocab_size: the target vocabulary's; src_vocab_size: the source's where it has its own (None: the same)."""
        super().__init__()
        cfg = _check_config(model_cfg)
        E, H = int(cfg["emb"]), int(cfg["hidden"])
        self.hidden_size, self.dropout = H, float(cfg["dropout"])
        self.src_emb = nn.Embedding(src_vocab_size or vocab_size, E, padding_idx=pad_id)
        self.tgt_emb = nn.Embedding(vocab_size, E, padding_idx=pad_id)
        self.encoder = NormGRU(E, H, norms, bidirectional=True, recurrent_dropout=self.dropout)
        self.init_state = NormFeedForward(2 * H, H, norms)
        self.gru1 = NormGRUCell(E, H, norms)
        self.attention = Attention(2 * H, H, 2 * H, norms)
        self.gru2 = NormGRUCell(2 * H, H, norms, bias_on="state")  # Nematus' nematus_compat=True
        self.out_state = NormFeedForward(H, E, norms)
        self.out_prev = NormFeedForward(E, E, norms)
        self.out_ctx = NormFeedForward(2 * H, E, norms)
        self.tie_embeddings = bool(cfg["tie_embeddings"])
        if self.tie_embeddings:  # logits = hidden @ tgt_emb.weight^T + b
            self.out_bias = nn.Parameter(torch.zeros(vocab_size))
        else:
            self.out_proj = norms.linear(E, vocab_size, bias=True)
        nematus_init_(self, float(cfg["init_std"]), float(cfg["init_center"]))
        with torch.no_grad():  # the padding rows stay 0 (and get no gradient: padding_idx)
            self.src_emb.weight[pad_id].zero_()
            self.tgt_emb.weight[pad_id].zero_()

    # Pieces -------------------------------------------------------------------------------------
    def _shared_dropout(self, x: Tensor) -> Tensor:
        """Dropout on (B, T, D) with one mask per sequence, reused at every step (Nematus)."""
        if not self.training or self.dropout == 0.0:
            return x
        keep = 1.0 - self.dropout
        return x * torch.empty_like(x[:, :1]).bernoulli_(keep).div_(keep)

    def _logits(self, h: Tensor, prev_emb: Tensor, ctx: Tensor) -> Tensor:
        """Deep output over any leading shape: (..., H), (..., E), (..., 2H) -> (..., V)."""
        hidden = torch.tanh(self.out_state(h) + self.out_prev(prev_emb) + self.out_ctx(ctx))
        hidden = F.dropout(hidden, self.dropout, self.training)
        if self.tie_embeddings:
            return F.linear(hidden, self.tgt_emb.weight, self.out_bias)
        return self.out_proj(hidden)

    def encode(self, src: Tensor, src_mask: Tensor) -> dict[str, Tensor]:
        """-> {"ctx": (B, S, 2H), "keys": (B, S, 2H), "src_mask": (B, S), "h": (B, H)}; batch in dim 0."""
        with parametrize.cached():
            ctx, _ = self.encoder(self._shared_dropout(self.src_emb(src)), src_mask)
            lengths = src_mask.sum(1, keepdim=True).clamp_min(1).to(ctx.dtype)
            h = torch.tanh(self.init_state(ctx.sum(1) / lengths))  # ctx is 0 at padding
            return {"ctx": ctx, "keys": self.attention.keys(ctx), "src_mask": src_mask, "h": h}

    def _transition(self, state: dict[str, Tensor], a_gates: Tensor, a_cand: Tensor, drop1: Tensor | None = None,
                    drop2: Tensor | None = None, linear=call_layer) -> tuple[Tensor, Tensor, Tensor]:
        """One conditional-GRU step from state["h"]; -> (h, context, s) with s = GRU1's U h (pre-norm).
        linear(layer, x) calls the per-step projections (a LoopLinear in the teacher-forced loop)."""
        h = state["h"]
        s = linear(self.gru1.state_proj, h if drop1 is None else h * drop1)
        h1 = self.gru1.combine(a_gates, a_cand, h, s)
        c = self.attention(h1, state["keys"], state["ctx"], state["src_mask"], linear)
        a2_gates, a2_cand = self.gru2.norm_input(linear(self.gru2.input_proj, c))
        h2 = self.gru2.combine(a2_gates, a2_cand, h1, linear(self.gru2.state_proj, h1 if drop2 is None else h1 * drop2))
        return h2, c, s

    def _teacher_forced(self, src, src_mask, tgt_in) -> tuple[Tensor, Tensor, Tensor, list[Tensor]]:
        """Run the decoder over tgt_in: -> (states (B,T,H), contexts (B,T,2H), embeddings, [s_t])."""
        state = self.encode(src, src_mask)
        emb = self._shared_dropout(self.tgt_emb(tgt_in))
        states, contexts, summed = self.decoder_states(state, emb)
        return states, contexts, emb, summed

    def decoder_states(self, state: dict[str, Tensor], emb: Tensor) -> tuple[Tensor, Tensor, list[Tensor]]:
        """The conditional GRU over target embeddings emb (B, T, E) from an encoded state: -> (states
        (B, T, H), contexts (B, T, 2H), [s_t]: GRU1's U h before its norms, for Table 5). On CPU every step
        runs in one C++ kernel where it applies (nn/fused_cgru.py); else step by step, as decode_step does."""
        drop1 = recurrent_dropout_mask(state["h"], self.dropout, self.training)
        drop2 = recurrent_dropout_mask(state["h"], self.dropout, self.training)
        a_gates, a_cand = self.gru1.input_part(emb.transpose(0, 1))  # hoisted over all T steps
        if self.fused_loop and NormGRUCell.fused and (done := fused_cgru.decoder(
                self.gru1, self.gru2, self.attention.state_proj.proj, self.attention.state_proj.norm, self.attention.score,
                a_gates, a_cand, state["h"], state["keys"], state["ctx"], state["src_mask"], drop1, drop2)) is not None:
            states, contexts, summed = done  # every step in one kernel (nn/fused_cgru.py)
            return states.transpose(0, 1), contexts.transpose(0, 1), list(summed.unbind(0))
        states, contexts, summed = [], [], []
        linear = LoopLinear(emb.shape[1])  # each recurrent weight's gradient as one product over all steps
        # unbind, never [t]: docs/performance.md
        for t, (a_g, a_c) in enumerate(zip(a_gates.unbind(0), a_cand.unbind(0))):
            linear.t = t
            h, c, s = self._transition(state, a_g, a_c, drop1, drop2, linear)
            state = {**state, "h": h}
            states.append(h)
            contexts.append(c)
            summed.append(s)
        return torch.stack(states, 1), torch.stack(contexts, 1), summed

    # Protocol used by the task and beam search ----------------------------------------------------
    def forward(self, src: Tensor, src_mask: Tensor, tgt_in: Tensor) -> Tensor:
        """Teacher forcing: tgt_in = BOS y_1 .. y_{T-1} (right-padded) -> logits (B, T, V)."""
        with parametrize.cached():
            states, contexts, emb, _ = self._teacher_forced(src, src_mask, tgt_in)
            return self._logits(states, emb, contexts)  # one big GEMM, out of the time loop

    def decode_step(self, state: dict[str, Tensor], prev_tokens: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
        """prev_tokens (B, t), BOS first; only the last token is read (the rest is in state["h"])."""
        with parametrize.cached():
            emb = self.tgt_emb(prev_tokens[:, -1])
            h, c, _ = self._transition(state, *self.gru1.input_part(emb))
            log_probs = torch.log_softmax(self._logits(h, emb, c), dim=-1)
        return log_probs, {**state, "h": h}

    @torch.no_grad()
    def recurrent_input_moments(self, src: Tensor, src_mask: Tensor, tgt_in: Tensor, tgt_mask: Tensor,
                                where: str = "post_norm") -> Tensor:
        """Table 5: moments of the decoder's first GRU's hidden-to-hidden summed inputs.

        where="post_norm" (the default): [N3(U_g h_{t-1}), N4(U_c h_{t-1})], GRU1's state->gates and
        state->candidate summed inputs after their norms (gain and offset included); "pre_norm":
        s = [U_r; U_z; U_c] h_{t-1} before them. Under norm=none both are the same. 3H values per
        target token. Returns (5, 3): rows target positions 1, 2, 3, 4 and all positions; columns
        count, sum, sum of squares over real tokens (tgt_mask), pooled over tokens and units. Sum
        over batches, then mean = sum/count, std = sqrt(sumsq/count - mean^2).

        Why post_norm: the paper's LayerNorm row has M about -0.5 (not 0) and LayerNorm and RMSNorm
        have the same S (1.51 and 1.50 at every position from 2 on). Values after a norm are set by
        its gain and offset, so both fit; before a scale-invariant norm the scale of U h is free.
        The authors' statistics script is not public, so this is our reading (docs/recipes.md).
        """
        if where not in ("post_norm", "pre_norm"):
            raise ValueError(f"task.table5_stat must be post_norm or pre_norm, got {where!r}")
        with parametrize.cached():
            *_, summed = self._teacher_forced(src, src_mask, tgt_in)
            s = torch.stack(summed, 1)  # (B, T, 3H)
            if where == "post_norm":
                gates, cand = s.split([2 * self.hidden_size, self.hidden_size], dim=-1)
                s = torch.cat([self.gru1.norm_state_gates(gates), self.gru1.norm_state_cand(cand)], -1)
        s = s.double()
        m = tgt_mask[:, : s.shape[1]].unsqueeze(-1).to(s.dtype)
        count = m.expand_as(s).sum(dim=(0, 2))  # per position
        total, squares = (s * m).sum(dim=(0, 2)), (s.pow(2) * m).sum(dim=(0, 2))
        per_pos = torch.stack([count, total, squares], 1)  # (T, 3)
        first4 = torch.zeros(4, 3, dtype=s.dtype, device=s.device)
        first4[: min(4, per_pos.shape[0])] = per_pos[:4]
        return torch.cat([first4, per_pos.sum(0, keepdim=True)], 0)
