"""The paired bootstrap beside a "matches" verdict: sacreBLEU's own test on two runs' translations of the
same seed, cached by the translations' hashes so a report rewritten without the data still shows it."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from rmsnorm_repro.report import aggregate, significance

REFS = [f"ein Hund läuft über die Wiese Nummer {i} ." for i in range(40)]


def write_run(root: Path, norm: str, seed: int, hyps: list[str]) -> None:
    run = root / f"{norm}-s{seed}"
    (run / "outputs").mkdir(parents=True)
    (run / "config.yaml").write_text(yaml.safe_dump({"task": {"name": "rnnsearch"}, "norm": {"name": norm, "p": 1.0},
                                                     "seed": seed, "data": {"name": "multi30k"}}))
    (run / "summary.json").write_text(json.dumps({"task": "rnnsearch", "norm": norm, "p": 1.0, "seed": seed,
                                                  "status": "completed", "steps": 10, "final": {"valid_beam_bleu": 1.0}}))
    (run / "outputs" / "valid.txt").write_text("".join(h + "\n" for h in hyps))


def test_paired_bootstrap_is_sacrebleus_and_cached(tmp_path):
    worse = [r.replace("Wiese", "Straße") for r in REFS]
    for seed in (1, 2):
        write_run(tmp_path / "runs", "layernorm", seed, worse)
        write_run(tmp_path / "runs", "rmsnorm", seed, REFS if seed == 1 else worse)
    groups = aggregate.group_runs(aggregate.load_runs(tmp_path / "runs"))
    cache = tmp_path / "bootstrap.json"
    asked = []
    notes = significance.bootstrap_notes(groups, cache, lambda run: asked.append(run.seed) or REFS)
    delta, p = significance.paired_bootstrap(worse, REFS, REFS)
    note = notes[("rnnsearch", "rmsnorm")]
    assert note.startswith("paired bootstrap on valid (1000 resamples), per seed: ")
    assert f"seed 1 {delta:+.2f} BLEU (p = {p:.3f})" in note and "seed 2: identical translations" in note
    assert delta > 10 and p < 0.01 and asked == [1]
    # without the data: the cached results, not recomputed
    again = significance.bootstrap_notes(groups, cache, lambda run: pytest.fail("references read again"))
    assert again == notes and len(json.loads(cache.read_text())) == 1
    # a run whose translations changed (retrained) is not matched to the old result
    write_run(tmp_path / "more", "layernorm", 1, worse)
    write_run(tmp_path / "more", "rmsnorm", 1, REFS[:-1] + ["nichts"])
    changed = aggregate.group_runs(aggregate.load_runs(tmp_path / "more"))
    assert significance.bootstrap_notes(changed, cache, lambda run: None) == {}
