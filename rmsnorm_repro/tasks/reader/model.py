"""The bidirectional attentive reader (Hermann et al. 2015), as in the code the paper's authors used.

    y_d(t) = [fwd_t ; bwd_t]                   document encoder, a bidirectional normalized LSTM
    u      = [fwd_last ; bwd_first]            query encoder, another one (same word embedding)
    m_t    = tanh(W_ym y_d(t) + W_um u)        attention MLP over document positions
    s      = softmax_t(w_ms . m_t)             over real (unpadded) positions only
    r      = sum_t s_t y_d(t)
    g      = tanh(W_rg r + W_ug u)
    logits = W_g g, restricted to the document's candidate entities

The norm sits only inside the LSTM cells (PAPER.md section 2); the rest is plain layers from the
factory. Init: Xavier everywhere, orthogonal for square blocks (the paper's setting).
"""
from __future__ import annotations

import torch
from torch import Tensor, nn

from ...nn.lstm import NormLSTM
from ...norms import Normalization, init_weight_


class AttentiveReader(nn.Module):
    def __init__(
        self,
        vocab_size: int,
        n_entities: int,
        norms: Normalization,
        emb_dim: int,
        hidden: int,
        max_doc_len: int,
        max_query_len: int,
        forget_bias: float = 1.0,
    ):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, emb_dim, padding_idx=0)
        self.doc_encoder = NormLSTM(emb_dim, hidden, norms, max_doc_len, True, forget_bias)
        self.query_encoder = NormLSTM(emb_dim, hidden, norms, max_query_len, True, forget_bias)
        self.att_doc = norms.linear(2 * hidden, hidden, bias=True)
        self.att_query = norms.linear(2 * hidden, hidden, bias=False)
        self.att_score = norms.linear(hidden, 1, bias=False)
        self.out_doc = norms.linear(2 * hidden, hidden, bias=False)
        self.out_query = norms.linear(2 * hidden, hidden, bias=True)
        self.logits = norms.linear(hidden, n_entities, bias=True)
        with torch.no_grad():
            nn.init.xavier_uniform_(self.embed.weight)
            self.embed.weight[0].zero_()
            for layer in (self.att_doc, self.att_query, self.att_score, self.out_doc, self.out_query, self.logits):
                init_weight_(layer, nn.init.xavier_uniform_(torch.empty_like(layer.weight)))
                if layer.bias is not None:
                    layer.bias.zero_()

    def forward(
        self, doc: Tensor, doc_mask: Tensor, query: Tensor, query_mask: Tensor, candidates: Tensor
    ) -> Tensor:
        """doc (B, Td), query (B, Tq) token ids with masks; candidates (B, E) bool -> logits (B, E)."""
        y, _ = self.doc_encoder(self.embed(doc), doc_mask)  # (B, Td, 2H)
        _, u = self.query_encoder(self.embed(query), query_mask)  # (B, 2H)
        m = torch.tanh(self.att_doc(y) + self.att_query(u).unsqueeze(1))
        scores = self.att_score(m).squeeze(-1).masked_fill(~doc_mask, float("-inf"))
        r = torch.einsum("bt,btd->bd", torch.softmax(scores, dim=-1), y)
        g = torch.tanh(self.out_doc(r) + self.out_query(u))
        return self.logits(g).masked_fill(~candidates, float("-inf"))
