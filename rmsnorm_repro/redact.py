"""Secrets kept out of everything the suite writes: keys that look secret (whole words: api_key, HF_TOKEN)
and the values of such environment variables are redacted from configs, overrides and Hydra's own files.
Hydra's own files name this machine's folders too (its working directory, the run folder, where the configs
are): those become relative (`.`) or a placeholder (`<checkout>`, `~`, `<tmp>`). A leaf: record.py and the
runner import it."""
from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from .atomic import atomic_write_text

SECRET_WORDS = {"key", "apikey", "token", "secret", "password", "passwd", "credential", "credentials"}
REDACTED = "<redacted>"


def is_secret_key(key: str) -> bool:
    """wandb_api_key, HF_TOKEN, apiKey: yes; max_tokens, batch_tokens: no (whole words only)."""
    return any(word in SECRET_WORDS for word in re.split(r"[_.\-]", str(key).lower()))


def _secret_values() -> list[str]:
    """Values of secret-looking environment variables (e.g. WANDB_API_KEY), to redact wherever they appear."""
    return [v for k, v in os.environ.items() if is_secret_key(k) and len(v) >= 8]


def scrub(node: Any, secrets: list[str] | None = None) -> Any:
    """A copy of a plain config tree with secret-looking keys and known secret values redacted."""
    secrets = _secret_values() if secrets is None else secrets
    if isinstance(node, dict):
        return {k: REDACTED if is_secret_key(k) else scrub(v, secrets) for k, v in node.items()}
    if isinstance(node, (list, tuple)):
        return [scrub(v, secrets) for v in node]
    if isinstance(node, str):
        # `key=value` strings (Hydra's override lists) carry secrets too
        node = re.sub(r"([\w.+~-]+)=([^,\s]*)",
                      lambda m: f"{m[1]}={REDACTED}" if is_secret_key(m[1].lstrip("+~")) else m[0], node)
        for s in secrets:
            node = node.replace(s, REDACTED)
    return node


def machine_folders() -> list[tuple[str, str]]:
    """(folder, how a written file names it) for this machine's folders, the longest first: the working
    directory ("."), the checkout this package runs from, the home and the temporary folder."""
    folders = {os.getcwd(): ".", str(Path(__file__).resolve().parents[1]): "<checkout>",
               os.path.expanduser("~"): "~", tempfile.gettempdir(): "<tmp>"}
    found: dict[str, str] = {}
    for folder, shown in folders.items():
        for form in {folder, os.path.realpath(folder)}:
            if len(form) > 1 and form not in found:
                found[form] = shown
    return sorted(found.items(), key=lambda item: -len(item[0]))


def without_machine_folders(node: Any, folders: list[tuple[str, str]] | None = None) -> Any:
    """A copy of a plain tree whose strings name none of machine_folders (each replaced where it is a whole
    path or a path's start: /home/me/x -> ~/x, <cwd>/runs/a -> ./runs/a)."""
    folders = machine_folders() if folders is None else folders
    if isinstance(node, dict):
        return {k: without_machine_folders(v, folders) for k, v in node.items()}
    if isinstance(node, (list, tuple)):
        return [without_machine_folders(v, folders) for v in node]
    if isinstance(node, str):
        for folder, shown in folders:
            node = re.sub(re.escape(folder) + r"(?=/|$|[\s,\]'\"])", shown, node)
    return node


def scrub_yaml_file(path: Path) -> None:
    """Rewrite one of Hydra's own yaml files (.hydra/*, multirun.yaml) without secrets (they hold the raw
    overrides) and without this machine's folders (hydra.yaml's runtime.cwd, output_dir, config sources)."""
    if not path.exists():
        return
    tree = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    clean = without_machine_folders(scrub(tree))
    if clean != tree:  # parallel jobs of a sweep may share the file: write only when needed, atomically
        atomic_write_text(path, OmegaConf.to_yaml(OmegaConf.create(clean)))
