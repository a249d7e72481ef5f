"""Run folders written by hand in the run record's shape (summary.json, config.yaml, metrics.jsonl),
for the report's tests: every number known in advance."""
from __future__ import annotations

import json
from pathlib import Path

import yaml

from rmsnorm_repro.report import aggregate

ENDED = "2026-01-02T03:04:05Z"  # every fake run's summary.json ended_utc
ENV = {"torch": "2.14.1", "device": "cpu", "device_name": "Test CPU 9000", "threads": 1, "compile": False}


def write_run(root: Path, task: str, norm: str, seed: int, *, p: float = 1.0, status: str = "completed",
              s_per_1k: float = 10.0, final: dict | None = None, best: dict | None = None, steps: int = 100,
              curve: dict[str, list[float]] | None = None, model: dict | None = None, env: dict | None = None,
              loss_scale: float = 1.0) -> Path:
    """One run directory as the runner writes it: config.yaml, metrics.jsonl, summary.json."""
    run = root / f"{task}-{norm}-p{p}-s{seed}-{abs(hash(json.dumps(model, sort_keys=True))) % 1000}"
    run.mkdir(parents=True)
    config = {"seed": seed, "task": {"name": task, "model": model or {"hidden": 8}}, "norm": {"name": norm, "p": p},
              "data": {"name": "synthetic"}, "scale": {"name": "mini"}, "paths": {"runs_dir": str(root)},
              "train": {"steps": steps, "batch_size": 4}}
    (run / "config.yaml").write_text(yaml.safe_dump(config))
    lines = []
    for i, step in enumerate(range(10, steps + 1, 10)):
        line = {"step": step, "wall_s": step * s_per_1k / 1000, "loss": loss_scale * 5.0 / (1 + i), "step_ms": s_per_1k}
        for name, values in (curve or {}).items():
            if i < len(values):
                line[name] = values[i]
        lines.append(json.dumps(line))
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    summary = {"task": task, "norm": norm, "p": p, "seed": seed, "status": status, "steps": steps,
               "step_ms_median": s_per_1k, "step_ms_mean": s_per_1k, "s_per_1k_steps": s_per_1k,
               "final": final or {}, "best": best or {}, "ended_utc": ENDED,
               "env": env or {**ENV, "norm": {"name": norm, "impl_used": "fused-cpu" if "rms" in norm else None}}}
    (run / "summary.json").write_text(json.dumps(summary))
    return run


def write_fake_runs(root: Path) -> Path:
    """A small rnnsearch + transformer + convpool sweep with hand-picked numbers (used by the notebook test)."""
    bleu_curve = [1.0, 5.0, 9.0, 12.0, 14.0]
    for seed, (ln_bleu, rms_bleu) in zip((1, 2), ((20.0, 21.0), (22.0, 21.0))):
        write_run(root, "rnnsearch", "none", seed, s_per_1k=400 + seed, final={"test_bleu": 15.0 + seed},
                  best={"bleu": 14.0}, curve={"bleu": [b * 0.8 for b in bleu_curve]}, loss_scale=1.5)
        write_run(root, "rnnsearch", "layernorm", seed, s_per_1k=660 + 10 * seed, final={"test_bleu": ln_bleu},
                  best={"bleu": 19.0}, curve={"bleu": bleu_curve})
        write_run(root, "rnnsearch", "rmsnorm", seed, s_per_1k=500 + seed, final={"test_bleu": rms_bleu},
                  best={"bleu": 20.0}, curve={"bleu": bleu_curve})
        write_run(root, "rnnsearch", "prmsnorm", seed, p=0.0625, s_per_1k=490, final={"test_bleu": 20.5},
                  best={"bleu": 20.0}, curve={"bleu": bleu_curve})
        write_run(root, "transformer", "none", seed, status="diverged", s_per_1k=210, steps=30)
        write_run(root, "transformer", "layernorm", seed, s_per_1k=248, final={"test_bleu": 26.0})
        write_run(root, "convpool", "rmsnorm", seed, s_per_1k=31, final={"error": 9.0, "train_error": 2.0},
                  curve={"train_error": [50.0, 30.0, 10.0], "error": [55.0, 35.0, 15.0]})
    # Table 5 statistics, one rnnsearch seed each
    for run in aggregate.load_runs(root):
        if run.task == "rnnsearch" and run.seed == 1:
            summary = run.summary
            summary["final"].update({f"table5_{w}_{k}": (3.0 if run.norm == "none" else 1.5) * (1 if w == "std" else -1)
                                     for w in ("mean", "std") for k in ("1", "2", "3", "4", "all")})
            (run.path / "summary.json").write_text(json.dumps(summary))
    return root
