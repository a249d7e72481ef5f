"""Transformer (Vaswani et al. 2017) for the paper's Table 4, with the norm as the only variable.

Every residual block is `norm(x + dropout(f(x)))` (post-norm, as the authors' toolkit) or, with
model.pre_norm, `x + dropout(f(norm(x)))` plus a final norm per stack. Norms come from
`norms.act(d)` and layers from `norms.linear`, so norm=none gives the paper's failing Baseline.

Seq2seq protocol (shared with RNNSearch, used by beam.py):
    model(src, src_mask, tgt_in) -> logits [B, T, V]
    model.encode(src, src_mask) -> state dict (batch in dim 0): src_mask, cross-attention keys and
        values per layer ("ck{i}", "cv{i}") and an empty self-attention cache ("sk{i}", "sv{i}")
    model.source_state: the state's tensors fixed by the source (src_mask, ck{i}, cv{i})
    model.decode_step(state, prefix) -> (log_probs [B, V] of the token after prefix, new state):
        runs only the last prefix token through the decoder, appending its keys/values to the cache.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from omegaconf import DictConfig
from torch import Tensor, nn

from ...norms import Normalization, init_weight_


def sinusoids(positions: Tensor, dim: int) -> Tensor:
    """Fixed sinusoidal position encodings [T, dim] (sin on the first half, cos on the second)."""
    half = dim // 2
    freq = torch.exp(torch.arange(half, device=positions.device) * (-math.log(10000.0) / max(half - 1, 1)))
    angle = positions.float()[:, None] * freq[None]
    return torch.cat([angle.sin(), angle.cos()], 1)


class Attention(nn.Module):
    """Multi-head attention through torch's scaled_dot_product_attention."""

    def __init__(self, d: int, heads: int, dropout: float, norms: Normalization):
        super().__init__()
        if d % heads:
            raise ValueError(f"task.model.d_model={d} must be divisible by task.model.heads={heads}")
        self.heads, self.dropout = heads, dropout
        self.q, self.k, self.v, self.o = (norms.linear(d, d) for _ in range(4))

    def split(self, x: Tensor) -> Tensor:  # [B, T, D] -> [B, H, T, D/H]
        return x.view(x.size(0), x.size(1), self.heads, -1).transpose(1, 2)

    def keys_values(self, mem: Tensor) -> tuple[Tensor, Tensor]:
        return self.split(self.k(mem)), self.split(self.v(mem))

    def forward(self, x: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> Tensor:
        """Queries from x attend to heads-split keys k / values v; mask [B, 1, Tq|1, Tk], True = attend."""
        out = F.scaled_dot_product_attention(self.split(self.q(x)), k, v, attn_mask=mask,
                                             dropout_p=self.dropout if self.training else 0.0)
        return self.o(out.transpose(1, 2).reshape(x.shape))


class Block(nn.Module):
    """One encoder (self-attention, FFN) or decoder (self-attention, cross-attention, FFN) layer."""

    def __init__(self, cfg: DictConfig, norms: Normalization, decoder: bool):
        super().__init__()
        d, att_drop = cfg.d_model, cfg.get("attention_dropout", 0.0)
        self.pre_norm = bool(cfg.get("pre_norm", False))
        self.self_attn = Attention(d, cfg.heads, att_drop, norms)
        self.cross_attn = Attention(d, cfg.heads, att_drop, norms) if decoder else None
        self.ffn = nn.Sequential(norms.linear(d, cfg.ffn_dim), nn.ReLU(), nn.Dropout(cfg.get("activation_dropout", 0.0)),
                                 norms.linear(cfg.ffn_dim, d))
        self.norms = nn.ModuleList(norms.act(d) for _ in range(3 if decoder else 2))
        self.drop = nn.Dropout(cfg.dropout)

    def residual(self, x: Tensor, i: int, f) -> Tensor:
        if self.pre_norm:
            return x + self.drop(f(self.norms[i](x)))
        return self.norms[i](x + self.drop(f(x)))

    def forward(self, x: Tensor, self_mask: Tensor | None, cache: tuple[Tensor, Tensor] | None = None,
                cross: tuple[Tensor, Tensor] | None = None, cross_mask: Tensor | None = None):
        """Returns (x, (k, v)): the self-attention keys/values including x's, for the decode cache."""
        kv = None

        def self_attention(h: Tensor) -> Tensor:
            nonlocal kv
            k, v = self.self_attn.keys_values(h)
            if cache is not None:
                k, v = torch.cat([cache[0], k], 2), torch.cat([cache[1], v], 2)
            kv = (k, v)
            return self.self_attn(h, k, v, self_mask)

        x = self.residual(x, 0, self_attention)
        if self.cross_attn is not None:
            x = self.residual(x, 1, lambda h: self.cross_attn(h, cross[0], cross[1], cross_mask))
        x = self.residual(x, len(self.norms) - 1, self.ffn)
        return x, kv


class Transformer(nn.Module):
    def __init__(self, model_cfg: DictConfig, vocab_size: int, pad_id: int, norms: Normalization,
                 src_vocab_size: int | None = None):
        """vocab_size: the target vocabulary's; src_vocab_size: the source's where it has its own (None: the same)."""
        super().__init__()
        cfg, d = model_cfg, model_cfg.d_model
        self.d, self.pad_id = d, pad_id
        # One joint BPE vocabulary: share source, target and output embeddings (transformer_wmt_en_de
        # with --share-all-embeddings); unshared, each side and the output get their own matrix.
        shared = bool(cfg.get("share_embeddings", True))
        if shared and src_vocab_size not in (None, vocab_size):
            raise ValueError(f"task.model.share_embeddings=true needs one vocabulary for both sides, but the source's has "
                             f"{src_vocab_size} ids and the target's {vocab_size} (data=wmt14_nematus: two Nematus "
                             "dictionaries); set task.model.share_embeddings=false")
        self.src_embed = nn.Embedding(src_vocab_size or vocab_size, d, padding_idx=pad_id)
        self.tgt_embed = self.src_embed if shared else nn.Embedding(vocab_size, d, padding_idx=pad_id)
        self.out = None if shared else norms.linear(d, vocab_size, bias=False)
        self.encoder = nn.ModuleList(Block(cfg, norms, decoder=False) for _ in range(cfg.encoder_layers))
        self.decoder = nn.ModuleList(Block(cfg, norms, decoder=True) for _ in range(cfg.decoder_layers))
        self.source_state = ("src_mask", *(f"{kv}{i}" for i in range(cfg.decoder_layers) for kv in ("ck", "cv")))
        pre = bool(cfg.get("pre_norm", False))
        self.enc_final = norms.act(d) if pre else nn.Identity()
        self.dec_final = norms.act(d) if pre else nn.Identity()
        self.drop = nn.Dropout(cfg.dropout)
        self.reset_parameters(float(cfg.get("init_center", 0.0)), str(cfg.get("init") or "xavier"),
                              float(cfg.get("init_scale") or 0.08))

    def reset_parameters(self, center: float, init: str = "xavier", scale: float = 0.08) -> None:
        """Weight matrices U(-scale, scale) (init=uniform: zero's default initializer, run.py:72-75,
        modules/initializer.py:14-16) or Xavier-uniform (init=xavier: fairseq's); embeddings N(0, d^-1/2)
        (both toolkits), biases 0. Every weight matrix is shifted by `center` (the paper's Figure 4 uses
        0.2). Norm gains keep 1."""
        if init not in ("uniform", "xavier"):
            raise ValueError(f"task.model.init must be uniform or xavier, got {init!r}")
        for m in self.modules():
            if isinstance(m, nn.Linear):
                w = torch.empty_like(m.weight)
                w = nn.init.uniform_(w, -scale, scale) if init == "uniform" else nn.init.xavier_uniform_(w)
                init_weight_(m, w + center)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Embedding):
                nn.init.normal_(m.weight, 0.0, self.d ** -0.5)
                m.weight.data.add_(center)
                m.weight.data[self.pad_id] = 0.0

    def embed(self, table: nn.Embedding, tokens: Tensor, start: int = 0) -> Tensor:
        pos = sinusoids(torch.arange(start, start + tokens.size(1), device=tokens.device), self.d)
        return self.drop(table(tokens) * math.sqrt(self.d) + pos)

    def logits(self, h: Tensor) -> Tensor:
        h = self.dec_final(h)
        return self.out(h) if self.out is not None else h @ self.tgt_embed.weight.t()

    def encode(self, src: Tensor, src_mask: Tensor) -> dict[str, Tensor]:
        mask = src_mask[:, None, None, :]
        x = self.embed(self.src_embed, src)
        for block in self.encoder:
            x, _ = block(x, mask)
        mem = self.enc_final(x)
        state = {"src_mask": src_mask}
        for i, block in enumerate(self.decoder):
            state[f"ck{i}"], state[f"cv{i}"] = block.cross_attn.keys_values(mem)
            empty = mem.new_zeros(mem.size(0), block.self_attn.heads, 0, self.d // block.self_attn.heads)
            state[f"sk{i}"], state[f"sv{i}"] = empty, empty
        return state

    def forward(self, src: Tensor, src_mask: Tensor, tgt_in: Tensor) -> Tensor:
        state = self.encode(src, src_mask)
        t = tgt_in.size(1)
        # Causal mask only: target padding sits after the real tokens, so a real query never sees
        # it, and padded positions' outputs are ignored by the loss.
        causal = torch.ones(t, t, dtype=torch.bool, device=src.device).tril()[None, None]
        x = self.embed(self.tgt_embed, tgt_in)
        for i, block in enumerate(self.decoder):
            x, _ = block(x, causal, cross=(state[f"ck{i}"], state[f"cv{i}"]), cross_mask=src_mask[:, None, None, :])
        return self.logits(x)

    def decode_step(self, state: dict[str, Tensor], prev_tokens: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
        t = prev_tokens.size(1)
        x = self.embed(self.tgt_embed, prev_tokens[:, -1:], start=t - 1)
        cross_mask = state["src_mask"][:, None, None, :]
        new = dict(state)
        for i, block in enumerate(self.decoder):
            x, (new[f"sk{i}"], new[f"sv{i}"]) = block(x, None, cache=(state[f"sk{i}"], state[f"sv{i}"]),
                                                      cross=(state[f"ck{i}"], state[f"cv{i}"]), cross_mask=cross_mask)
        logits = self.logits(x)[:, 0]
        # half-precision logits are scored in float32; float32/float64 keep their precision
        return F.log_softmax(logits.to(torch.promote_types(logits.dtype, torch.float32)), -1), new
