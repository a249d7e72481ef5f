"""wandb's online mode is checked in seconds, before anything runs: login detection through wandb's own API,
and a one-line failure without a server. Nothing here reaches the network: the server address is a port on
127.0.0.1 that refuses or never answers."""
from __future__ import annotations

import socket
import time
import types

import pytest
from omegaconf import OmegaConf

from rmsnorm_repro import wandb_access
from rmsnorm_repro.errors import ConfigError
from rmsnorm_repro.runner import run
from runner_fixtures.helpers import tiny


@pytest.fixture
def wandb_home(tmp_path, monkeypatch):
    """wandb's view of a user: no key in the environment, its settings and .netrc under tmp_path, and
    a server address on 127.0.0.1 whose port refuses connections."""
    wandb = pytest.importorskip("wandb")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    for var in ("WANDB_API_KEY", "WANDB_IDENTITY_TOKEN_FILE"):
        monkeypatch.delenv(var, raising=False)
    for var, value in {"HOME": tmp_path, "NETRC": tmp_path / "netrc", "WANDB_CONFIG_DIR": tmp_path / "wcfg",
                       "WANDB_BASE_URL": f"http://127.0.0.1:{port}", "WANDB_SILENT": "true"}.items():
        monkeypatch.setenv(var, str(value))
    monkeypatch.setattr(wandb_access, "_reachable", {})
    wandb.teardown()  # wandb caches its settings per process
    yield types.SimpleNamespace(port=port, netrc=tmp_path / "netrc", url=f"http://127.0.0.1:{port}")
    wandb.teardown()


def test_login_is_read_through_wandb_and_a_server_that_is_not_there_fails_in_seconds(tmp_path, wandb_home):
    online = OmegaConf.create({"mode": "online"})
    assert not wandb_access._has_wandb_key()
    with pytest.raises(ConfigError, match="wandb online mode needs an API key.*wandb login"):
        wandb_access.wandb_mode(online)
    # `wandb login --host <url>` writes the key under the host and port of that url
    wandb_home.netrc.write_text(f"machine 127.0.0.1:{wandb_home.port}\n  login user\n  password {'k' * 40}\n")
    wandb_home.netrc.chmod(0o600)
    assert wandb_access._has_wandb_key()
    start = time.perf_counter()
    with pytest.raises(ConfigError) as info:
        wandb_access.wandb_mode(online)
    assert time.perf_counter() - start < 5
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"wandb online mode cannot reach {wandb_home.url} (")
    assert "logger.mode=offline" in message
    # the same through a run: nothing written
    with pytest.raises(ConfigError, match="cannot reach"):
        run(tiny(tmp_path, "logger=wandb", "logger.mode=online"), tmp_path / "r")
    assert not (tmp_path / "r").exists()


def test_a_server_that_never_answers_times_out():
    with socket.socket() as server:  # listens, never accepts: the connection opens, no answer comes
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        url = f"http://127.0.0.1:{server.getsockname()[1]}"
        start = time.perf_counter()
        reason = wandb_access._unreachable(url, timeout=0.5)
        assert reason is not None and time.perf_counter() - start < 3
    wandb_access._reachable.pop(url, None)
