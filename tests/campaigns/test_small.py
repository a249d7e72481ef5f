"""The small tier (issue 17): scale=small composes for RNNSearch and the Transformer only (any other task is
one line), Multi30k's raw layout is read with whichever test sets are there, a tiny run at scale=small goes
through the real runner, and `make small`'s report is written from run directories.

Everything runs on tiny files written here; the real Multi30k (data/multi30k, or any
raw folder given as DATA_ROOT) is never needed.
"""
from __future__ import annotations

import gzip
import json
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from rmsnorm_repro.campaigns import small
from rmsnorm_repro.cli_errors import one_line
from rmsnorm_repro.runner import run
from rmsnorm_repro.tasks.translation.data import load_corpus
from runner_fixtures.helpers import REPO, compose_cfg, main_in_process, read_summary, write_multi30k

# Configs ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("data", [["data=multi30k"], ["data=text", "data.root=/somewhere"]])
def test_scale_small_composes_the_real_language_recipes(data):
    t = compose_cfg(["task=transformer", "norm=rmsnorm", "scale=small", *data])
    assert t.scale.name == "small" and t.data.vocab_size == 8000 and t.train.precision == "fp32"
    m = t.task.model
    assert (m.encoder_layers, m.decoder_layers, m.d_model, m.ffn_dim, m.heads) == (3, 3, 256, 1024, 4)
    # small batches, the lr decayed to 0 over the second half: the most BLEU per CPU-minute (docs/small_study.md)
    assert (t.train.batch_tokens, t.optim.lr, t.optim.schedule.name) == (625, 1e-3, "linear_decay")
    assert t.task.model.dropout == 0.0  # learned faster in ~3 epochs (docs/small_study.md); the paper's is 0.1
    assert 0 < t.optim.schedule.warmup_steps < t.train.steps * t.optim.schedule.decay_start
    assert t.optim.betas == [0.9, 0.98]  # the paper's
    assert t.task.label_smoothing == 0.1 and t.task.model.pre_norm is False and t.task.decode.beam == 4
    r = compose_cfg(["task=rnnsearch", "norm=layernorm", "scale=small", *data])
    assert (r.task.model.emb, r.task.model.hidden, r.train.batch_size, r.optim.lr) == (256, 512, 64, 1e-3)
    assert r.train.select_metric == "loss" and r.optim.clip == 1.0 and r.task.model.dropout == 0.2
    assert r.task.model.init_std == 0.05  # the no-norm model trains (docs/small_study.md)
    for cfg in (t, r):
        # a budget in steps, never in minutes: every norm gets the same updates on any machine
        assert cfg.train.max_minutes is None and 500 <= cfg.train.steps <= 3000 and cfg.task.decode.batch_size <= 64
        # a held-out dev split chooses the weights, a few evaluations a run decode part of it
        assert cfg.data.dev_pairs == 1000 and cfg.train.steps // cfg.train.eval_every <= 10
        assert cfg.task.decode.valid_sentences <= 500


def test_multi30k_names_its_test_sets_and_takes_those_present():
    cfg = compose_cfg(["task=transformer", "scale=small", "data=multi30k"])
    assert list(cfg.data.test) == ["test_2016_flickr", "test_2017_flickr", "test_2017_mscoco"]
    assert cfg.data.valid == "val" and cfg.data.test_if_present is True
    assert compose_cfg(["task=transformer", "data=text"]).data.test_if_present is False


@pytest.mark.parametrize("task", ["reader", "retrieval", "convpool"])
def test_other_tasks_at_scale_small_are_one_clear_line(task, tmp_path, monkeypatch, capsys):
    code, err = main_in_process(monkeypatch, capsys, f"task={task}", "scale=small", f"paths.runs_dir={tmp_path}")
    assert code == 2 and len(err) == 1, err
    assert err[0] == (f"error: scale=small exists for rnnsearch and transformer only, not task={task} "
                      f"(task={task} has scale=mini, paper)")
    assert not any(tmp_path.iterdir())


