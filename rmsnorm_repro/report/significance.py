"""sacreBLEU's paired bootstrap between two runs' translations of one split: the second column beside
an equivalence verdict (claims.match_claims), per seed.

Runs write their final translations to outputs/<split>.txt (runner.loop.write_outputs). The test
needs the split's references, which live in the data, not in the run records; each result is kept in
a cache keyed by the two translation files' hashes, so a report rewritten where the data is absent
(from committed runs) still shows it.
"""
from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Callable, Sequence

from ..atomic import atomic_write_text
from ..record import RecordError, read_lines
from .aggregate import Group, Run

SPLIT = "valid"       # the split both systems translated with beam search (final evaluation)
SAMPLES = 1000        # sacreBLEU's default number of bootstrap resamples
log = logging.getLogger(__name__)


def paired_bootstrap(baseline: Sequence[str], system: Sequence[str], references: Sequence[str],
                     samples: int = SAMPLES) -> tuple[float, float]:
    """(BLEU(system) - BLEU(baseline), p-value) by sacreBLEU's paired bootstrap resampling (its fixed
    seed, SACREBLEU_SEED, makes it repeatable)."""
    from sacrebleu.significance import PairedTest

    from ..tasks.translation.bleu import bleu_metric

    _, scores = PairedTest([("baseline", list(baseline)), ("system", list(system))], {"BLEU": bleu_metric()},
                           [list(references)], test_type="bs", n_samples=samples)()
    base, other = scores["BLEU"]
    return float(other.score - base.score), float(other.p_value)


def _translations(run: Run, damaged: list[tuple[Path, str]] | None) -> list[str] | None:
    """The run's final translations of SPLIT; None when absent, or unreadable (then added to `damaged`)."""
    path = run.path / "outputs" / f"{SPLIT}.txt"
    try:
        return read_lines(path)
    except RecordError as err:
        if damaged is None:
            raise
        if path not in (where for where, _ in damaged):  # a baseline's file is read once per system
            damaged.append((path, f"{err}: the paired bootstraps of this run are left out"))
        return None


def _key(a: list[str], b: list[str]) -> str:
    digest = lambda lines: hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16]  # noqa: E731
    return f"{digest(a)}-{digest(b)}"


def bootstrap_notes(groups: list[Group], cache: Path, references: Callable[[Run], list[str] | None],
                    against: str = "layernorm", damaged: list[tuple[Path, str]] | None = None) -> dict[tuple[str, str], str]:
    """{(task, norm): "paired bootstrap on valid, per seed: seed 1 +0.41 BLEU (p = 0.21); ..."} for every
    group with a seed of `against` beside it. references(run) gives a run's valid references (None when
    the data is not there: then only cached results are shown). A cache that cannot be read is appended
    to `damaged` (when given) with what it costs."""
    known = {}
    if cache.exists():
        try:
            known = json.loads(cache.read_text(encoding="utf-8"))
            if not isinstance(known, dict):
                raise ValueError("not a JSON object")
        except (OSError, ValueError) as err:
            known = {}
            if damaged is not None:
                damaged.append((cache, f"cannot be read ({type(err).__name__}: {err}), so the paired bootstrap notes "
                                       "are computed again where the data is here and left out where not: delete it "
                                       "to compute them afresh"))
    notes, changed = {}, False
    by_norm: dict[tuple[str, str], Group] = {}
    for group in groups:
        by_norm.setdefault((group.task, group.norm), group)
    for (task, norm), group in by_norm.items():
        base = by_norm.get((task, against))
        if norm == against or base is None:
            continue
        parts = []
        base_runs = {run.seed: run for run in base.completed}
        for run in sorted(group.completed, key=lambda r: str(r.seed)):
            other = base_runs.get(run.seed)
            a, b = (_translations(other, damaged), _translations(run, damaged)) if other is not None else (None, None)
            if a is None or b is None or len(a) != len(b):
                continue
            if a == b:  # sacreBLEU's p for two identical systems is its smallest (1 / (samples + 1)): say it plainly
                parts.append(f"seed {run.seed}: identical translations")
                continue
            key = _key(a, b)
            if key not in known:
                refs = references(run)
                if refs is None or len(refs) != len(a):
                    continue
                known[key], changed = list(paired_bootstrap(a, b, refs)), True
            diff, p = known[key]
            parts.append(f"seed {run.seed} {diff:+.2f} BLEU (p = {p:.3f})")
        if parts:
            notes[(task, norm)] = f"paired bootstrap on {SPLIT} ({SAMPLES} resamples), per seed: " + "; ".join(parts)
    if changed:
        atomic_write_text(cache, json.dumps(known, indent=1, sort_keys=True) + "\n")
    return notes
