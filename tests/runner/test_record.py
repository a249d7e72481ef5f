"""The run record (rmsnorm_repro/record.py) as the runner keeps it: what a resume may change, whose
checkpoint it loads, an evaluation a signal cut short, and the summary's version.

Each case failed before record.py existed (the run-record cases listed in README, "Runs, resume and sweeps").
"""
from __future__ import annotations

import json
import logging
import re
import shutil

import pytest
import yaml

from rmsnorm_repro import record
from rmsnorm_repro.runner import ConfigError, checkpoint, run
from runner_fixtures import tiny_task
from runner_fixtures.helpers import read_metrics, read_summary

TIMING = ("wall_s", "step_ms", "examples_per_s")


def _numbers(run_dir):
    """metrics.jsonl without its clock readings: what must not change under a resume."""
    return [{k: v for k, v in line.items() if k not in TIMING} for line in read_metrics(run_dir)]


def test_an_evaluation_cut_short_is_redone_on_resume_and_the_run_equals_an_uninterrupted_one(
        tmp_path, tiny_cfg, monkeypatch):
    args = ("train.steps=40", "train.eval_every=10", "train.log_every=5")
    reference = run(tiny_cfg(*args), tmp_path / "reference")
    monkeypatch.setattr(tiny_task, "SIGTERM_IN_EVAL", "valid")  # the first validation, at step 10
    stopped = run(tiny_cfg(*args), tmp_path / "r")
    assert stopped["status"] == "interrupted" and stopped["steps"] == 10
    resumed = run(tiny_cfg(*args), tmp_path / "r")
    assert resumed["status"] == "completed"
    assert _numbers(tmp_path / "r") == _numbers(tmp_path / "reference")  # the step-10 evaluation is there
    for key in ("selected_step", "final", "best"):
        assert resumed[key] == reference[key], key


def test_a_checkpoint_of_another_run_is_refused_naming_both(tmp_path, tiny_cfg):
    run(tiny_cfg("norm=layernorm", "train.steps=20"), tmp_path / "ln")
    run(tiny_cfg("norm=rmsnorm", "train.steps=10"), tmp_path / "rms")
    for name in ("last.pt", "best.pt"):
        shutil.copy(tmp_path / "ln" / "checkpoints" / name, tmp_path / "rms" / "checkpoints" / name)
    before = (tmp_path / "rms" / "metrics.jsonl").read_bytes()
    with pytest.raises(ConfigError) as e:
        run(tiny_cfg("norm=rmsnorm", "train.steps=30"), tmp_path / "rms")
    message = str(e.value)
    assert "\n" not in message and "belongs to another run" in message
    assert "tiny layernorm p=1 seed 1" in message and "tiny rmsnorm p=1 seed 1" in message
    assert (tmp_path / "rms" / "metrics.jsonl").read_bytes() == before  # nothing trained on LayerNorm's weights
    # best.pt is checked the same way when the test loads it
    rms_config = yaml.safe_load((tmp_path / "rms" / "config.yaml").read_text())
    with pytest.raises(ConfigError, match="belongs to another run"):
        checkpoint.load(tmp_path / "rms" / "checkpoints" / "best.pt", rms_config)


def test_every_checkpoint_carries_its_run(tmp_path, tiny_cfg):
    run(tiny_cfg("norm=rmsnorm", "seed=3", "train.steps=20"), tmp_path / "r")
    config = yaml.safe_load((tmp_path / "r" / "config.yaml").read_text())
    for name in ("last.pt", "best.pt"):
        saved = checkpoint.load(tmp_path / "r" / "checkpoints" / name)
        assert saved["identity"] == {"task": "tiny", "norm": "rmsnorm", "p": 1.0, "seed": 3, "data": "synthetic",
                                     "scale": "mini"}
        assert saved["fingerprint"] == record.fingerprint(config) and saved["record_version"] == record.RECORD_VERSION


def test_harmless_changes_resume_with_one_log_line(tmp_path, tiny_cfg, caplog):
    run(tiny_cfg("train.steps=20"), tmp_path / "r")
    # a key this version added since the run started: the saved config lacks it
    saved = yaml.safe_load((tmp_path / "r" / "config.yaml").read_text())
    del saved["train"]["compile"]
    (tmp_path / "r" / "config.yaml").write_text(yaml.safe_dump(saved))
    with caplog.at_level(logging.INFO, logger="rmsnorm_repro.train"):
        resumed = run(tiny_cfg("train.steps=30", "device=cpu", f"paths.cache_dir={tmp_path / 'elsewhere'}",
                               "allocator=default"), tmp_path / "r")
    assert resumed["status"] == "completed" and resumed["steps"] == 30
    [line] = [r.getMessage() for r in caplog.records if "resuming with" in r.getMessage()]
    for change in ("train.steps: 20 -> 30", "device: 'auto' -> 'cpu'", "paths.cache_dir", "allocator",
                   "train.compile: '<absent>' -> False (a key new in this version)"):
        assert change in line, change


