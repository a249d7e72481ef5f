"""Pages that never mislabel: a figure page only from runs of its setting, every row's run folders
named under the table, and no absolute path of the machine that wrote them."""
from __future__ import annotations

from pathlib import Path

from rmsnorm_repro import paths
from rmsnorm_repro.report.__main__ import main as report_main
from runner_fixtures.fake_runs import write_fake_runs, write_run


def test_table_all_on_table2_runs_writes_no_figure_3_or_4_page(tmp_path: Path):
    runs = write_fake_runs(tmp_path / "runs")  # Table 2's settings: pRMSNorm at one p, the default init
    out = tmp_path / "pages"
    assert report_main([str(runs), "--table", "all", "--out", str(out)]) == 0
    written = {p.stem for p in out.glob("*.md")}
    assert {"table2", "table3", "table5", "fig1", "fig2"} <= written
    assert not {"fig3", "fig4"} & written and not (out / "figures" / "fig3.png").exists()


def test_figure_3_and_4_pages_come_from_their_own_runs(tmp_path: Path, capsys):
    runs = tmp_path / "runs"
    for p in (0.25, 0.5):
        write_run(runs / "fig3", "rnnsearch", "prmsnorm", 1, p=p, best={"bleu": 10.0})
    write_run(runs / "fig4", "rnnsearch", "rmsnorm", 1, best={"bleu": 12.0}, model={"init_center": 0.2})
    assert report_main([str(runs), "--table", "all", "--out", str(tmp_path / "pages")]) == 0
    assert {"fig3", "fig4"} <= {p.stem for p in (tmp_path / "pages").glob("*.md")}
    capsys.readouterr()
    # asked for by name on runs of another setting: one line, exit 2
    table2 = write_fake_runs(tmp_path / "table2")
    for name, why in (("fig3", "fig3 needs prmsnorm runs at two or more values of p (these have p=0.0625 only)"),
                      ("fig4", "fig4 needs runs with the init centre shifted")):
        assert report_main([str(table2), "--table", name, "--out", str(tmp_path / "no")]) == 2
        err = capsys.readouterr().err
        assert why in err and err.count("\n") == 1, err
    assert not (tmp_path / "no").exists()  # neither the page nor its figure


def test_every_row_names_its_runs_and_no_page_names_an_absolute_path(tmp_path: Path):
    runs = write_fake_runs(tmp_path / "runs")
    out = tmp_path / "pages"
    assert report_main([str(runs.resolve()), "--table", "all", "--out", str(out.resolve())]) == 0
    pages = {p.stem: p.read_text() for p in out.glob("*.md")}
    for name, text in pages.items():
        assert str(tmp_path) not in text and "/tmp/" not in text, name
    table2 = pages["table2"]
    assert "from `../runs` (each row's folders under Runs)" in table2
    rms = next(line for line in table2.splitlines() if line.startswith("- rmsnorm (completed: 2): "))
    assert rms.count("`../runs/rnnsearch-rmsnorm-p1.0-s") == 2
    baseline = next(line for line in pages["table4"].splitlines() if line.startswith("- none (completed: "))
    assert baseline.startswith("- none (completed: 0 of 2 (2 diverged)): ")


def test_an_installed_wheel_is_told_the_console_scripts_not_make(tmp_path: Path, capsys, monkeypatch):
    table2 = write_fake_runs(tmp_path / "table2")
    assert report_main([str(table2), "--table", "fig3", "--out", str(tmp_path / "no")]) == 2
    assert "run `make fig3`" in capsys.readouterr().err  # a checkout: the Makefile's target
    monkeypatch.setattr(paths, "repo_dir", lambda: None)  # a wheel: no Makefile
    assert report_main([str(table2), "--table", "fig3", "--out", str(tmp_path / "no")]) == 2
    assert "run `rmsnorm-train -m experiment=fig3`" in capsys.readouterr().err
    assert report_main([str(tmp_path / "nothing"), "--table", "table4"]) == 2
    assert "run the sweep first (e.g. rmsnorm-train -m experiment=table2)" in capsys.readouterr().err