# Data ---------------------------------------------------------------------------------------------
def test_raw_layout_scores_the_test_sets_it_has(tmp_path):
    root = write_multi30k(tmp_path / "m30k", {"train": 20, "val": 4, "test_2016_flickr": 3, "test_2017_mscoco": 2})
    base = {"name": "multi30k", "root": str(root), "src": "en", "tgt": "de", "train": "train", "valid": "val",
            "test": ["test_2016_flickr", "test_2017_flickr", "test_2017_mscoco"], "test_if_present": True,
            "vocab_size": 50}
    cfg = {"data": base, "paths": {"data_dir": str(tmp_path), "cache_dir": str(tmp_path / "cache")}}
    corpus = load_corpus(cfg)
    assert set(corpus.tests) == {"test_2016_flickr", "test_2017_mscoco"}, "named per split; the absent one skipped"
    assert len(corpus.tests["test_2017_mscoco"][0]) == 2 and len(corpus.valid[0]) == 4
    assert corpus.info["tests"] == "test_2016_flickr (test_2016_flickr_bleu), test_2017_mscoco (test_2017_mscoco_bleu)"
    only_val = load_corpus({**cfg, "data": {**base, "root": str(write_multi30k(tmp_path / "tv", {"train": 20, "val": 4}))}})
    assert only_val.tests == {} and only_val.info["tests"] == "none (valid only)"
    with pytest.raises(FileNotFoundError, match="test_2017_flickr"):  # data=text's default: a missing split is an error
        load_corpus({**cfg, "data": {**base, "name": "text", "test_if_present": False}})
    one = load_corpus({**cfg, "data": {**base, "name": "text", "test": "test_2016_flickr", "test_if_present": False}})
    assert set(one.tests) == {"test"}, "one test split is still test_bleu"


# A tiny run through the real runner ----------------------------------------------------------------
TINY = {"transformer": ["task.model.d_model=16", "task.model.ffn_dim=32", "task.model.heads=2",
                        "task.model.encoder_layers=1", "task.model.decoder_layers=1", "train.batch_tokens=200"],
        "rnnsearch": ["task.model.emb=16", "task.model.hidden=16", "train.batch_size=16"]}


@pytest.mark.parametrize("task", ["transformer", "rnnsearch"])
def test_a_tiny_run_at_scale_small_on_raw_multi30k_files(task, tmp_path):
    root = write_multi30k(tmp_path / "multi30k", {"train": 120, "val": 8})
    cfg = compose_cfg([f"task={task}", "norm=rmsnorm", "scale=small", "data=text", f"data.root={root}",
                       "data.vocab_size=60", "data.dev_pairs=20", "train.steps=4", "train.eval_every=2", "train.checkpoint_every=2",
                       "train.log_every=1", f"paths.runs_dir={tmp_path / 'runs'}", f"paths.cache_dir={tmp_path / 'cache'}",
                       *TINY[task]])
    assert cfg.train.max_minutes == compose_cfg([f"task={task}", "scale=small"]).train.max_minutes
    summary = run(cfg, tmp_path / "run")
    assert summary["status"] == "completed" and summary["steps"] == 4 and summary["scale"] == "small"
    written = read_summary(tmp_path / "run")
    assert set(k for k in written["final"] if k.endswith("_bleu")) == {"valid_beam_bleu", "valid_bleu"}
    assert written["data_info"]["tests"] == "none (valid only)" and "tok:13a" in written["bleu_signature"]
    assert written["data_info"]["selection"] == "dev: the last 20 training pairs, held out (train keeps 100)"
    assert len((tmp_path / "run" / "outputs" / "valid.txt").read_text().splitlines()) == 8  # for the paired bootstrap
    assert written["env"]["precision"] == "fp32" and written["s_per_1k_steps_ci95"] is not None


# make small and its report --------------------------------------------------------------------------
def test_sweep_command_runs_the_four_norms_of_one_task(tmp_path):
    setup = small.Setup(tmp_path / "m30k", "1,2", jobs=2, threads=1, precision="fp32", max_minutes=None)
    cmd = small.sweep_command("transformer", tmp_path / "runs", setup)
    assert cmd[1:5] == ["-m", "rmsnorm_repro.train", "-m", "task=transformer"]
    assert {"norm=none,layernorm,rmsnorm,prmsnorm", "seed=1,2", "scale=small", "data=multi30k",
            f"data.root={(tmp_path / 'm30k').resolve()}", "train.precision=fp32", "launcher=joblib",
            "hydra.launcher.n_jobs=2", "hydra.sweep.subdir=${norm.name}-p${norm.p}-s${seed}"} <= set(cmd)
    assert not any(a.startswith("train.max_minutes") for a in cmd), "the scale's budget unless told"
    hub = small.sweep_command("rnnsearch", tmp_path, small.Setup(None, "1", 1, 2, "bf16", 3.0))
    assert "launcher=basic" in hub and "train.max_minutes=3" in hub and not any(a.startswith("data.root") for a in hub)


