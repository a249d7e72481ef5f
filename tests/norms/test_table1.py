"""Table 1 as a command: cells computed, compared with the paper's, and the failure path."""
from __future__ import annotations

import csv
import os
import subprocess
import sys

import pytest
import torch

from rmsnorm_repro.norms import build_normalization
from rmsnorm_repro.norms import table1 as t1

CELLS = len(t1.METHODS) * len(t1.TRANSFORMATIONS)


def test_paper_csv_is_complete_and_consistent_with_the_papers_text():
    paper = t1.read_paper()
    assert set(paper) == {"BatchNorm", "WeightNorm", "LayerNorm", "RMSNorm", "pRMSNorm"}
    # Sec. 4.1: pRMSNorm shares RMSNorm's invariances, and RMSNorm is LayerNorm minus re-centering.
    assert paper["pRMSNorm"] == paper["RMSNorm"]
    differ = {key for key in paper["RMSNorm"] if paper["RMSNorm"][key] != paper["LayerNorm"][key]}
    assert differ == {"weight_matrix_recentering"}
    assert paper["LayerNorm"]["weight_matrix_recentering"] == "yes"


def test_command_reproduces_the_papers_table(tmp_path, capsys):
    out = tmp_path / "tables" / "table1.md"
    assert t1.main(["--out", str(out)]) == 0
    text = out.read_text()
    assert capsys.readouterr().out == text
    assert text.rstrip().endswith(f"{CELLS}/{CELLS} cells match the paper")
    assert "MISMATCH" not in text
    rows = [line for line in text.splitlines() if line.startswith("| ") and "---" not in line]
    assert len(rows) == 1 + len(t1.METHODS)
    assert all(row.count(" / ") == len(t1.TRANSFORMATIONS) for row in rows[1:])
    assert os.listdir(out.parent) == ["table1.md"]  # written atomically: no temporary file left


def test_a_cell_that_disagrees_fails_the_command(tmp_path, capsys):
    paper = tmp_path / "paper.csv"
    with open(t1.PAPER_CSV) as src, open(paper, "w", newline="") as dst:
        rows = list(csv.DictReader(src))
        next(r for r in rows if r["method"] == "RMSNorm")["weight_matrix_recentering"] = "yes"
        writer = csv.DictWriter(dst, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    assert t1.main(["--out", str(tmp_path / "t.md"), "--paper", str(paper)]) == 1
    text = capsys.readouterr().out
    assert f"{CELLS - 1}/{CELLS} cells match the paper" in text
    rms_row = next(line for line in text.splitlines() if line.startswith("| RMSNorm |"))
    assert "no / yes" in rms_row and "MISMATCH" in rms_row


def test_an_incomplete_paper_csv_is_a_clear_error(tmp_path):
    paper = tmp_path / "paper.csv"
    paper.write_text("method,weight_matrix_rescaling\nBatchNorm,yes\n")
    with pytest.raises(ValueError, match=r"cell \(BatchNorm, weight_matrix_recentering\) is None; it must be 'yes' or 'no'"):
        t1.read_paper(paper)


def test_verdicts_need_a_clear_margin():
    assert t1.verdict(1e-15) == "yes"
    assert t1.verdict(0.3) == "no"
    assert t1.verdict(1e-5) == "?"  # neither invariant nor clearly changed: never matches the paper


@pytest.mark.parametrize("seed", [1, 2])
def test_every_cell_holds_for_other_draws(seed):
    changes = t1.compute(seed)
    assert {m: {k: t1.verdict(c) for k, c in row.items()} for m, row in changes.items()} == t1.read_paper()


def test_transformations_do_what_their_names_say():
    gen = torch.Generator().manual_seed(0)
    w, x = torch.randn(4, 3, dtype=torch.float64), torch.randn(5, 3, dtype=torch.float64)
    d = t1.DELTA
    by_key = {t.key: t.apply for t in t1.TRANSFORMATIONS}

    new_w, new_x = by_key["weight_matrix_rescaling"](w, x, gen)
    assert torch.equal(new_w, d * w) and torch.equal(new_x, x)

    new_w, _ = by_key["weight_matrix_recentering"](w, x, gen)
    added = new_w - w
    torch.testing.assert_close(added, added[:1].expand_as(added))  # the same vector for every unit
    shift = x @ new_w.T - x @ w.T  # so each case's summed inputs all move by one amount
    torch.testing.assert_close(shift, shift[:, :1].expand_as(shift))
    assert shift[:, 0].std() > 0  # ...which differs from case to case

    new_w, _ = by_key["weight_vector_rescaling"](w, x, gen)
    assert torch.equal(new_w[0], d * w[0]) and torch.equal(new_w[1:], w[1:])

    _, new_x = by_key["dataset_rescaling"](w, x, gen)
    assert torch.equal(new_x, d * x)

    _, new_x = by_key["dataset_recentering"](w, x, gen)
    added = new_x - x
    torch.testing.assert_close(added, added[:1].expand_as(added))  # the same vector for every case

    new_w, new_x = by_key["single_case_rescaling"](w, x, gen)
    assert torch.equal(new_x[0], d * x[0]) and torch.equal(new_x[1:], x[1:]) and torch.equal(new_w, w)


def test_the_layer_is_built_by_the_factory():
    wn = t1.NormalizedLayer(build_normalization("weightnorm"), 3, 4)
    assert wn.weight_matrix() is wn.linear.parametrizations.weight.original1  # WeightNorm: transform v
    assert wn.linear.bias is not None  # h = g (v.x) / ||v|| + b
    rms = t1.NormalizedLayer(build_normalization("rmsnorm"), 3, 4)
    assert rms.weight_matrix() is rms.linear.weight and rms.linear.bias is None  # a = W x, no bias before the norm


def test_runs_as_a_module(tmp_path):
    out = tmp_path / "table1.md"
    run = subprocess.run(
        [sys.executable, "-m", "rmsnorm_repro.norms.table1", "--out", str(out), "--seed", "3"],
        capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout == out.read_text()
    assert f"{CELLS}/{CELLS} cells match the paper" in run.stdout


def test_an_out_that_cannot_be_written_is_one_line_after_the_table(tmp_path, capsys):
    (tmp_path / "adir").mkdir()
    assert t1.main(["--out", str(tmp_path / "adir")]) == 2
    captured = capsys.readouterr()
    assert "Table 1" in captured.out  # computed and shown all the same
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: cannot write") and "--out" in err[0], err
