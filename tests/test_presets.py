"""Every experiment preset runs as a tiny multirun through the real CLI, and its report reads the sweep.

`python -m rmsnorm_repro.train -m experiment=<name>` with the preset's norms kept and its seeds cut to
seed=1, each task shrunk by tests/tiny_sizes.py; so a preset (or a norm inside one) that no longer runs
fails here. Presets that train the same sweep (table5/fig1 read table2's runs, table8 table7's,
table10 table9's) run it once and each report renders on that one directory. Both translation tasks
are in: rnnsearch (table2, fig3, fig4) and transformer (table4). table1 is computed, not trained
(`python -m rmsnorm_repro.norms.table1`); its preset trains the five methods on convpool.
"""
from __future__ import annotations

import itertools
import json
import subprocess
import sys

import pytest
from runner_fixtures.helpers import CONFIGS, REPO, cli, cli_env
from tiny_sizes import tiny_overrides

pytestmark = pytest.mark.slow  # every test here trains real runs

PRESETS = sorted(p.stem for p in (CONFIGS / "experiment").glob("*.yaml"))
# presets that train another preset's sweep (same runs, same directories: test_experiments.SHARED)
SHARES = {"table5": "table2", "fig1": "table2", "table8": "table7", "table10": "table9"}
# the paper: the Transformer without a norm fails to train (Table 4); every other job must complete
MAY_DIVERGE = {("transformer", "none")}
# run directories named by what the job trains (the overrides' default name would hold every tiny size)
SUBDIR = "hydra.sweep.subdir=${oc.select:codebase.name,tf}-${norm.name}-p${norm.p}-s${seed}"
# fig3 sweeps one norm's p over ten values: its two ends run here (the same code path for every p)
NARROW = {"fig3": ["norm.p=0.1,1.0"]}


@pytest.fixture(scope="module")
def sweep(tmp_path_factory, compose):
    """sweep(preset) -> (CLI process, the preset's composed config, its runs dir); each sweep runs once."""
    cache, done = tmp_path_factory.mktemp("cache"), {}

    def get(preset: str):
        owner = SHARES.get(preset, preset)
        if owner not in done:
            cfg = compose([f"experiment={owner}"], hydra_node=True)
            runs = tmp_path_factory.mktemp(owner)
            proc = cli("-m", f"experiment={owner}", "seed=1", *NARROW.get(owner, []), *tiny_overrides(cfg.task.name),
                       SUBDIR, f"paths.runs_dir={runs}", f"paths.cache_dir={cache}", timeout=600)
            done[owner] = (proc, cfg, runs)
        return done[owner]
    return get


def swept_jobs(cfg, narrow: list[str]) -> list[dict[str, str]]:
    """The preset's sweep with seed=1 (and NARROW's values): one {key: value} per job, every norm kept."""
    params = {k: str(v) for k, v in (cfg.hydra.sweeper.params or {}).items() if k != "seed"}
    params.update(o.split("=", 1) for o in narrow)
    axes = {k: v.split(",") for k, v in params.items()}
    return [dict(zip(axes, values)) for values in itertools.product(*axes.values())]


@pytest.mark.parametrize("preset", PRESETS)
def test_preset_runs_every_norm_and_its_report_renders(preset, sweep, tmp_path):
    proc, cfg, runs = sweep(preset)
    assert proc.returncode == 0, proc.stderr[-4000:]
    summaries = [json.loads(p.read_text()) for p in sorted(runs.rglob("summary.json"))]
    jobs = swept_jobs(cfg, NARROW.get(SHARES.get(preset, preset), []))
    assert len(summaries) == len(jobs), [s["norm"] for s in summaries]
    assert {s["norm"] for s in summaries} == {job.get("norm", cfg.norm.name) for job in jobs}
    if any("norm.p" in job for job in jobs):  # fig3: one run per p
        assert sorted(s["p"] for s in summaries) == sorted(float(job["norm.p"]) for job in jobs)
    for s in summaries:
        assert s["task"] == cfg.task.name and s["seed"] == 1 and s["steps"] == 2, s
        allowed = {"completed", "diverged"} if (s["task"], s["norm"]) in MAY_DIVERGE else {"completed"}
        assert s["status"] in allowed, (s["norm"], s["status"])

    sweep_dir = next(runs.rglob("multirun.yaml")).parent
    if preset == "table1":  # the table itself is computed; the trained methods read as convpool's pages
        table1 = subprocess.run([sys.executable, "-m", "rmsnorm_repro.norms.table1", "--out", str(tmp_path / "t1.md")],
                                env=cli_env(), cwd=REPO, capture_output=True, text=True, timeout=300)
        assert table1.returncode == 0, table1.stdout[-2000:] + table1.stderr[-2000:]
        assert "cells match the paper" in (tmp_path / "t1.md").read_text()
        pages = ["all"]
    else:
        pages = [preset]
    report = subprocess.run([sys.executable, "-m", "rmsnorm_repro.report", str(sweep_dir),
                             *(f"--table={p}" for p in pages), "--out", str(tmp_path / "report")],
                            env=cli_env(), cwd=REPO, capture_output=True, text=True, timeout=300)
    assert report.returncode == 0, report.stderr[-4000:]
    written = sorted(p.stem for p in (tmp_path / "report").glob("*.md"))
    assert written == (["table10", "table9"] if preset == "table1" else [preset])