@pytest.mark.skipif(shutil.which("make") is None, reason="no make")
def test_make_small_chooses_precision_by_amx_and_passes_the_settings():
    makefile = (REPO / "Makefile").read_text()
    assert "PRECISION ?= $(shell lscpu 2>/dev/null | grep -q amx_bf16 && echo bf16 || echo fp32)" in makefile
    out = subprocess.run(["make", "--no-print-directory", "-n", "small", "SEEDS=1,2", "DATA_ROOT=/x/m30k", "SMALL_JOBS=1", "PRECISION=bf16"],
                         cwd=REPO, capture_output=True, text=True, timeout=30).stdout
    line = " ".join(out.replace("\\\n", " ").split())
    # no SMALL_SEEDS: no --seeds, so campaigns/small.py's DEFAULT_SEEDS (1,2,3) decides, stated once there
    assert line.endswith("-m rmsnorm_repro.campaigns.small --out results/small --data-root /x/m30k --jobs 1 "
                         "--precision bf16") and small.DEFAULT_SEEDS == "1,2,3"
    out = subprocess.run(["make", "--no-print-directory", "-n", "small", "SMALL_SEEDS=1,2", "PRECISION=fp32"], cwd=REPO, capture_output=True,
                         text=True, timeout=30).stdout
    assert "--precision fp32 --seeds 1,2" in " ".join(out.replace("\\\n", " ").split())


