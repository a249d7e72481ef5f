"""The tested weights are the ones selected on validation (checkpoints/best.pt), as the authors' code
did (Nematus: best valid loss with early stopping; order embeddings: best R@K sum), or the last ones
where the original had no selection (train.select_metric=last)."""
from __future__ import annotations

import math

import pytest
import torch

from rmsnorm_repro.runner import ConfigError, checkpoint, run
from rmsnorm_repro.runner.setup import normalization, task_class
from runner_fixtures.helpers import read_metrics

# lr high enough that the valid error moves around between evaluations
NOISY = ("optim.lr=0.05", "train.steps=60", "train.eval_every=5", "train.log_every=5")


def _test_metrics_of(cfg, weights_path):
    cls = task_class(cfg)
    task = cls(cfg, normalization(cfg, cls), torch.device("cpu"))
    model = task.build_model()
    model.load_state_dict(checkpoint.load(weights_path)["model"])
    model.eval()
    with torch.no_grad():
        return task.evaluate(model, "test")


def test_the_test_set_scores_the_weights_of_the_best_validation_step(tmp_path, tiny_cfg):
    cfg = tiny_cfg(*NOISY)
    summary = run(cfg, tmp_path / "r")
    evals = {r["step"]: r["error"] for r in read_metrics(tmp_path / "r") if "error" in r}
    best_step = min(evals, key=lambda s: (evals[s], s))  # the first of equal minima
    assert summary["selected_step"] == best_step == summary["best"]["step"]
    assert summary["selection"] == "best valid error (min)"
    best = checkpoint.load(tmp_path / "r" / "checkpoints" / "best.pt")
    assert best["step"] == best_step
    test = _test_metrics_of(cfg, tmp_path / "r" / "checkpoints" / "best.pt")
    assert {k: summary["final"][k] for k in test} == test
    assert summary["final"]["valid_error"] == evals[best_step]
    if best_step != 60:  # last.pt still holds the last weights, for resuming
        assert checkpoint.load(tmp_path / "r" / "checkpoints" / "last.pt")["step"] == 60


def test_select_last_scores_the_final_weights(tmp_path, tiny_cfg):
    cfg = tiny_cfg(*NOISY, "train.select_metric=last")
    summary = run(cfg, tmp_path / "r")
    assert summary["selected_step"] == 60 and summary["selection"] == "last"
    assert not (tmp_path / "r" / "checkpoints" / "best.pt").exists()
    assert {k: summary["final"][k] for k in ("error", "accuracy")} == {
        k: v for k, v in _test_metrics_of(cfg, tmp_path / "r" / "checkpoints" / "last.pt").items() if k in ("error", "accuracy")}


def test_early_stopping_after_patience_evaluations_without_a_new_best(tmp_path, tiny_cfg):
    # "best" = the highest train-set-like loss: it never improves after the first evaluation
    args = (*NOISY, "train.select_metric=loss", "train.select_mode=max", "train.early_stop_patience=2")
    summary = run(tiny_cfg(*args), tmp_path / "r")
    evals = [r["step"] for r in read_metrics(tmp_path / "r") if "error" in r]
    losses = [r["valid_loss"] for r in read_metrics(tmp_path / "r") if "error" in r]
    first_best = evals[losses.index(max(losses))]
    assert summary["status"] == "completed" and summary["stopped_by"] == "early_stopping"
    assert summary["steps"] == evals[-1] < 60 and len(evals) - 1 - evals.index(first_best) == 2
    # finished: the same command again trains nothing
    again = run(tiny_cfg(*args), tmp_path / "r")
    assert again == summary


def test_resume_keeps_both_checkpoints_and_selects_like_one_run(tmp_path, tiny_cfg):
    straight = run(tiny_cfg(*NOISY), tmp_path / "straight")
    run(tiny_cfg(*NOISY[:1], "train.steps=30", *NOISY[2:]), tmp_path / "split")
    resumed = run(tiny_cfg(*NOISY), tmp_path / "split")
    assert resumed["selected_step"] == straight["selected_step"] and resumed["final"] == straight["final"]


def test_an_unknown_selection_metric_is_one_line(tmp_path, tiny_cfg):
    with pytest.raises(ConfigError, match="train.select_metric=bleu is not a validation metric of task=tiny"):
        run(tiny_cfg("train.select_metric=bleu"), tmp_path / "r")


def test_paper_rnnsearch_stops_where_nematus_does(compose):
    """Nematus 3655c38 nmt.py:316-330, patience 10 (nmt.py:651): bad_counter counts validations without a new
    best and training stops once bad_counter > patience. Our train.early_stop_patience counts the
    evaluations in a row without a new best that stop a run (the test above), so it must be that count."""
    history = [5.0] + [5.0 + i for i in range(1, 30)]  # the first validation is the best, none after it improves
    bad_counter, stopped_after = 0, None
    for i, loss in enumerate(history):
        if loss < min(history[:i] or [math.inf]):
            bad_counter = 0
        else:
            bad_counter += 1
            if bad_counter > 10:
                stopped_after = bad_counter
                break
    assert stopped_after == 11
    assert compose(["task=rnnsearch", "scale=paper"]).train.early_stop_patience == stopped_after
    for tier in ("mini", "small"):  # their committed runs stopped after 10
        assert compose(["task=rnnsearch", f"scale={tier}"]).train.early_stop_patience == 10
