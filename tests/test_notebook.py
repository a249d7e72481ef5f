"""notebooks/compare_runs.ipynb runs top to bottom on a tiny runs directory (nbclient, python3 kernel).

The runs directory reaches the notebook through RMSNORM_RUNS_DIR (its parameters cell reads it);
the kernel is this interpreter's ipykernel, so it sees the installed package.
"""
from __future__ import annotations

from pathlib import Path

import nbformat
from nbclient import NotebookClient

from test_report import write_fake_runs

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "compare_runs.ipynb"


def test_notebook_shows_tables_and_curves(tmp_path: Path, monkeypatch):
    runs = write_fake_runs(tmp_path / "runs")
    monkeypatch.setenv("RMSNORM_RUNS_DIR", str(runs))
    nb = nbformat.read(NOTEBOOK, as_version=4)
    assert any("parameters" in c.metadata.get("tags", []) for c in nb.cells)
    NotebookClient(nb, kernel_name="python3", timeout=120, resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "\n".join(o.get("text", "") + o.get("data", {}).get("text/markdown", "") for o in outputs)
    assert "14 runs in 7 groups" in text
    assert "| rnnsearch | rmsnorm | 2 |" in text and "25.7%" in text  # (675 - 501.5) / 675 over LayerNorm
    assert "fails to train" in text  # the diverged transformer baseline
    assert "# Table 2:" in text and "| RMSNorm | 2 | 22.4 |" in text
    assert sum("image/png" in o.get("data", {}) for o in outputs) == 3  # one figure per task
