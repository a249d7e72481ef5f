"""Fault injection into the committed small study (results/small: runs, speed.json, bootstrap.json) and
`--report-only` on it (docs/reliability.md): a damaged run is left out and named, a damaged speed.json or
bootstrap.json is named, and then the exit is not 0; a record that lacks only config.yaml changes no
verdict; a read-only --out and a mistyped folder are one line."""
from __future__ import annotations

import errno
import re
import shutil
from pathlib import Path

import pytest

from rmsnorm_repro import atomic
from rmsnorm_repro.campaigns import demo, small
from runner_fixtures.helpers import REPO

STUDY = REPO / "results" / "small"
RUN = Path("runs") / "rnnsearch" / "rmsnorm-p1.0-s1"


@pytest.fixture
def study(tmp_path) -> Path:
    out = tmp_path / "small"
    shutil.copytree(STUDY / "runs", out / "runs")
    for name in ("speed.json", "bootstrap.json"):
        shutil.copy(STUDY / name, out / name)
    return out


def verdicts(report: Path) -> list[str]:
    """The claims table's rows: claim and verdict."""
    return re.findall(r"^\| (.+?) \| \*\*(.+?)\*\* \|", report.read_text(), flags=re.M)


def report_only(out: Path, capsys) -> tuple[int, str]:
    code = small.main(["--report-only", "--out", str(out)])
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    return code, err


DAMAGES = {
    "truncated summary.json": lambda run: (run / "summary.json").write_bytes((run / "summary.json").read_bytes()[:500]),
    "record_version 99": lambda run: (run / "summary.json").write_text(
        (run / "summary.json").read_text().replace('"record_version": 2', '"record_version": 99')),
    "a bad byte in metrics.jsonl": lambda run: open(run / "metrics.jsonl", "ab").write(b"\xff\n"),
    "bad YAML in config.yaml": lambda run: open(run / "config.yaml", "a").write("norm: [\n"),
}


def test_a_bad_byte_in_a_runs_translations_is_named_and_the_exit_is_not_0(study, capsys):
    with open(study / RUN / "outputs" / "valid.txt", "ab") as f:
        f.write(b"\xff\n")
    code, err = report_only(study, capsys)
    assert code == 1
    named = [line for line in err.splitlines() if "valid.txt" in line]
    assert len(named) == 1 and "not valid UTF-8" in named[0], err


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_a_damaged_run_is_left_out_named_and_the_exit_is_not_0(study, capsys, damage):
    DAMAGES[damage](study / RUN)
    code, err = report_only(study, capsys)
    assert code == 1
    named = [line for line in err.splitlines() if str(RUN.name) in line]
    assert len(named) == 1 and "left out" in named[0], err
    assert f"`{RUN.as_posix()}`" in (study / "REPORT.md").read_text()  # the report names it too


def test_a_run_without_config_yaml_changes_no_verdict(study, capsys):
    assert report_only(study, capsys)[0] == 0
    before = verdicts(study / "REPORT.md")
    (study / RUN / "config.yaml").unlink()
    assert report_only(study, capsys)[0] == 0
    assert verdicts(study / "REPORT.md") == before and ("rnnsearch: RMSNorm's valid BLEU matches LayerNorm's "
                                                        "(within 1 BLEU)", "holds") in before


@pytest.mark.parametrize("name, content", [("speed.json", b"{not json"), ("bootstrap.json", b"\xff")])
def test_a_damaged_speed_or_bootstrap_file_is_named_and_the_exit_is_not_0(study, capsys, name, content):
    (study / name).write_bytes(content)
    code, err = report_only(study, capsys)
    assert code == 1
    named = [line for line in err.splitlines() if name in line]
    assert len(named) == 1 and "cannot be read" in named[0], err
    assert "cannot be read" in (study / "REPORT.md").read_text()


def test_a_read_only_out_is_one_line(study, capsys, monkeypatch):
    monkeypatch.setattr(atomic.tempfile, "mkstemp",
                        lambda dir=None, **kw: (_ for _ in ()).throw(OSError(errno.EROFS, "Read-only file system", dir)))
    code, err = report_only(study, capsys)
    assert code == 2 and err.count("\n") == 1 and "cannot write" in err and "--out" in err, err


def test_demo_report_only_on_a_folder_without_runs_is_one_line(tmp_path, capsys):
    assert demo.main(["--report-only", "--out", str(tmp_path / "mistyped")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no runs under" in err
    assert not (tmp_path / "mistyped" / "REPORT.md").exists()
