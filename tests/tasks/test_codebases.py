"""Table 3's two codebases: each variant's norm settings as the authors' code has them, a codebase a task
has no settings for refused in one line, and one table3 sweep giving each codebase its own runs."""
from __future__ import annotations


import pytest
from omegaconf import OmegaConf

from rmsnorm_repro.tasks.codebases import refusal
from runner_fixtures.helpers import cli, compose_cfg, main_in_process
from tiny_sizes import tiny_overrides

# (eps, eps inside the root, offset): bzhangGo/rmsnorm README.md:118-131 (Theano layer_norm) and
# rmsnorm_torch.py (RMSNorm(d, p=-1., eps=1e-8, bias=False), x / (rms + eps)); Table 2 (Nematus-TF):
# README.md:89-111, x * rsqrt(ms + 1e-5) * g
AUTHORS = {"theano": (1e-5, True, True), "pytorch": (1e-8, False, False), None: (1e-5, True, False)}


@pytest.mark.parametrize("norm", ["rmsnorm", "prmsnorm"])
@pytest.mark.parametrize("codebase", ["theano", "pytorch", None])
def test_each_codebase_runs_the_authors_norm_settings(norm, codebase):
    cfg = compose_cfg(["task=rnnsearch", f"norm={norm}", "scale=paper", *([f"codebase={codebase}"] if codebase else [])])
    assert (cfg.get("codebase") or {}).get("name") == codebase  # none chosen: no key in the run's config
    assert (cfg.norm.eps, cfg.norm.eps_inside, cfg.norm.bias) == AUTHORS[codebase]
    assert cfg.norm.p == (0.0625 if norm == "prmsnorm" else 1.0)
    assert refusal(cfg) is None


@pytest.mark.parametrize("codebase", ["theano", "pytorch"])
def test_layernorm_is_the_same_in_every_codebase(codebase):
    plain = compose_cfg(["task=rnnsearch", "norm=layernorm"]).norm
    assert compose_cfg(["task=rnnsearch", "norm=layernorm", f"codebase={codebase}"]).norm == plain


def test_a_codebase_the_task_has_no_settings_for_is_refused_in_one_line(tmp_path, monkeypatch, capsys):
    code, err = main_in_process(monkeypatch, capsys, "task=convpool", "codebase=theano", f"paths.runs_dir={tmp_path}")
    assert code == 2
    assert err == ["error: codebase=theano sets norm settings for task=rnnsearch only, not task=convpool: drop "
                   "codebase= (task=convpool runs its own settings)"], err


def test_the_table3_sweep_trains_each_codebase_in_its_own_runs(tmp_path):
    sweep = tmp_path / "sweep"
    proc = cli("-m", "experiment=table3", "norm=rmsnorm", "seed=1", *tiny_overrides("rnnsearch"),
               f"hydra.sweep.dir={sweep}", timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    jobs = {p.parent.name: OmegaConf.load(p) for p in sweep.glob("*/config.yaml")}
    assert sorted(name.split(",")[0] for name in jobs) == ["codebase=pytorch", "codebase=theano"], set(jobs)
    for name, cfg in jobs.items():
        assert (cfg.norm.eps, cfg.norm.eps_inside, cfg.norm.bias) == AUTHORS[cfg.codebase.name], name
        assert (sweep / name / "summary.json").exists()
