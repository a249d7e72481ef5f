"""Secrets never reach a record: secret-looking keys (whole words) and secret environment values are redacted."""
from rmsnorm_repro.redact import is_secret_key, scrub


def test_secret_scrubbing(monkeypatch):
    monkeypatch.setenv("WANDB_API_KEY", "0123456789abcdef")
    assert is_secret_key("wandb_api_key") and is_secret_key("HF_TOKEN") and is_secret_key("apiKey")
    assert not is_secret_key("max_tokens") and not is_secret_key("batch_tokens")
    tree = {"logger": {"api_key": "x", "note": "key is 0123456789abcdef"}, "task": {"max_tokens": 4000},
            "overrides": ["norm=rmsnorm", "+logger.token=abc", "task.max_tokens=10"]}
    assert scrub(tree) == {"logger": {"api_key": "<redacted>", "note": "key is <redacted>"}, "task": {"max_tokens": 4000},
                           "overrides": ["norm=rmsnorm", "+logger.token=<redacted>", "task.max_tokens=10"]}


def test_no_file_of_a_fresh_run_names_a_folder_of_the_machine(tmp_path):
    """Issue 54: the fused kernel's ready line named its build cache (a home path) in train.log, and Hydra's
    hydra.yaml named the working directory, the run folder and the checkout's configs. A tiny run with the
    fused kernel, started where a user starts one (its folder relative), and every file it wrote read."""
    import os
    import subprocess
    import tempfile
    from pathlib import Path

    from runner_fixtures.helpers import REPO, cli_args, cli_env

    proc = subprocess.run(cli_args("task=tiny", "norm=rmsnorm", "norm.impl=fused", "train.steps=2",
                                   "train.eval_every=2", "paths.runs_dir=runs"),
                          env=cli_env(), cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    [run_dir] = {p.parent for p in (tmp_path / "runs").rglob("summary.json")}
    files = [p for p in run_dir.rglob("*") if p.is_file() and p.suffix != ".pt" and p.name != ".lock"]
    names = {p.relative_to(run_dir).as_posix() for p in files}
    assert {"config.yaml", "summary.json", "metrics.jsonl", "train.log", ".hydra/hydra.yaml",
            ".hydra/config.yaml", ".hydra/overrides.yaml"} <= names
    assert "fused CPU kernel" in (run_dir / "train.log").read_text()  # the line that named the build cache
    folders = {str(REPO), os.path.realpath(REPO), str(Path.home()), tempfile.gettempdir(), str(tmp_path)}
    for path in files:
        text = path.read_bytes().decode("utf-8", "replace")
        named = sorted(folder for folder in folders if folder in text)
        assert not named, f"{path.relative_to(run_dir)} names {named}"
