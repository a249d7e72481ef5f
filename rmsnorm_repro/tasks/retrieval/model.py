"""Order embeddings (Vendrov et al. 2016) for image-caption retrieval, as in ivendrov/order-embedding.

    s  = |l2norm(GRU(embed(caption))_last)|     the GRU has the paper's four norms per step
    im = |l2norm(W image_features + b)|          a linear map of the 4096-d VGG features

Both sides live on the non-negative unit sphere; a caption matches an image when it lies below it
coordinate-wise (metrics.order_violation). Init as in ivendrov's code (utils.py `norm_weight`
with its default scale=0.1, `xavier_weight`; the authors' rlngru reuses them): word embedding and
the GRU's input matrices uniform in [-0.1, 0.1] (`init_scale`), the GRU's square state matrices
orthogonal, the image map Xavier-uniform, every bias 0, norm gains 1.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...nn.gru import NormGRU, nematus_init_
from ...norms import Normalization, init_weight_


class OrderEmbedding(nn.Module):
    def __init__(self, vocab_size: int, feature_dim: int, norms: Normalization, word_dim: int, dim: int,
                 init_scale: float = 0.1):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, word_dim, padding_idx=0)
        self.encoder = NormGRU(word_dim, dim, norms)
        self.image_proj = norms.linear(feature_dim, dim)
        nematus_init_(self.encoder, init_scale, dist="uniform")  # U(-0.1, 0.1) / orthogonal blocks, biases 0
        with torch.no_grad():
            nn.init.uniform_(self.embed.weight, -init_scale, init_scale)
            self.embed.weight[0].zero_()  # padding
            init_weight_(self.image_proj, nn.init.xavier_uniform_(torch.empty_like(self.image_proj.weight)))
            self.image_proj.bias.zero_()

    def encode_captions(self, tokens: Tensor, mask: Tensor) -> Tensor:
        """(B, T) token ids with mask -> (B, dim) non-negative unit vectors."""
        _, last = self.encoder(self.embed(tokens), mask)
        return F.normalize(last, dim=-1).abs()

    def encode_images(self, features: Tensor) -> Tensor:
        """(B, feature_dim) -> (B, dim) non-negative unit vectors."""
        return F.normalize(self.image_proj(features), dim=-1).abs()
