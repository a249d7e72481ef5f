"""What a run shows and where it goes: the end-of-run block, eval lines (on a terminal too, in the
run's log file, with the loss they show named), `--help`, and the single run's directory name.
"""
from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios
import threading
from pathlib import Path

import pytest
from hydra.core.global_hydra import GlobalHydra

from rmsnorm_repro.paths import configs_dir
from rmsnorm_repro.record import run_suffix
from rmsnorm_repro.runner.console import end_of_run_block, eval_line, headline_metrics
from rmsnorm_repro.train import main
from runner_fixtures.helpers import REPO, cli_args, cli_env, compose_cfg

TRANSLATION = {"task": "transformer", "norm": "rmsnorm", "p": 1.0, "seed": 1, "status": "completed", "steps": 400,
               "step_ms_median": 369.04, "step_ms_mean": 694.2, "s_per_1k_steps": 369.2,
               "s_per_1k_steps_ci95": [350.12, 388.3], "tokens_per_s": 14123.3, "wall_s": 121.6,
               "final": {"valid_beam_bleu": 37.03, "test14_bleu": 35.98, "test14_sentences": 3003.0,
                         "test17_bleu": 34.1, "valid_bleu": 31.8, "valid_loss": 0.59, "table5_mean_1": 0.1},
               "best": {"bleu": 31.8, "step": 400}, "selected_step": 400, "selection": "best valid bleu"}


# End of a run ------------------------------------------------------------------------------------
def test_end_of_run_block_has_status_headline_selected_step_speed_and_run_dir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run_dir = tmp_path / "results" / "runs" / "transformer" / "synthetic-mini" / "rmsnorm-p1.0-s1"
    lines = end_of_run_block(TRANSLATION, run_dir).splitlines()
    assert lines == [
        "run completed: transformer rmsnorm seed 1, 400 steps in 121.6 s",
        "  test      test14 BLEU 35.98 | test17 BLEU 34.1 | valid beam BLEU 37.03",
        "  selected  step 400 (best valid bleu)",
        "  speed     369.2 s/1k steps (95% CI 350.1-388.3), median step 369.0 ms, 14123 tokens/s",
        "  run dir   results/runs/transformer/synthetic-mini/rmsnorm-p1.0-s1",  # relative to where it was started
    ]


@pytest.mark.parametrize("task, final, shown", [
    ("convpool", {"error": 9.12, "accuracy": 90.88, "train_error": 2.0, "valid_error": 9.5}, "test error 9.12 | test accuracy 90.88 | train error 2"),
    ("reader", {"accuracy": 0.61, "error": 0.39, "valid_accuracy": 0.6}, "test error 0.39 | test accuracy 0.61"),
    ("retrieval", {"caption_r1": 10.0, "caption_r5": 30.0, "image_r1": 8.0, "rsum": 150.25}, "R@K sum 150.2 | caption R@1 10 | image R@1 8"),
])
def test_end_of_run_block_shows_each_tasks_headline(task, final, shown):
    summary = {"task": task, "norm": "prmsnorm", "p": 0.125, "seed": 2, "status": "completed", "steps": 50,
               "s_per_1k_steps": 31.0, "final": final}
    block = end_of_run_block(summary, Path("/somewhere/run"))
    assert block.splitlines()[0] == "run completed: " + f"{task} prmsnorm p=0.125 seed 2, 50 steps"
    assert f"  test      {shown}" in block.splitlines()
    assert "  speed     31.0 s/1k steps" in block.splitlines() and "  run dir   /somewhere/run" in block


def test_end_of_run_block_of_diverged_interrupted_and_failed_runs():
    base = {"task": "reader", "norm": "none", "p": 1.0, "seed": 1, "s_per_1k_steps": 12.0}
    diverged = end_of_run_block({**base, "status": "diverged", "diverged_at": 37, "steps": 37, "final": {}}, Path("r"))
    assert diverged.startswith("run diverged at step 37: reader none seed 1, 37 steps") and "not tested" in diverged
    interrupted = end_of_run_block({**base, "status": "interrupted", "interrupted_by": "SIGINT", "steps": 15,
                                    "final": {"valid_accuracy": 0.4, "valid_error": 0.6}}, Path("r"))
    assert interrupted.startswith("run interrupted by SIGINT")
    assert "  valid     accuracy 0.4 | error 0.6" in interrupted  # the last validation, named as such
    assert interrupted.endswith("  resume    rerun the same command: it continues from the last checkpoint")
    failed = end_of_run_block({**base, "status": "failed", "steps": 3, "s_per_1k_steps": None, "final": {},
                               "error": "RuntimeError: boom"}, Path("r"))
    assert failed.splitlines()[:2] == ["run failed: reader none seed 1, 3 steps", "  error     RuntimeError: boom"]
    # the interval may come as a half-width too; an unknown task shows its test metrics
    assert "(± 2.5, 95% CI)" in end_of_run_block({**base, "status": "completed", "final": {}, "s_per_1k_steps_ci95": 2.5}, Path("r"))
    assert headline_metrics({"mse": 0.5, "valid_mse": 0.6}) == [("mse", 0.5)]


