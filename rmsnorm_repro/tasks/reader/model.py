"""The bidirectional attentive reader (Hermann et al. 2015), as in the code the paper's authors ran
(AttentiveReader's docstring: the network, its options and init)."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...nn.lstm import NormLSTM, cooijmans_matrix
from ...norms import Normalization, init_weight_


class AttentiveReader(nn.Module):
    """The authors' code is Cooijmans' Attentive_reader (branch bn: codes/att_reader/model.py), with the command
    of the authors' README (--use_dq_sims 1 --use_desc_skip_c_g 1 --learn_h0 1 --use_bidir 1, dropout
    on by default):

        e        = dropout(embed(tokens))                 a fresh mask for each direction and for the query
        y_d(t)   = [fwd_t ; bwd_t]                         document encoder, a bidirectional normalized LSTM
        u        = [fwd_last ; bwd_first]                  query encoder, another one (same word embedding)
        m_t      = tanh(W_ym y_d(t) + W_um u + y_d(t)^T B B^T u)   attention MLP; the last term (a scalar
                                                           added to every unit) is use_dq_sims
        s        = softmax_t(w_ms . m_t)                   over real (unpadded) positions only
        r        = sum_t s_t y_d(t)
        g        = dropout(tanh(W_rg r + W_ug u + W_dg mean_t y_d(t)))   the last term is use_desc_skip_c_g
        logits   = W_g g + b                               over the whole vocabulary (n_words_ans = emb_sz)

    `candidates` (a (B, V) mask), when given, sets every other word's logit to -inf: the entity mask
    of Hermann et al., which the authors' command does not use (train_attentive_reader.py cost_mask =
    None); task.model.entity_mask turns it on.

    The norm sits only inside the LSTM cells (docs/paper.md section 2); the rest is plain layers from the
    factory. Init (init="cooijmans", utils.norm_weight / ortho_weight / norm_vec): square matrices
    0.05 x orthogonal (the LSTMs' recurrent blocks, their input blocks when emb_dim = hidden, the dq
    bilinear map), the others U(-r, r) with r = sqrt(6 / (fan_in + fan_out + 1)), the attention vector
    U(-1/sqrt(hidden), 1/sqrt(hidden)), biases and h0 zero. init="xavier": Xavier, orthogonal for square
    blocks (the paper's words). The authors' utils reseed numpy (123) before every matrix, so all their
    blocks of one shape are the same matrix; ours are independent draws.
    """

    def __init__(
        self,
        vocab_size: int,
        n_outputs: int,
        norms: Normalization,
        emb_dim: int,
        hidden: int,
        max_doc_len: int,
        max_query_len: int,
        forget_bias: float = 0.0,
        dropout: float = 0.5,
        use_dq_sims: bool = True,
        use_desc_skip: bool = True,
        learn_h0: bool = True,
        init: str = "cooijmans",
        input_bias: str = "both",
    ):
        super().__init__()
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"task.model.dropout must be in [0, 1), got {dropout}")
        self.dropout, self.use_dq_sims, self.use_desc_skip = float(dropout), bool(use_dq_sims), bool(use_desc_skip)
        self.embed = nn.Embedding(vocab_size, emb_dim, padding_idx=0)
        lstm = dict(bidirectional=True, forget_bias=forget_bias, input_bias=input_bias, learn_h0=learn_h0, init=init)
        self.doc_encoder = NormLSTM(emb_dim, hidden, norms, max_doc_len, **lstm)
        self.query_encoder = NormLSTM(emb_dim, hidden, norms, max_query_len, **lstm)
        self.att_doc = norms.linear(2 * hidden, hidden, bias=True)
        self.att_query = norms.linear(2 * hidden, hidden, bias=False)
        self.att_bilinear = norms.linear(2 * hidden, 2 * hidden, bias=False) if use_dq_sims else None
        self.att_score = norms.linear(hidden, 1, bias=False)
        self.out_doc = norms.linear(2 * hidden, hidden, bias=False)
        self.out_query = norms.linear(2 * hidden, hidden, bias=True)
        self.out_mean = norms.linear(2 * hidden, hidden, bias=False) if use_desc_skip else None
        self.logits = norms.linear(hidden, n_outputs, bias=True)
        with torch.no_grad():
            rows, cols = self.embed.weight.shape
            self.embed.weight.copy_(cooijmans_matrix(rows, cols, init))
            self.embed.weight[0].zero_()
            for layer in (self.att_doc, self.att_query, self.att_bilinear, self.out_doc, self.out_query,
                          self.out_mean, self.logits):
                if layer is not None:
                    init_weight_(layer, cooijmans_matrix(*layer.weight.shape, init).to(layer.weight))
                    if layer.bias is not None:
                        layer.bias.zero_()
            if init == "cooijmans":  # utils.norm_vec(dim): U(-1/sqrt(dim), 1/sqrt(dim))
                bound = hidden ** -0.5
                init_weight_(self.att_score, torch.empty_like(self.att_score.weight).uniform_(-bound, bound))
            else:
                init_weight_(self.att_score, nn.init.xavier_uniform_(torch.empty_like(self.att_score.weight)))

    def _drop(self, x: Tensor) -> Tensor:
        return F.dropout(x, self.dropout, self.training)

    def forward(
        self, doc: Tensor, doc_mask: Tensor, query: Tensor, query_mask: Tensor, candidates: Tensor | None = None
    ) -> Tensor:
        """doc (B, Td), query (B, Tq) token ids with masks; candidates (B, V) bool or None -> logits (B, V)."""
        d, q = self.embed(doc), self.embed(query)
        y, _ = self.doc_encoder(self._drop(d), doc_mask, self._drop(d))  # (B, Td, 2H), 0 at padding
        _, u = self.query_encoder(self._drop(q), query_mask, self._drop(q))  # (B, 2H)
        pre = self.att_doc(y) + self.att_query(u).unsqueeze(1)
        if self.att_bilinear is not None:  # use_dq_sims: (B y_t) . (B u), one scalar per position
            pre = pre + (self.att_bilinear(y) * self.att_bilinear(u).unsqueeze(1)).sum(-1, keepdim=True)
        scores = self.att_score(torch.tanh(pre)).squeeze(-1).masked_fill(~doc_mask, float("-inf"))
        r = torch.einsum("bt,btd->bd", torch.softmax(scores, dim=-1), y)
        pre_g = self.out_doc(r) + self.out_query(u)
        if self.out_mean is not None:  # use_desc_skip_c_g: the mean of the document states over real positions
            mean = y.sum(1) / doc_mask.sum(1, keepdim=True).clamp_min(1).to(y.dtype)
            pre_g = pre_g + self.out_mean(mean)
        logits = self.logits(self._drop(torch.tanh(pre_g)))
        return logits if candidates is None else logits.masked_fill(~candidates, float("-inf"))
