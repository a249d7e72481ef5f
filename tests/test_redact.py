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