def test_eval_lines_name_the_loss_they_show():
    assert eval_line(200, 400, 2.3123, 66.23, {"bleu": 3.4, "loss": 3.66}) == \
        "step 200/400 | train loss 2.312 | 66.2 ms/step | eval: bleu 3.4, valid loss 3.66"
    assert eval_line(30, 400, 2.0, 60.0, None) == "step 30/400 | train loss 2 | 60.0 ms/step"


# A run on a terminal ------------------------------------------------------------------------------
def _run_on_a_terminal(args: list[str], cwd: Path) -> tuple[int, str]:
    """Run a command with a pseudo-terminal (100 columns) as its stdin, stdout and stderr."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 100, 0, 0))
    proc = subprocess.Popen(args, stdin=slave, stdout=slave, stderr=slave, cwd=cwd, env=cli_env(), close_fds=True)
    os.close(slave)
    chunks: list[bytes] = []

    def read() -> None:
        while True:
            try:
                data = os.read(master, 4096)
            except OSError:  # EIO: the child closed the terminal
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    code = proc.wait(timeout=240)
    reader.join(10)
    os.close(master)
    return code, b"".join(chunks).decode(errors="replace")


@pytest.mark.slow
def test_a_terminal_run_shows_a_bar_and_logs_eval_lines_to_its_file_in_a_dir_named_by_its_overrides(tmp_path):
    code, screen = _run_on_a_terminal(cli_args("task=tiny", "train.steps=20", "train.eval_every=10", "optim.lr=0.02",
                                               f"paths.runs_dir={tmp_path}"), REPO)
    assert code == 0, screen[-3000:]
    # a non-default override gets its own directory; train.steps (excluded: it may change on resume) does not
    run_dir = tmp_path / "tiny" / "synthetic-mini" / "rmsnorm-p1.0-s1,optim.lr=0.02,train.eval_every=10"
    assert sorted(p.name for p in (tmp_path / "tiny" / "synthetic-mini").iterdir()) == [run_dir.name]
    assert "step/s" in screen  # the tqdm bar
    logged = (run_dir / "train.log").read_text()
    for step in (10, 20):
        line = next(line for line in logged.splitlines() if f"step {step}/20 | train loss " in line)
        assert "| eval: valid loss " in line and "accuracy " in line
        assert screen.count(line.split(" - ", 1)[1]) == 1  # on the terminal once, through the bar


# --help and the run directory's name -------------------------------------------------------------
def test_help_shows_this_app_with_every_option_and_no_internal_group(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["rmsnorm-train", "--help"])
    GlobalHydra.instance().clear()
    with pytest.raises(SystemExit) as info:
        main()
    GlobalHydra.instance().clear()
    assert info.value.code in (0, None)
    text = capsys.readouterr().out
    assert text.startswith("rmsnorm-train: one training run of the RMSNorm reproduction suite")
    assert "powered by Hydra" not in text and "task_scale" not in text
    for group in ("task", "norm", "data", "scale", "experiment", "logger", "launcher"):
        options = sorted(p.stem for p in (configs_dir() / group).glob("*.yaml"))
        line = next(line for line in text.splitlines() if line.strip().startswith(group + " "))
        assert sorted(line.split(None, 1)[1].split("(")[0].replace(",", " ").split()) == options, line
    for command in ("rmsnorm-train task=transformer norm=rmsnorm", "rmsnorm-train -m experiment=table4 launcher=joblib",
                    "rmsnorm-report results/runs/multirun/transformer/synthetic-mini --table table4", "--cfg job"):
        assert command in text


def test_a_single_runs_directory_names_every_non_default_override():
    def run_dir(*overrides: str) -> str:
        return compose_cfg(["task=tiny", *overrides], hydra_node=True).hydra.run.dir

    base = "results/runs/tiny/synthetic-mini"
    assert run_dir() == f"{base}/rmsnorm-p1.0-s1"  # no override: the name of old
    # excluded keys (the step budget, where things go, how they are logged) leave it alone; the
    # norm, p and seed are in the name already
    assert run_dir("train.steps=5", "logger=wandb", "paths.runs_dir=results/runs", "launcher=joblib") == f"{base}/rmsnorm-p1.0-s1"
    assert run_dir("norm=prmsnorm", "seed=2") == f"{base}/prmsnorm-p0.0625-s2"
    assert run_dir("optim.lr=1e-4") == f"{base}/rmsnorm-p1.0-s1,optim.lr=1e-4"
    assert run_dir("task.hidden=32", "optim.lr=1e-4", "seed=3") == f"{base}/rmsnorm-p1.0-s3,optim.lr=1e-4,task.hidden=32"
    # a secret never becomes a name; a path's slashes do not make subdirectories
    assert run_dir("+logger.api_key=abcdef123456", "paths.data_dir=/data/x") == f"{base}/rmsnorm-p1.0-s1"
    assert run_suffix(["data.root=/mnt/corpora/wmt14"], []) == ",data.root=_mnt_corpora_wmt14"
    long = run_suffix([f"task.key{i}=value{i}" for i in range(40)], [])
    assert len(long.encode()) <= 200 and long.startswith(",task.key0=value0")
