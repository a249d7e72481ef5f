"""A model's weight init lands in the weight the layer uses, under weightnorm too (norms.init_weight_).

Under weightnorm a factory layer's weight is g * v / ||v||, recomputed at each access, so an init
written into it in place is silently lost. Each task model is built twice from the same seed, under
norm=none and norm=weightnorm: both draw the same random numbers (weightnorm adds no activation norm),
so every parameter of the plain model must equal the same tensor of the weight-normalized one.
"""
import pytest
import torch
from omegaconf import OmegaConf
from torch import nn
from torch.nn.utils import parametrize

from rmsnorm_repro.norms import build_normalization, init_weight_
from rmsnorm_repro.tasks.convpool.model import ConvPoolCNNC
from rmsnorm_repro.tasks.reader.model import AttentiveReader
from rmsnorm_repro.tasks.retrieval.model import OrderEmbedding
from rmsnorm_repro.tasks.translation.rnnsearch import RNNSearch
from rmsnorm_repro.tasks.translation.transformer import Transformer

MODELS = {
    "convpool": lambda norms: ConvPoolCNNC(norms, widths=(8, 12)),
    "rnnsearch": lambda norms: RNNSearch(dict(emb=8, hidden=6, dropout=0.2, tie_embeddings=False, init_std=0.3,
                                              init_center=0.2), 17, 0, norms),
    "transformer": lambda norms: Transformer(OmegaConf.create(dict(
        encoder_layers=1, decoder_layers=1, d_model=8, ffn_dim=16, heads=2, dropout=0.1, share_embeddings=False,
        init_center=0.2)), 17, 0, norms),
    "reader": lambda norms: AttentiveReader(20, 5, norms, emb_dim=6, hidden=4, max_doc_len=7, max_query_len=3),
    "retrieval": lambda norms: OrderEmbedding(20, 12, norms, word_dim=6, dim=5),
}


@pytest.mark.parametrize("task", MODELS)
def test_weightnorm_keeps_the_init_the_model_asks_for(task):
    torch.manual_seed(0)
    plain = MODELS[task](build_normalization("none"))
    torch.manual_seed(0)
    weight_normed = MODELS[task](build_normalization("weightnorm"))
    reparameterized = 0
    for name, module in plain.named_modules():
        twin = weight_normed.get_submodule(name)
        reparameterized += parametrize.is_parametrized(twin, "weight")
        for attr, param in module.named_parameters(recurse=False):
            torch.testing.assert_close(getattr(twin, attr), param, msg=lambda m: f"{name}.{attr}: {m}")
    assert reparameterized > 0


@pytest.mark.parametrize("norm", ["none", "weightnorm"])
def test_init_weight_sets_the_effective_weight_and_keeps_the_parameters(norm):
    norms = build_normalization(norm)
    for layer in (norms.linear(5, 4), norms.conv2d(3, 6, 3)):
        params = list(layer.parameters())
        weight = torch.randn(layer.weight.shape)
        init_weight_(layer, weight)
        torch.testing.assert_close(layer.weight, weight)
        assert all(a is b for a, b in zip(layer.parameters(), params))  # an optimizer built before still sees them
        if norm == "none":
            assert torch.equal(layer.weight, weight)  # plain layers: a copy, bit for bit
            assert isinstance(layer, (nn.Linear, nn.Conv2d))
