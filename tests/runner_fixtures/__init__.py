"""Test-only task and configs for the runner's tests (tests/test_runner.py, tests/test_cli.py)."""
