"""notebooks/compare_runs.ipynb runs top to bottom on a tiny runs directory (nbclient, python3 kernel).

The runs directory reaches the notebook through RMSNORM_RUNS_DIR (its parameters cell reads it);
the kernel is this interpreter's ipykernel, so it sees the installed package.
"""
from __future__ import annotations

import base64
import shutil
import struct
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from runner_fixtures.fake_runs import write_fake_runs, write_run

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "compare_runs.ipynb"


def _png_size(data: str) -> tuple[int, int]:
    raw = base64.b64decode(data)
    return struct.unpack(">II", raw[16:24])  # the IHDR chunk: width, height


def test_notebook_shows_tables_and_curves(tmp_path: Path, monkeypatch):
    runs = write_fake_runs(tmp_path / "runs")
    # the same rnnsearch run in a second directory (counts once), and a group of a single run
    original = next(p for p in runs.iterdir() if p.name.startswith("rnnsearch-rmsnorm-p1.0-s1"))
    shutil.copytree(original, runs / "again" / original.name)
    write_run(runs, "convpool", "layernorm", 1, s_per_1k=40, final={"error": 10.0, "train_error": 3.0},
              curve={"train_error": [52.0, 31.0, 12.0], "error": [56.0, 36.0, 16.0]})
    monkeypatch.setenv("RMSNORM_RUNS_DIR", str(runs))
    nb = nbformat.read(NOTEBOOK, as_version=4)
    assert any("parameters" in c.metadata.get("tags", []) for c in nb.cells)
    NotebookClient(nb, kernel_name="python3", timeout=120, resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "\n".join(o.get("text", "") + o.get("data", {}).get("text/markdown", "") for o in outputs)
    assert "15 runs in 8 groups" in text and "(1 duplicate runs of a seed left out)" in text
    assert "| rnnsearch | rmsnorm | 2 |" in text and "25.7%" in text  # (675 - 501.5) / 675 over LayerNorm
    assert "| convpool | layernorm | 1 | 40.0 (1 run) |" in text  # a single run: its value, no "± 0.0 (n=1)"
    assert "(n=1)" not in text
    assert "fails to train" in text  # the diverged transformer baseline
    assert "# Table 2:" in text and "| RMSNorm | 2 | 22.4 |" in text
    images = [o["data"]["image/png"] for o in outputs if "image/png" in o.get("data", {})]
    assert len(images) == 3  # one figure per task
    sizes = [_png_size(image) for image in images]
    # panels wrap at three a row of 5 x 3.6 in (five panels in one row were 22 in wide); convpool has 4 panels
    assert all(width <= 1600 for width, _ in sizes) and max(height for _, height in sizes) >= 600, sizes


def test_the_default_runs_folder_is_the_checkouts_from_the_root_and_from_notebooks(monkeypatch):
    nb = nbformat.read(NOTEBOOK, as_version=4)
    (parameters,) = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    monkeypatch.delenv("RMSNORM_RUNS_DIR", raising=False)
    repo = NOTEBOOK.parents[1]
    for cwd in (repo, repo / "notebooks"):
        monkeypatch.chdir(cwd)
        scope: dict = {}
        exec(parameters.source, scope)
        assert Path(scope["RUNS_DIR"]) == repo / "results" / "runs", cwd