def test_a_change_to_what_is_trained_is_refused_without_advising_to_delete(tmp_path, tiny_cfg):
    run(tiny_cfg("train.steps=10"), tmp_path / "r")
    with pytest.raises(ConfigError) as e:
        run(tiny_cfg("train.steps=10", "task.hidden=32"), tmp_path / "r")
    message = str(e.value)
    assert "task.hidden: 16 -> 32" in message and "hydra.run.dir=<new folder>" in message
    assert not re.search(r"\b(delete|remove|rm)\b", message)


def test_a_corrected_select_metric_selects_again_from_the_evaluations(tmp_path, tiny_cfg):
    # one evaluation, at the last step: under any rule the best weights are the last ones
    first = run(tiny_cfg("train.steps=20", "train.eval_every=20", "train.select_metric=loss"), tmp_path / "r")
    assert first["selection"] == "best valid loss (min)"
    again = run(tiny_cfg("train.steps=20", "train.eval_every=20", "train.select_metric=error"), tmp_path / "r")
    assert again["status"] == "completed" and again["selection"] == "best valid error (min)"
    assert again["selected_step"] == 20 and again["final"]["error"] == first["final"]["error"]


def test_a_select_metric_whose_best_weights_were_not_kept_is_refused_in_one_line(tmp_path, tiny_cfg):
    # select_mode=max on the error keeps the worst evaluation's weights; the corrected min wants the
    # best one, which is neither that step nor the last, or it is one of them: both are checked
    args = ("train.steps=40", "train.eval_every=5", "train.select_metric=error")
    run(tiny_cfg(*args, "train.select_mode=max"), tmp_path / "r")
    evals = [(m["step"], m["error"]) for m in read_metrics(tmp_path / "r") if "error" in m]
    kept = {checkpoint.load(tmp_path / "r" / "checkpoints" / "best.pt")["step"], 40}
    wanted = min(evals, key=lambda e: (e[1], e[0]))[0]  # the first of the lowest (ties keep the earlier)
    if wanted in kept:
        assert run(tiny_cfg(*args, "train.select_mode=min"), tmp_path / "r")["selected_step"] == wanted
    else:
        with pytest.raises(ConfigError, match=f"step {wanted}, which .* did not keep.*separate run"):
            run(tiny_cfg(*args, "train.select_mode=min"), tmp_path / "r")


def test_summaries_carry_the_record_version_and_a_newer_one_is_one_line(tmp_path, tiny_cfg):
    summary = run(tiny_cfg("train.steps=5"), tmp_path / "r")
    assert read_summary(tmp_path / "r")["record_version"] == record.RECORD_VERSION == summary["record_version"]
    old = {k: v for k, v in summary.items() if k != "record_version"}  # version 1 had no version key
    assert record.check_summary(old, "old/summary.json") == old
    with pytest.raises(record.RecordError, match=r"^new/summary.json was written by a newer rmsnorm_repro"):
        record.check_summary({**summary, "record_version": 99}, "new/summary.json")


def test_the_report_reads_a_newer_summary_as_one_line(tmp_path, tiny_cfg):
    from rmsnorm_repro.report.aggregate import load_runs

    run(tiny_cfg("train.steps=5"), tmp_path / "r")
    path = tmp_path / "r" / "summary.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "record_version": 99}))
    with pytest.raises(ValueError, match="newer rmsnorm_repro"):
        load_runs(tmp_path)


@pytest.mark.parametrize(("name", "goal"), [("valid_bleu", "max"), ("error", "min"), ("valid/loss", "min"),
                                            ("caption_r1", "max"), ("medr", "min"), ("train_error", "min"),
                                            ("valid/image_meanr_optimistic", "min"), ("rsum_optimistic", "max")])
def test_metric_goal(name, goal):
    assert record.metric_goal(name) == goal


