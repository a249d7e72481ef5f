"""The cost of an evaluation during training at the small recipes, against the training between two evaluations.

An evaluation (TranslationTask.evaluate("valid")) decodes task.decode.valid_sentences sentences greedily and
scores the teacher-forced loss of the valid set. This script builds a small recipe (configs/task_scale/<task>/
small.yaml) on real data, trains it --warm-steps steps (random weights end every hypothesis at once or never,
which would time the wrong decoding), then takes --rounds rounds, each timing in turn: --steps training steps
(the runner's step: loss, backward, clip, Adam), the greedy decode with this checkout's beam.py and models,
the same with those of git revision --baseline (read with `git show`, loaded beside them in this process, the
same weights), and the valid loss over all of the valid set and over the first valid_sentences. Every round
checks both decoders give the same hypotheses. Times are this thread's CPU time (1 thread), which other
processes on a shared machine do not inflate; medians with min-max.

    OMP_NUM_THREADS=1 python scripts/bench_eval.py data.root=<raw Multi30k> [--task rnnsearch] [--baseline main]
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch
from hydra import compose, initialize_config_dir

from rmsnorm_repro.host import cpu_name
from rmsnorm_repro.paths import configs_dir
from rmsnorm_repro.runner.optim import build_optimizer
from rmsnorm_repro.runner.setup import normalization, task_class
from rmsnorm_repro.runner.step import train_step
from rmsnorm_repro.tasks.translation import beam
from rmsnorm_repro.tasks.translation.data import eval_batches, subset

PACKAGE = "rmsnorm_repro.tasks.translation"
MODEL_FILE = {"rnnsearch": ("rnnsearch", "RNNSearch"), "transformer": ("transformer", "Transformer")}


def baseline_module(rev: str, name: str):
    """tasks/translation/<name>.py as of `rev`, imported as a sibling module (its relative imports resolve here)."""
    root = Path(__file__).resolve().parent.parent
    source = subprocess.run(["git", "show", f"{rev}:rmsnorm_repro/tasks/translation/{name}.py"], cwd=root,
                            check=True, capture_output=True, text=True).stdout
    spec = importlib.util.spec_from_loader(f"{PACKAGE}._baseline_{name}", loader=None)
    module = importlib.util.module_from_spec(spec)
    module.__package__ = PACKAGE
    sys.modules[spec.name] = module
    exec(compile(source, f"{rev}:{name}.py", "exec"), module.__dict__)
    return module


def cpu_s(fn):
    start = time.thread_time()
    out = fn()
    return time.thread_time() - start, out


def decode_all(greedy, model, task, enc) -> list[list[int]]:
    dec, hyps = task.cfg.task.decode, [None] * len(enc)
    for idx, b in eval_batches(enc, int(dec.batch_size)):
        n = beam.max_length(b["src_mask"], float(dec.max_len_a), int(dec.max_len_b), int(dec.max_len))
        for i, h in zip(idx, greedy(model, b["src"], b["src_mask"], n)):
            hyps[i] = h
    return hyps


def run(task_name: str, args, overrides: list[str]) -> None:
    with initialize_config_dir(str(configs_dir()), version_base=None):
        cfg = compose("train", overrides=[f"task={task_name}", "scale=small", "norm=rmsnorm", *overrides])
    torch.manual_seed(int(cfg.seed))
    cls = task_class(cfg)
    task = cls(cfg, normalization(cfg, cls), torch.device("cpu"))
    model = task.build_model()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = build_optimizer(params, cfg.optim)
    step = 0

    def train(n: int) -> list[float]:
        nonlocal step
        model.train()
        times = []
        for _ in range(n):
            times.append(cpu_s(lambda: train_step(task, model, opt, task.train_batch(step), params, cfg.optim.clip))[0])
            step += 1
        model.eval()
        return times

    train(args.warm_steps)
    module_name, class_name = MODEL_FILE[task_name]
    old_model = getattr(baseline_module(args.baseline, module_name), class_name)(cfg.task.model, len(task.vocab), 0, task.norms)
    old_greedy = baseline_module(args.baseline, "beam").greedy
    n_valid = int(cfg.task.decode.valid_sentences or len(task.data.valid))
    enc = subset(task.data.valid, np.arange(min(n_valid, len(task.data.valid))))
    t = {k: [] for k in ("step", "greedy", "greedy_baseline", "loss_all", "loss_first")}
    for _ in range(args.rounds):
        t["step"] += train(args.steps)
        old_model.load_state_dict(model.state_dict())
        old_model.eval()
        with torch.no_grad():
            s, new = cpu_s(lambda: decode_all(beam.greedy, model, task, enc))
            t["greedy"].append(s)
            s, old = cpu_s(lambda: decode_all(old_greedy, old_model, task, enc))
            t["greedy_baseline"].append(s)
            assert new == old, "this checkout's greedy hypotheses differ from the baseline's"
            t["loss_all"].append(cpu_s(lambda: task.nll(model, task.data.valid))[0])
            t["loss_first"].append(cpu_s(lambda: task.nll(model, enc))[0])
    med = {k: statistics.median(v) for k, v in t.items()}
    between = int(cfg.train.eval_every) * med["step"]
    ratio = statistics.median(n / o for n, o in zip(t["greedy"], t["greedy_baseline"]))
    print(f"\n{task_name}: {len(task.data.valid)} valid sentences, greedy on {len(enc)}, eval_every {cfg.train.eval_every}, "
          f"{args.warm_steps} warm-up steps, {args.rounds} rounds, mean hypothesis {np.mean([len(h) for h in new]):.1f} subwords")
    print("| part | median CPU s | min-max | share of the training between two evaluations |")
    print("|---|---:|---:|---:|")
    print(f"| training step | {med['step']:.3f} | {min(t['step']):.3f}-{max(t['step']):.3f} | x{cfg.train.eval_every} = {between:.1f} s |")
    for key, label in (("greedy", "greedy decode, this checkout"), ("greedy_baseline", f"greedy decode, {args.baseline}"),
                       ("loss_all", f"valid loss, all {len(task.data.valid)}"), ("loss_first", f"valid loss, first {len(enc)}")):
        print(f"| {label} | {med[key]:.2f} | {min(t[key]):.2f}-{max(t[key]):.2f} | {100 * med[key] / between:.1f}% |")
    print(f"greedy: this checkout / {args.baseline} = {ratio:.2f} (median of per-round ratios); hypotheses identical")
    for label, loss in (("all", "loss_all"), (f"first {len(enc)}", "loss_first")):
        print(f"evaluation (greedy + valid loss on {label}): {100 * (med['greedy'] + med[loss]) / between:.1f}% of the training between two")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", choices=tuple(MODEL_FILE), nargs="+", default=list(MODEL_FILE))
    ap.add_argument("--baseline", default="main", help="git revision whose beam.py and model file are timed beside")
    ap.add_argument("--warm-steps", type=int, default=40)
    ap.add_argument("--steps", type=int, default=2, help="training steps timed per round")
    ap.add_argument("--rounds", type=int, default=3)
    args, overrides = ap.parse_known_args()
    torch.set_num_threads(1)
    print(f"{cpu_name()}, torch {torch.__version__}, 1 thread, load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    for name in args.task:
        run(name, args, overrides)


if __name__ == "__main__":
    main()
