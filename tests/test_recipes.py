"""docs/recipes.md cannot drift: every `key=value` of its "ours" column is what the paper-scale config says.

The card has one section per task. A section's line "compose: `task=<t> scale=paper norm=<n>`"
names the configuration its rows are checked against (hydra.compose on configs/train.yaml with those
overrides). In a row's "ours" cell (the 4th column) every backticked `key=value` is checked;
`norm=<name>` or `data=<name>` in a cell switches the composition for the spans after it in that cell.
Text outside backticks is prose for the reader and is not checked.
"""
from __future__ import annotations

import math
import re
from functools import lru_cache
from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from rmsnorm_repro.paths import configs_dir

CARD = Path(__file__).resolve().parents[1] / "docs" / "recipes.md"
GROUPS = ("norm", "data", "codebase")  # `norm=rmsnorm` in a cell: compose with that group option
TASKS = ("rnnsearch", "transformer", "reader", "retrieval", "convpool")
# Settings the runner decides (another change adds them): a row naming one of these keys is skipped,
# not failed, while the composed config does not have the key yet.
RUNNER_KEYS = ("train.select_metric", "train.select_mode", "train.early_stop_patience")
MISSING = object()


def sections() -> dict[str, dict]:
    """task -> {"compose": [overrides], "rows": [(setting, ours cell)]}."""
    out: dict[str, dict] = {}
    current = None
    for line in CARD.read_text(encoding="utf-8").splitlines():
        heading = re.match(r"^## `?(\w+)`?", line)
        if heading and heading.group(1) in TASKS:
            current = out.setdefault(heading.group(1), {"compose": None, "rows": []})
            continue
        if current is None:
            continue
        recipe = re.match(r"^compose: `([^`]+)`", line)
        if recipe:
            current["compose"] = recipe.group(1).split()
        elif line.startswith("|") and not re.match(r"^\|\s*(setting|-)", line):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) >= 5:
                current["rows"].append((cells[0], cells[3]))
    return out


def parse_value(text: str):
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        pass
    return yaml.safe_load(text)


def assignments(cell: str) -> list[tuple[dict, str, object]]:
    """[(group overrides in force, key, expected value)] for the backticked spans of one cell."""
    groups: dict[str, str] = {}
    out = []
    for span in re.findall(r"`([^`]+)`", cell):
        if "=" not in span:
            continue
        key, _, value = span.partition("=")
        key = key.strip()
        if key in GROUPS:
            groups[key] = value.strip()
        elif re.fullmatch(r"[A-Za-z_][\w.]*", key):
            out.append((dict(groups), key, parse_value(value.strip())))
    return out


@lru_cache(maxsize=None)
def composed(overrides: tuple[str, ...]):
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(configs_dir()), version_base="1.3"):
        return compose("train", overrides=list(overrides))


def same(actual, expected) -> bool:
    if isinstance(expected, bool) or expected is None or isinstance(actual, bool):
        return actual == expected
    if isinstance(expected, (int, float)) and isinstance(actual, (int, float)):
        return math.isclose(actual, expected, rel_tol=1e-9, abs_tol=0.0)
    if isinstance(expected, list) and isinstance(actual, list):
        return len(actual) == len(expected) and all(same(a, e) for a, e in zip(actual, expected))
    return actual == expected


def cases():
    for task, section in sections().items():
        for setting, cell in section["rows"]:
            for groups, key, value in assignments(cell):
                yield pytest.param(task, tuple(section["compose"] or ()), groups, key, value,
                                   id=f"{task}:{setting[:30]}:{key}")


def test_the_card_has_every_task_with_a_composition_and_checked_rows():
    found = sections()
    assert set(found) == set(TASKS)
    for task, section in found.items():
        assert section["compose"] and f"task={task}" in section["compose"] and "scale=paper" in section["compose"]
        checked = [a for _, cell in section["rows"] for a in assignments(cell)]
        assert len(checked) >= 12, f"{task}: only {len(checked)} checked settings"


@pytest.mark.parametrize("task, overrides, groups, key, expected", list(cases()))
def test_ours_column_matches_the_paper_scale_config(task, overrides, groups, key, expected):
    base = [o for o in overrides if o.split("=")[0] not in groups]
    cfg = composed(tuple(base + [f"{g}={v}" for g, v in groups.items()]))
    actual = OmegaConf.select(cfg, key, default=MISSING)
    if actual is MISSING and key in RUNNER_KEYS:
        pytest.skip(f"{key}: the runner does not have this setting yet")
    assert actual is not MISSING, f"{key} is not in the composed config ({' '.join(overrides)} {groups})"
    if OmegaConf.is_config(actual):
        actual = OmegaConf.to_container(actual)
    assert same(actual, expected), f"docs/recipes.md says {key}={expected!r}, the config says {actual!r}"


def test_parser_reads_group_switches_and_values():
    cell = "plain text `optim.lr=1.0e-4` `norm=none` `optim.lr=3e-4` `optim.betas=[0.9, 0.98]` `x` `a.b=null`"
    assert assignments(cell) == [({}, "optim.lr", 1e-4), ({"norm": "none"}, "optim.lr", 3e-4),
                                 ({"norm": "none"}, "optim.betas", [0.9, 0.98]), ({"norm": "none"}, "a.b", None)]


def test_the_card_states_order_embeddings_adam_ratio_as_computed():
    """OE optim.py:15-33 against torch's Adam, constant gradient: OE's m = g (1 - 0.9^t), v = g^2 (1 - 0.999^t),
    lr_t = lr sqrt(1 - 0.001^t) / (1 - 0.1^t); torch's bias-corrected step is lr. The card's numbers must be these."""
    def ratio(t: int) -> float:
        return math.sqrt(1 - 0.001 ** t) * (1 - 0.9 ** t) / ((1 - 0.1 ** t) * math.sqrt(1 - 0.999 ** t))

    peak = max(range(1, 2000), key=ratio)
    stated = f"{ratio(1):.1f}x at step 1, {ratio(peak):.1f}x near step {peak}, {ratio(100):.1f}x at step 100, {ratio(1000):.2f}x at step 1000"
    assert stated == "3.5x at step 1, 6.6x near step 12, 3.2x at step 100, 1.26x at step 1000"
    assert stated in CARD.read_text(encoding="utf-8")


def continued_comments(text: str) -> list[int]:
    """Line numbers of comment lines that continue a key's comment: a `#` in the column of the `#` that ends
    the line above (section notes, at the start of their own lines, are not key comments)."""
    lines, found = text.splitlines(), []
    for number, (above, line) in enumerate(zip(lines, lines[1:]), start=2):
        trailing = re.match(r"^(\s*[\w.\-]+:|\s*- ).*?\S\s+#", above)
        if trailing and line.strip().startswith("#") and line.index("#") == len(trailing.group(0)) - 1:
            found.append(number)
    return found


def test_a_config_keys_comment_is_one_line():
    """Why a value, in one line; its history lives in docs/ (docs/small_study.md, docs/recipes.md)."""
    assert continued_comments("steps: 1500    # why\n               # and its history\n") == [2]
    assert continued_comments("steps: 1500    # why\n# the next section\n") == []
    long = {str(p.relative_to(configs_dir())): continued_comments(p.read_text())
            for p in sorted(configs_dir().rglob("*.yaml"))}
    assert {name: lines for name, lines in long.items() if lines} == {}
