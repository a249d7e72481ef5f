"""The floor table (bench/floor.py): the matrix products it records are the modules' own (counted against
formulas for the GRU layer and the Transformer block), its GEMM-only replay runs exactly those, and the
command writes its table at tiny sizes."""
from __future__ import annotations

import json
from collections import Counter

import pytest
import torch
from omegaconf import OmegaConf

from rmsnorm_repro.bench import floor
from rmsnorm_repro.bench.__main__ import main as bench_main
from rmsnorm_repro.nn.gru import NormGRU
from rmsnorm_repro.norms import build_normalization
from rmsnorm_repro.tasks.translation.transformer import Block

B, T, I, H = 3, 5, 6, 8


def _flops(gemms) -> int:
    return sum(g.flops for g in gemms)


@pytest.mark.parametrize("norm", ["none", "rmsnorm"])
def test_gru_layer_products_are_the_formula(norm):
    gru = NormGRU(I, H, build_normalization(norm), bidirectional=True)
    x, mask = torch.randn(B, T, I, requires_grad=True), torch.ones(B, T, dtype=torch.bool)
    with floor.GemmRecorder() as rec:
        out, _ = gru(x, mask)
    # per direction: the input projection over all T*B rows, then one state projection per step
    per_dir = [floor.Gemm(1, T * B, I, 3 * H, tb=True)] + [floor.Gemm(1, B, H, 3 * H, tb=True)] * T
    assert Counter(rec.gemms) == Counter(per_dir * 2)
    forward = _flops(rec.gemms)
    gemms = floor.record(floor.fwd_bwd(gru, lambda: gru(x, mask)[0]))
    # backward: the input projection's input and weight gradients, each step's state gradient except the
    # first step's (h0 = 0 needs none), and U's weight gradient as one product over all steps
    assert len(gemms) == 2 * ((1 + T) + (2 + (T - 1) + 1))
    assert _flops(gemms) == 3 * forward - 2 * (2 * B * H * 3 * H)


def test_transformer_block_products_are_the_formula():
    d, heads, ffn = 16, 2, 32
    cfg = OmegaConf.create({"d_model": d, "heads": heads, "ffn_dim": ffn, "dropout": 0.0})
    block = Block(cfg, build_normalization("rmsnorm"), decoder=False)
    x = torch.randn(B, T, d, requires_grad=True)
    with floor.GemmRecorder() as rec:
        block(x, None)
    # q, k, v, o projections and the two FFN layers over B*T rows; scores q k^T and p v per (batch, head)
    expected = 2 * B * T * (4 * d * d + 2 * d * ffn) + 2 * (2 * B * heads * T * T * (d // heads))
    assert _flops(rec.gemms) == expected
    gemms = floor.record(floor.fwd_bwd(block, lambda: block(x, None)[0]))
    assert _flops(gemms) == 3 * expected  # every product's two gradients (attention: its 4 backward products)


def test_the_floor_replays_exactly_the_recorded_products():
    gru = NormGRU(I, H, build_normalization("layernorm"), bidirectional=True)
    x, mask = torch.randn(B, T, I, requires_grad=True), torch.ones(B, T, dtype=torch.bool)
    recorded = floor.record(floor.fwd_bwd(gru, lambda: gru(x, mask)[0]))
    assert any(g.ta for g in recorded) and any(g.tb for g in recorded)  # backward's transposed operands
    replay = floor.replay(recorded)
    with floor.GemmRecorder() as rec:
        replay()
    assert Counter(rec.gemms) == Counter(recorded)  # shapes, layouts and counts; hence the FLOPs


def test_floor_command_at_tiny_sizes(tmp_path, capsys):
    code = bench_main(["floor", "--tiny", "--rounds", "1", "--threads", "1", "--norms", "layernorm,rmsnorm",
                       "--out", str(tmp_path)])
    assert code == 0
    data = json.loads((tmp_path / "floor-cpu-tiny.json").read_text())
    rows = data["rows"]
    parts = {r["part"] for r in rows}
    assert parts == {"GRU encoder layer", "conditional GRU decoder", "RNNSearch training step",
                     "Transformer encoder block", "Transformer decoder block", "Transformer training step"}
    assert {r["impl"] for r in rows} >= {"torch nn.GRU", "torch nn.TransformerEncoderLayer", "torch nn.TransformerDecoderLayer"}
    for r in rows:
        assert r["module_ms"] > 0 and r["floor_ms"] > 0 and r["gflop"] > 0
        assert r["ratio_iqr"][0] <= r["ratio"] <= r["ratio_iqr"][1]
        assert sum(s["count"] for s in r["gemm_shapes"]) == r["gemms"]
        assert 0 < r["gemm_share"] <= 1
    # the same recipe's parts under LayerNorm and RMSNorm run the same products
    by = {(r["part"], r["norm"]): r for r in rows if r["impl"].startswith("suite")}
    for part in parts:
        assert by[(part, "layernorm")]["gflop"] == by[(part, "rmsnorm")]["gflop"]
    assert data["env"]["threads"] == "1"
    table = (tmp_path / "floor-cpu-tiny.md").read_text()
    assert "| GRU encoder layer | suite NormGRU | rmsnorm | 1 (thread CPU) |" in table and "RMSNorm / LayerNorm" in table


@pytest.mark.parametrize("args, says", [(["--rounds", "0"], "--rounds"), (["--threads", "x"], "--threads"),
                                        (["--norms", "batchnorm"], "--norms"), (["--data-root", "/nonexistent"], "not a folder")])
def test_floor_command_bad_arguments_are_one_line(args, says, capsys, tmp_path):
    assert bench_main(["floor", *args, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and says in err[0]
    assert not list(tmp_path.iterdir())



def test_the_table_names_data_by_kind_not_by_path():
    assert (floor.shown_command(["--rounds", "2", "--data-root", "/home/me/m30k", "--threads", "1"])
            == "python -m rmsnorm_repro.bench floor --rounds 2 --data-root <Multi30k> --threads 1")
    assert floor.shown_command(["--data-root=/home/me/m30k"]) == "python -m rmsnorm_repro.bench floor --data-root=<Multi30k>"