def fake_run(root: Path, task: str, norm: str, seed: int, bleu: dict[str, float] | None, ms: float,
             status: str = "completed", data_info: dict | None = None, p: float | None = None) -> None:
    """A run directory as the runner writes it (summary.json, config.yaml, metrics.jsonl); pRMSNorm at its
    recipe's p unless p is given."""
    p = p if p is not None else small.recipe_p(task) if norm == "prmsnorm" else 1.0
    path = root / task / f"{norm}-p{p}-s{seed}"
    path.mkdir(parents=True)
    model = ({"encoder_layers": 3, "decoder_layers": 3, "d_model": 256, "ffn_dim": 1024, "heads": 4, "dropout": 0.1}
             if task == "transformer" else {"emb": 256, "hidden": 512, "dropout": 0.2})
    config = {"task": {"name": task, "model": model, "decode": {"beam": 4}}, "norm": {"name": norm, "p": p},
              "seed": seed, "data": {"name": "multi30k", "vocab_size": 8000}, "scale": {"name": "small"},
              "train": {"steps": 300, "precision": "fp32", "batch_tokens": 2500, "batch_size": 64},
              "optim": {"lr": 0.001, "schedule": {"name": "linear_decay", "warmup_steps": 200, "decay_start": 0.5}
                        if task == "transformer" else {"name": "constant", "warmup_steps": 0}}}
    (path / "config.yaml").write_text(yaml.safe_dump(config))
    steps = 300 if status == "completed" else 120
    lines = [{"step": s, "wall_s": s * ms / 1000 + 10, "loss": 6.0 - s / 100, "step_ms": ms,
              **({"bleu": s / 10 * (1 if bleu else 0.01)} if s % 100 == 0 else {})} for s in range(25, steps + 1, 25)]
    if status == "diverged":
        lines[-1]["loss"] = float("nan")
    (path / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    final = {**(bleu or {}), "valid_bleu": 20.0, "valid_loss": 2.5} if status == "completed" else {}
    summary = {"task": task, "norm": norm, "p": p, "seed": seed, "status": status, "steps": steps,
               "s_per_1k_steps": ms, "s_per_1k_steps_ci95": [ms * 0.97, ms * 1.03], "step_ms_median": ms,
               "final": final, "best": {"bleu": 25.0, "loss": 2.4, "step": 300} if status == "completed" else {},
               "wall_s": lines[-1]["wall_s"] + 150.0,  # 2.5 minutes of final decoding
               "env": {"torch": "2.x", "device": "cpu", "device_name": "AMD EPYC", "threads": 1, "precision": "fp32"},
               "bleu_signature": "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0",
               "data_info": {"data": "text:/m30k", "valid": "val", "tests": "none (valid only)", **(data_info or {})}}
    (path / "summary.json").write_text(json.dumps(summary))


def test_small_report_from_run_directories(tmp_path):
    out = tmp_path / "small"
    runs = out / "runs"
    for task, scores in (("rnnsearch", {"none": 28.0, "layernorm": 31.0, "rmsnorm": 31.4, "prmsnorm": 30.8}),
                         ("transformer", {"none": None, "layernorm": 33.0, "rmsnorm": 32.6, "prmsnorm": 33.2})):
        for norm, score in scores.items():
            ms = {"none": 900.0, "layernorm": 1000.0, "rmsnorm": 950.0, "prmsnorm": 960.0}[norm]
            if score is None:
                fake_run(runs, task, norm, 1, None, ms, status="diverged")
            else:
                fake_run(runs, task, norm, 1, {"valid_beam_bleu": score}, ms)
    small.save_timings(out, {"transformer": (0, 2400.0), "rnnsearch": (0, 2400.0)})
    assert small.main(["--out", str(out), "--report-only"]) == 0
    text = (out / "REPORT.md").read_text()
    assert "Machine: " in text and "device_name=AMD EPYC" in text and "precision=fp32" in text
    assert "; trained on AMD EPYC.  " in text  # each model's recipe line: its runs' minutes depend on the CPU
    # and the lr's schedule, which the small recipes change from the paper's
    assert "2500-token batches, peak lr 0.001 after 200 warm-up steps, linear to 0 from step 150, dropout" in text
    assert "batch 64 sentences, lr 0.001, constant, dropout" in text
    assert "**the split the runs also selected their weights on**" in text and "nrefs:1|case:mixed" in text
    assert "Data: text:.../m30k." in text and "text:/m30k" not in text  # an older summary's absolute path, not shown
    assert "| valid BLEU (beam) |" in text and "| rmsnorm | 1 | 300 | - | 31.4 |" in text
    assert "| none | 0 of 1 (1 diverged) | 120 | - | fails to train |" in text
    assert "| Table 4: the Transformer without normalization fails to train | **holds** | all 1 Baseline runs diverged |" in text
    # one seed a side: no interval, so no verdict (the same rule as the mini report's)
    # scored on valid_beam_bleu, the claim says valid, not test
    assert ("| rnnsearch: RMSNorm's valid BLEU matches LayerNorm's (within 1 BLEU) | **cannot tell** | LayerNorm 31.00 "
            "(n=1), RMSNorm 31.40 (n=1) (`valid_beam_bleu`); difference +0.40; 1 seed(s) on one side: an interval "
            "needs 2+ seeds a side") in text
    assert "| transformer: pRMSNorm's valid BLEU matches LayerNorm's (within 1 BLEU) | **cannot tell** |" in text
    assert "## Every run" in text
    assert "| rnnsearch | prmsnorm p=0.125 | 1 | completed | 300 | - | - | 25.00 | 30.80 | 5.0 + 2.5 |" in text
    assert "transformer: rmsnorm is faster per step than LayerNorm" in text and "reader" not in text
    assert "5.0 + 2.5" in text  # minutes of training + final evaluation
    assert (out / "figures" / "transformer.png").exists() and "![rnnsearch](figures/rnnsearch.png)" in text
    assert small.main(["--out", str(out), "--report-only"]) == 0 and (out / "REPORT.md").read_text() == text
    assert "The runs trained one at a time: their own clocks are comparable." in text and "s / 1k steps [95%]" in text
    # `make small`'s sweeps train 2 runs at a time: their own clocks are not compared, the side-by-side times stand in
    (runs / "rnnsearch" / "multirun.yaml").write_text("hydra:\n  launcher:\n    n_jobs: 2\n")
    assert small.main(["--out", str(out), "--report-only"]) == 0
    shared = (out / "REPORT.md").read_text()
    assert "**The runs shared the machine: 2 at a time**" in shared and "s / 1k steps [95%]" not in shared
    row = next(line for line in shared.splitlines() if line.startswith("| rmsnorm | 1 | 300 | - | 31.4 |"))
    assert row.count("|") == 8 and "## Step times side by side" in shared  # 7 cells: no step time of its own
    assert "| Fig. 1 (per second): LayerNorm's lead over the Baseline is smaller per second than per step | " \
           "**not judged at small** | not judged at small: the runs shared the machine (2 at a time)" in shared


def test_small_report_with_test_sets_and_seeds(tmp_path):
    out = tmp_path / "small"
    for seed, shift in ((1, 0.0), (2, 0.6)):
        for norm, score in (("layernorm", 34.0), ("rmsnorm", 34.2), ("prmsnorm", 29.0)):
            fake_run(out / "runs", "transformer", norm, seed,
                     {"valid_beam_bleu": score + 1, "test_2016_flickr_bleu": score + shift, "test_2017_mscoco_bleu": score - 5},
                     1000.0, data_info={"selection": "dev: the last 1000 training pairs, held out (train keeps 28000)",
                                        "batches_per_epoch": 120})
    assert small.main(["--out", str(out), "--report-only"]) == 0
    text = (out / "REPORT.md").read_text()
    assert "valid (the whole split), `test_2016_flickr`, `test_2017_mscoco`" in text
    assert "Weights chosen (best-model selection, early stopping, the curves) on dev: the last 1000 training pairs" in text
    assert ": valid and the tests are scored only by weights they did not choose" in text
    assert "| test_2016_flickr BLEU (beam) | test_2017_mscoco BLEU (beam) |" in text
    assert "| layernorm | 2 | 300 | 2.5 |" in text  # epochs: 300 steps / 120 batches an epoch
    # RMSNorm 34.5 +- 0.42 vs LayerNorm 34.3 +- 0.42 (n=2): 90% interval of +0.2 is [-1.04, +1.44]: undecided;
    # pRMSNorm 5 BLEU below with the same spread: outside the margin
    assert ("`test_2016_flickr_bleu`); difference +0.20, 90% interval [-1.04, +1.44] vs +-1 BLEU: across an end; power "
            "at 2 seeds a side") in text
    assert "| transformer: pRMSNorm's test BLEU matches LayerNorm's (within 1 BLEU) | **does not hold** |" in text
    assert "No runs: the `rnnsearch` sweep produced none" in text


def test_untrained_models_match_nothing(tmp_path):
    """Two runs that learned nothing (BLEU < 1) do not "match": the claim cannot tell."""
    for norm in ("none", "layernorm", "rmsnorm"):
        fake_run(tmp_path / "runs", "transformer", norm, 1, {"valid_beam_bleu": 0.2}, 1000.0)
    claims = {c.claim: c for c in small.judge(small.runs_of(tmp_path / "runs", "transformer"))}
    assert claims["transformer: RMSNorm's valid BLEU matches LayerNorm's (within 1 BLEU)"].verdict == "cannot tell"
    assert claims["Table 4: the Transformer without normalization fails to train"].verdict == "cannot tell"


def test_a_sweep_over_tasks_at_scale_small_says_why_it_fails(monkeypatch):
    """Hydra composes a multirun with the default task (convpool) first: the line says so."""
    monkeypatch.setattr(sys, "argv", ["rmsnorm-train", "-m", "task=rnnsearch,transformer", "scale=small"])
    line = one_line("In 'train': Could not find 'task_scale/convpool/small'\n\nConfig search path:\n\tprovider=main")
    assert line.startswith("scale=small exists for rnnsearch and transformer only, not task=convpool")
    assert line.endswith("is composed with the default task first: run one sweep per task")


def test_small_report_without_runs_says_so(tmp_path, capsys):
    assert small.main(["--out", str(tmp_path / "none"), "--report-only"]) == 1
    assert "no runs under" in capsys.readouterr().err


def test_timing_one_task_keeps_the_other_tasks_side_by_side_times(tmp_path, monkeypatch):
    """`make small ARGS="--only transformer"` times the Transformer again; the RNNSearch's earlier side-by-side
    times, and how they were measured, stay for its speed claims."""
    from rmsnorm_repro.bench import steps
    from rmsnorm_repro.campaigns import demo

    from rmsnorm_repro.report.paired import Measured

    (tmp_path / "speed.json").write_text(json.dumps({"how": " (earlier)", "times_ms": {
        "rnnsearch": {"layernorm": [2.0], "rmsnorm": [1.0]}, "transformer": {"layernorm": [9.0], "rmsnorm": [9.0]}}}))
    assert {t: m.how for t, m in demo.load_speed(tmp_path).items()} == {"rnnsearch": " (earlier)", "transformer": " (earlier)"}
    seen = {}

    def timed(tasks, norms, scale, overrides, how=""):
        seen["how"] = how
        return {t: Measured({"layernorm": [4.0, 4.0], "rmsnorm": [3.0, 3.0]}, 1, f" (now, {how})") for t in tasks}
    monkeypatch.setattr(steps, "side_by_side", timed)
    demo.measure_speed(tmp_path, ["transformer"], "small", [], threads=1)
    measured = demo.load_speed(tmp_path)
    assert measured["rnnsearch"] == Measured({"layernorm": [2.0], "rmsnorm": [1.0]}, None, " (earlier)")  # version 1: kept
    assert measured["transformer"].times_ms == {"layernorm": [4.0, 4.0], "rmsnorm": [3.0, 3.0]}
    assert measured["transformer"].steps_per_round == 1 and seen["how"].startswith("1 thread(s), ")


def test_make_small_says_its_runs_place_and_time_before_it_starts(tmp_path: Path, monkeypatch, capsys):
    ran, timed = [], []
    monkeypatch.setattr(small, "run_logged", lambda command, log, threads: ran.append(command) or (0, 2.0))
    monkeypatch.setattr(small, "write_report", lambda out, timings, damaged: out / "REPORT.md")
    monkeypatch.setattr(small, "measure_speed", lambda *args: timed.append(args))
    monkeypatch.setattr(small, "REFERENCE_RUNS", tmp_path / "no-committed-runs")
    (tmp_path / "small" / "runs" / "rnnsearch").mkdir(parents=True)  # as the sweep would leave it
    args = ["--out", str(tmp_path / "small"), "--seeds", "1,2", "--jobs", "2", "--threads", "1", "--precision", "fp32"]
    assert small.main(args) == 0
    out = capsys.readouterr().out
    # 2 models x 4 norms x 2 seeds; each model's 8 runs two at a time: 4 rounds of RUN_MINUTES
    expected = 2 * 4 * small.RUN_MINUTES
    assert (f"small: 16 runs (rnnsearch and transformer x none, layernorm, rmsnorm, prmsnorm x seeds 1,2) into "
            f"{tmp_path / 'small' / 'runs'}, 2 at a time with 1 thread(s) each, fp32, on ") in out
    assert (f"; about {expected:.0f} minutes: rnnsearch {small.RUN_MINUTES:.1f} min a run (no run timed yet: the "
            "recipe's estimate), 8 to train") in out
    assert len(ran) == 2 and len(timed) == 1 and timed[0][2] == "small"  # then the side-by-side step times

    # two runs of today's recipe finished in 10 minutes each, one of an earlier recipe (other steps) in 30: it is
    # finished, but times nothing; rnnsearch's plan is the 5 left, 3 rounds of 10 minutes
    recipe = small.recipe_values("rnnsearch")
    for norm, seed, steps, wall_s in (("none", 1, recipe["train.steps"], 600.0), ("layernorm", 1, recipe["train.steps"], 600.0),
                                      ("none", 2, 2 * recipe["train.steps"], 1800.0)):
        run = tmp_path / "small" / "runs" / "rnnsearch" / f"{norm}-p1.0-s{seed}"
        run.mkdir()
        config = OmegaConf.create({"task": {"name": "rnnsearch"}, "norm": {"name": norm, "p": 1.0}, "seed": seed})
        for key, value in {**recipe, "train.steps": steps}.items():
            OmegaConf.update(config, key, value)
        (run / "config.yaml").write_text(OmegaConf.to_yaml(config))
        (run / "summary.json").write_text(json.dumps({"task": "rnnsearch", "norm": norm, "p": 1.0, "seed": seed,
                                                      "status": "completed", "steps": steps, "final": {},
                                                      "wall_s": wall_s, "env": {"device_name": "AMD EPYC"}}))
    assert small.main(args) == 0
    out = capsys.readouterr().out
    assert (f"about {30 + 4 * small.RUN_MINUTES:.0f} minutes: rnnsearch 10.0 min a run (mean of 2 earlier runs here, "
            "AMD EPYC), 5 to train") in out

    # every run of rnnsearch finished (records kept without their weights, as results/small/runs): its sweep
    # is not started at all, so nothing a sweep job could refuse or retrain (another precision) is asked of it
    for norm in small.NORMS:
        p = small.recipe_p("rnnsearch") if norm == "prmsnorm" else 1.0  # pRMSNorm at the recipe's p
        for seed in (1, 2):
            run = tmp_path / "small" / "runs" / "rnnsearch" / f"{norm}-p{p}-s{seed}"
            run.mkdir(exist_ok=True)
            (run / "config.yaml").write_text(
                f"task: {{name: rnnsearch}}\nnorm: {{name: {norm}, p: {p}}}\nseed: {seed}\n")
            (run / "summary.json").write_text(json.dumps({"task": "rnnsearch", "norm": norm, "p": p, "seed": seed,
                                                          "status": "completed", "steps": 100, "final": {},
                                                          "wall_s": 600.0}))
    ran.clear()
    assert small.main(args + ["--only", "rnnsearch"]) == 0
    assert ran == [] and "every run under" in capsys.readouterr().out


def test_the_report_states_the_seeds_present_and_missing_and_leaves_other_ps_unjudged(tmp_path):
    """Seeds 1-3 are make small's default: a report from two seeds says which runs are missing and what they
    cost, and pRMSNorm runs at a p other than the recipe's (k below the paper's) are shown, never judged."""
    out = tmp_path / "small"
    for seed in (1, 2):
        for norm in ("none", "layernorm", "rmsnorm"):
            fake_run(out / "runs", "transformer", norm, seed, {"valid_beam_bleu": 30.0 + seed}, 600.0)
        fake_run(out / "runs", "transformer", "prmsnorm", seed, {"valid_beam_bleu": 20.0}, 600.0, p=0.0625)
    assert small.main(["--out", str(out), "--report-only"]) == 0
    text = (out / "REPORT.md").read_text()
    assert small.DEFAULT_SEEDS == "1,2,3" and "Seeds 1,2,3 a model" in text
    assert ("- transformer: seeds present: none 1,2; layernorm 1,2; rmsnorm 1,2; prmsnorm p=0.125 none. **Missing: 6 "
            "runs** (none s3, layernorm s3, rmsnorm s3, prmsnorm s1, prmsnorm s2, prmsnorm s3)") in text
    assert "- rnnsearch: seeds present: none none; layernorm none" in text and "**Missing: 12 runs**" in text
    assert "**Not this recipe:** transformer pRMSNorm p=0.0625 (2 runs): the recipe's p is 0.125" in text
    assert "| transformer | prmsnorm p=0.0625 | 1 | completed (not this recipe: p) |" in text
    claims = [line for line in text.splitlines() if line.startswith("| transformer: pRMSNorm's")]
    assert claims and all("p=0.0625" not in line for line in claims)  # judged on no run of another p
    assert small.finished_runs(out / "runs" / "transformer", "1,2,3") == 6  # the p=6.25% runs are not this sweep's


def test_the_figure_3_line_prices_and_names_the_runs_it_would_train(tmp_path):
    runs = [small.Run(tmp_path, {"task": "rnnsearch", "norm": "layernorm", "seed": 1, "status": "completed",
                                 "steps": 1500, "final": {"valid_beam_bleu": 30.0}, "wall_s": 1800.0})]
    tail = small.seeds_lines(runs, "1,2")[-1]
    assert "4 more runs, about 2.0 CPU-hours" in tail  # p = 0.25 and 1 (0.125 is the recipe's), 2 seeds, 30 min
    assert "norm.p=0.25,1 seed=1,2 scale=small" in tail


def test_the_small_recipes_give_prmsnorm_the_papers_k():
    from rmsnorm_repro.norms.formulas import partial_k

    assert small.recipe_p("rnnsearch") == small.recipe_p("transformer") == 0.125
    assert partial_k(512, small.recipe_p("rnnsearch")) == partial_k(1024, 0.0625) == 64
    assert partial_k(256, small.recipe_p("transformer")) == partial_k(512, 0.0625) == 32
