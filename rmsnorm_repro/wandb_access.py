"""Whether wandb can log from here, checked in seconds before anything is built: the mode (logger.mode,
$WANDB_MODE, else offline), and online a key and a server that answers. A leaf: the runner and the
report's --wandb both ask it."""
from __future__ import annotations

import os
import threading
import urllib.error
import urllib.request

from omegaconf import DictConfig

from .errors import ConfigError

ONLINE_MODES = ("online", "shared", "run")
PROBE_TIMEOUT_S = 3.0
_reachable: dict[str, str | None] = {}  # base URL -> None (reachable) or why not, once per process


def _wandb_base_url() -> str:
    """The server wandb will talk to: $WANDB_BASE_URL, else wandb's own settings (`wandb login --host`)."""
    if os.environ.get("WANDB_BASE_URL"):
        return os.environ["WANDB_BASE_URL"]
    try:
        from wandb.sdk import wandb_setup

        return str(wandb_setup.singleton().settings.base_url)
    except Exception:  # noqa: BLE001 (an older client, or settings it cannot read: wandb's default)
        return "https://api.wandb.ai"


def _has_wandb_key() -> bool:
    """Whether wandb has credentials for its server, read the way wandb reads them; no network.

    wandb >= 0.2x: $WANDB_API_KEY, an identity token file, the .netrc entry of the configured host
    (`wandb login` writes it) or an api_key in wandb's settings. Older clients: their `wandb.api`.
    (`wandb.login(verify=False)` would ask the server who is logged in, so it is not used here.)
    """
    if os.environ.get("WANDB_API_KEY") or os.environ.get("WANDB_IDENTITY_TOKEN_FILE"):
        return True
    import wandb

    try:
        from wandb.sdk.lib import wbauth
    except ImportError:  # wandb before wbauth: the internal API reads env, .netrc and settings
        try:
            return bool(wandb.api.api_key)
        except Exception:  # noqa: BLE001
            return False
    try:
        from wandb.sdk import wandb_setup

        if wbauth.read_netrc_auth(host=_wandb_base_url()):
            return True
        return bool(wandb_setup.singleton().settings.api_key)
    except Exception:  # noqa: BLE001 (a malformed .netrc or settings file: no usable key)
        return False


def _unreachable(url: str, timeout: float = PROBE_TIMEOUT_S) -> str | None:
    """None when the server at `url` answers an HTTP request within `timeout` seconds (any status:
    it answered), else why not. Run before wandb.init, whose own retries take minutes offline.
    The request runs in a daemon thread, so a name lookup that hangs cannot hold the process."""
    if url in _reachable:
        return _reachable[url]
    result: dict[str, str | None] = {}

    def request() -> None:
        try:
            urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=timeout).close()
            result["error"] = None
        except urllib.error.HTTPError:  # 401, 404, ...: the server is there
            result["error"] = None
        except (OSError, ValueError) as e:  # URLError (refused, no such host), timeouts, TLS errors
            reason = getattr(e, "reason", e)
            result["error"] = f"{type(reason).__name__}: {reason}"

    worker = threading.Thread(target=request, daemon=True)
    worker.start()
    worker.join(timeout + 0.5)
    reason = result["error"] if "error" in result else f"no answer in {timeout:g} s"
    _reachable[url] = reason
    return reason


def wandb_mode(logger: DictConfig) -> str:
    """The wandb mode of a run (logger.mode, $WANDB_MODE, else offline); online needs a key and the server.

    Both are checked here, in seconds, so a run fails before it builds anything, with one line."""
    mode = logger.get("mode") or os.environ.get("WANDB_MODE") or "offline"
    if mode not in ("online", "offline", "disabled", "shared", "dryrun", "run"):
        raise ConfigError(f"logger.mode={mode!r} is unknown; choose online, offline or disabled")
    if mode in ONLINE_MODES:
        if not _has_wandb_key():
            raise ConfigError("wandb online mode needs an API key: run `wandb login` or set WANDB_API_KEY, "
                              "or log offline with logger.mode=offline (upload later with `wandb sync`)")
        url = _wandb_base_url()
        reason = _unreachable(url)
        if reason:
            raise ConfigError(f"wandb online mode cannot reach {url} ({reason}): check the network or "
                              f"WANDB_BASE_URL, or log offline with logger.mode=offline and `wandb sync` later")
    return mode