def test_changes_sort_keys_by_what_they_do():
    saved = {"seed": 1, "device": "auto", "train": {"steps": 10, "batch_size": 8, "select_metric": None},
             "task": {"decode": {"beam": 4}}, "paths": {"cache_dir": "a"}, "old_key": 1}
    new = {"seed": 2, "device": "cpu", "train": {"steps": 20, "batch_size": 8, "select_metric": "loss"},
           "task": {"decode": {"beam": 12}}, "paths": {"cache_dir": "b"}, "new_key": 2}
    diff = record.changes(saved, new)
    assert diff.refused == ["seed: 1 -> 2"]
    assert diff.budget == ["train.steps: 10 -> 20"]
    assert diff.eval_only == ["task.decode.beam: 4 -> 12"] and diff.selection == ["train.select_metric: None -> 'loss'"]
    assert {line.split(":")[0] for line in diff.harmless} == {"device", "paths.cache_dir", "old_key", "new_key"}


# The readers every part of the suite reads a run through -------------------------------------------
def test_read_summary_is_strict_for_reports_and_lenient_for_a_resume(tmp_path):
    path = tmp_path / "summary.json"
    for damaged in (b'{"status": "comp', b"[1, 2]", b'{"final": 3}', b'{"record_version": "2"}', b'{"a": "\xff"}'):
        path.write_bytes(damaged)
        with pytest.raises(record.RecordError, match=re.escape(str(path))):
            record.read_summary(path)
        assert record.read_summary(path, strict=False) == {}
    with pytest.raises(record.RecordError, match="cannot be read"):
        record.read_summary(tmp_path / "absent.json")
    assert record.read_summary(tmp_path / "absent.json", strict=False) == {}


def test_a_string_record_version_is_not_read_as_newer(tmp_path):
    path = tmp_path / "summary.json"
    path.write_text('{"record_version": "2"}')
    with pytest.raises(record.RecordError, match="not a version number") as err:
        record.read_summary(path)
    assert "newer" not in str(err.value)


def test_read_metrics_skips_a_line_cut_off_by_a_kill_and_names_a_bad_byte(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1, "loss": 2.0}\n[3]\n{"step": 2, "loss": 1.5}\n{"step": 3, "lo')
    assert [r["step"] for r in record.read_metrics(path)] == [1, 2]
    path.write_bytes(b'{"step": 1}\n{"step": 2, "x": "\xff"}\n')
    with pytest.raises(record.RecordError, match=r"metrics.jsonl: line 2 is not valid UTF-8 \(byte 0xff at column 19\)"):
        record.read_metrics(path)
    assert record.read_metrics(tmp_path / "none.jsonl") == []


def test_read_config_names_the_line_of_bad_yaml(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("seed: 1\nnorm: [\n")
    with pytest.raises(record.RecordError, match=r"config.yaml is not valid YAML at line \d; delete that run"):
        record.read_config(path)
    assert record.read_config(tmp_path / "none.yaml") == {}


def test_what_changes_no_number_may_change_on_resume():
    # issue 54: one list (record.HARMLESS) for the resume and the groups; how often a run logs or checkpoints,
    # where its data lies and the divergence guard were refused as "would change what is trained"
    saved = {"train": {"log_every": 10, "checkpoint_every": 25, "max_loss": None, "steps": 100},
             "data": {"name": "multi30k", "root": "data/m30k"}}
    new = {"train": {"log_every": 1, "checkpoint_every": 5, "max_loss": 1e6, "steps": 100},
           "data": {"name": "multi30k", "root": "/mnt/m30k"}}
    found = record.changes(saved, new)
    assert not found.refused and len(found.harmless) == 4
    assert record.changes(saved, {**new, "data": {"name": "wmt14", "root": "/mnt/m30k"}}).refused == [
        "data.name: 'multi30k' -> 'wmt14'"]


def test_a_sealed_config_reads_whole_and_a_changed_one_is_refused(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text(record.sealed("seed: 1\noptim:\n  lr: 0.001\n"))
    assert record.read_config(path, seal_required=True) == {"seed": 1, "optim": {"lr": 0.001}}
    path.write_text(path.read_text().replace("0.001", "0.002"))
    with pytest.raises(record.RecordError, match="cut short or edited"):
        record.read_config(path)
    path.write_text("seed: 1\noptim:\n  lr: 0.0")  # an older run's file has no seal: read as it is
    assert record.read_config(path) == {"seed": 1, "optim": {"lr": 0.0}}
    with pytest.raises(record.RecordError, match="cut short"):
        record.read_config(path, seal_required=True)
