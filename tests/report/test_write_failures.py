"""Every write failure of a report command is one line naming the folder, the reason and what to do
(docs/reliability.md). A read-only folder is simulated by making the write raise EROFS: as root, chmod
does not stop writes."""
from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from rmsnorm_repro import atomic
from rmsnorm_repro.report.__main__ import main as report_main
from runner_fixtures.fake_runs import write_fake_runs, write_run


@pytest.fixture
def read_only(monkeypatch):
    """Every atomic write fails as on a read-only file system."""
    def refuse(path, *args, **kwargs):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(Path(path).parent))
    monkeypatch.setattr(atomic.tempfile, "mkstemp", lambda dir=None, **kw: refuse(Path(dir) / "x"))


def one_line(err: str) -> str:
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


def runs(tmp_path: Path) -> Path:
    for norm in ("layernorm", "rmsnorm"):
        for seed in (1, 2):
            write_run(tmp_path / "runs", "reader", norm, seed, final={"error": 0.2 + seed / 100})
    return tmp_path / "runs"


@pytest.mark.parametrize("command", ["compare", "report"])
def test_a_read_only_out_folder_is_one_line(tmp_path, capsys, read_only, command):
    root = write_fake_runs(tmp_path / "runs") if command == "report" else runs(tmp_path)
    args = ["compare", str(root)] if command == "compare" else [str(root), "--table", "table2"]
    assert report_main([*args, "--out", str(tmp_path / "out")]) == 2
    err = one_line(capsys.readouterr().err)
    assert "cannot write" in err and "Read-only file system" in err and "--out" in err


def test_compare_prints_its_table_even_when_it_cannot_write_it(tmp_path, capsys, read_only):
    assert report_main(["compare", str(runs(tmp_path))]) == 2
    captured = capsys.readouterr()
    assert "| norm=layernorm |" in captured.out
    one_line(captured.err)


def test_out_naming_a_file_is_one_line(tmp_path, capsys):
    (tmp_path / "afile").write_text("x")
    assert report_main(["compare", str(runs(tmp_path)), "--out", str(tmp_path / "afile")]) == 2
    err = one_line(capsys.readouterr().err)
    assert "afile" in err and "--out" in err


@pytest.mark.parametrize("spec", ["adir", "ro"])
def test_wandb_workspace_spec_that_cannot_be_written_is_one_line(tmp_path, capsys, monkeypatch, spec):
    pytest.importorskip("wandb_workspaces")
    monkeypatch.setenv("WANDB_MODE", "offline")
    (tmp_path / "adir").mkdir()
    if spec == "ro":
        monkeypatch.setattr(atomic.tempfile, "mkstemp",
                            lambda dir=None, **kw: (_ for _ in ()).throw(OSError(errno.EROFS, "Read-only file system", dir)))
    target = tmp_path / ("adir" if spec == "adir" else "ws.json")
    assert report_main(["wandb-workspace", "--entity", "e", "--project", "p", "--offline", "--spec", str(target)]) == 2
    err = one_line(capsys.readouterr().err)
    assert "--spec" in err


def test_a_page_that_cannot_be_written_leaves_no_figure_behind(tmp_path, capsys, monkeypatch):
    """Audit case 35: compare.png without compare.md in the same folder."""
    from rmsnorm_repro.report import compare

    def refuse(path, text):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
    monkeypatch.setattr(compare, "atomic_write_text", refuse)
    assert report_main(["compare", str(runs(tmp_path)), "--out", str(tmp_path / "out")]) == 2
    one_line(capsys.readouterr().err)
    assert not (tmp_path / "out" / "compare.png").exists()
