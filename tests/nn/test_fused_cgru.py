"""The fused CPU conditional GRU decoder (nn/fused_cgru.py, cgru_cpu.cpp) against RNNSearch's decoder step by step.

Float64 runs the kernel's double instantiation, so a formula slip shows at 1e-12; float32 checks the path
training takes within float32 rounding. The whole model runs, so every gradient the decoder passes on (the
encoder's annotations through the keys and the contexts, the initial state, every weight, gain and bias)
is compared.
"""
from pathlib import Path

import pytest
import torch

from rmsnorm_repro.bench.gpu import autograd_nodes
from rmsnorm_repro.nn import NormGRUCell, fused_cgru
from rmsnorm_repro.norms import build_normalization
from rmsnorm_repro.tasks.translation.rnnsearch import RNNSearch

V, B, S, T = 30, 4, 5, 6
CONFIG = {"emb": 12, "hidden": 10, "dropout": 0.3, "tie_embeddings": False, "init_std": 0.3, "init_center": 0.0}
NORMS = [("rmsnorm", {}), ("prmsnorm", {"p": 0.2}), ("rmsnorm", {"eps_inside": True, "bias": True}),
         ("layernorm", {}), ("none", {}), ("weightnorm", {})]
ATOL = {torch.float64: 1e-12, torch.float32: 1e-5}  # times each tensor's largest value


@pytest.fixture(autouse=True)
def kernel():
    if fused_cgru.load() is None:
        pytest.skip("no C++ toolchain here: the decoder runs step by step")
    yield
    RNNSearch.fused_loop = NormGRUCell.fused = True


def _model(name, options, dtype):
    torch.manual_seed(0)
    model = RNNSearch(CONFIG, V, 0, build_normalization(name, options)).to(dtype).train()
    with torch.no_grad():  # gains and biases away from 1 and 0: a misplaced one cannot hide
        for p in model.parameters():
            if p.dim() == 1:
                p.add_(torch.rand_like(p) * 0.5)
    return model


def _batch():
    gen = torch.Generator().manual_seed(1)
    src, tgt = torch.randint(1, V, (B, S), generator=gen), torch.randint(1, V, (B, T), generator=gen)
    src_mask = torch.ones(B, S, dtype=torch.bool)
    src_mask[1, 3:] = src_mask[2, 4:] = False  # padded sources: their scores are masked
    return src, src_mask, tgt


def _run(model, fused_loop):
    """Logits and every parameter's gradient; dropout draws the same masks each time."""
    RNNSearch.fused_loop = fused_loop
    model.zero_grad()
    torch.manual_seed(3)
    logits = model(*_batch())
    (logits * torch.linspace(-1, 1, logits.numel(), dtype=logits.dtype).view_as(logits)).sum().backward()
    return logits, {"logits": logits.detach(), **{n: p.grad for n, p in model.named_parameters()}}


def _graph_names(out):
    return {node.name() for node in autograd_nodes(out)}


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("name,options", NORMS)
def test_fused_decoder_equals_the_decoder_step_by_step(name, options, dtype):
    model = _model(name, options, dtype)
    logits, got = _run(model, True)
    assert any("CGRU" in n for n in _graph_names(logits))  # the kernel ran
    ref_logits, want = _run(model, False)
    assert not any("CGRU" in n for n in _graph_names(ref_logits))
    assert got.keys() == want.keys()
    for key, value in want.items():
        assert value is not None and got[key] is not None, key
        torch.testing.assert_close(got[key], value, rtol=1e-12 if dtype is torch.float64 else 2e-5,
                                   atol=ATOL[dtype] * max(1.0, float(value.detach().abs().max())), msg=key)


def test_fused_decoder_without_gradients_and_table5_statistic():
    """Evaluation (no autograd) and GRU1's summed inputs (Table 5), which the kernel hands back."""
    model = _model("rmsnorm", {}, torch.float64).eval()
    src, src_mask, tgt = _batch()
    tgt_mask = torch.ones(B, T, dtype=torch.bool)
    results = []
    for fused_loop in (True, False):
        RNNSearch.fused_loop = fused_loop
        with torch.no_grad():
            results.append([model(src, src_mask, tgt), model.recurrent_input_moments(src, src_mask, tgt, tgt_mask)])
    for got, want in zip(*results):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_the_decoder_falls_back_where_the_kernel_does_not_apply():
    def applies(model):
        state = model.encode(*_batch()[:2])
        a_gates, a_cand = model.gru1.input_part(model.tgt_emb(_batch()[2]).transpose(0, 1))
        att = model.attention
        return fused_cgru.decoder(model.gru1, model.gru2, att.state_proj.proj, att.state_proj.norm, att.score,
                                  a_gates, a_cand, state["h"], state["keys"], state["ctx"], state["src_mask"],
                                  None, None) is not None

    assert applies(_model("rmsnorm", {}, torch.float32))
    assert not applies(_model("l2norm", {}, torch.float32))  # a norm the kernel does not compute
    assert not applies(_model("rmsnorm", {"impl": "reference"}, torch.float32))  # the user asked for the formulas
    hooked = _model("rmsnorm", {}, torch.float32)
    hooked.gru2.state_proj.register_forward_hook(lambda *_: None)  # hooks see the layer only through its calls
    assert not applies(hooked)


def test_the_build_compiles_copies_of_the_source_and_its_header():
    """The kernel includes gru_rows.h by name: the build folder holds copies of both, and no checkout's path."""
    directory = Path(fused_cgru.load().__file__).parent
    for file in (fused_cgru.SOURCE, fused_cgru.ROWS):
        assert (directory / file.name).read_bytes() == file.read_bytes()
    assert str(fused_cgru.SOURCE.parent) not in (directory / "build.ninja").read_text()
