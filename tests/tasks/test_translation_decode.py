"""Issue 15, evaluation: decoding has an absolute length cap, every evaluation loop stops between
batches when a stop is requested, beam search never loses a finished hypothesis, and decode/eval
settings are refused when the task is built (seconds after start, not after training)."""
from __future__ import annotations

import math
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from rmsnorm_repro.norms import build_normalization
from rmsnorm_repro.tasks import get_task_class
from rmsnorm_repro.tasks.base import EvaluationInterrupted, Task
from rmsnorm_repro.tasks.translation.beam import DEFAULT_MAX_DECODE_LEN, beam_search, greedy, max_length
from rmsnorm_repro.tasks.translation.data import Encoded
from rmsnorm_repro.tasks.translation.vocab import BOS, EOS

REPO = Path(__file__).resolve().parents[2]
CONFIGS = str(REPO / "configs")
TINY = {
    "transformer": ["task.synthetic.nouns=6", "task.synthetic.adjectives=3", "task.synthetic.verbs=3",
                    "task.synthetic.train=300", "task.synthetic.valid=24", "task.synthetic.test=16",
                    "task.synthetic.vocab_size=120", "task.decode.batch_size=4", "task.model.encoder_layers=1",
                    "task.model.decoder_layers=1", "task.model.d_model=16", "task.model.ffn_dim=32",
                    "task.model.heads=2", "train.batch_tokens=400"],
    "rnnsearch": ["task.synthetic.nouns=6", "task.synthetic.adjectives=3", "task.synthetic.verbs=3",
                  "task.synthetic.train=300", "task.synthetic.valid=24", "task.synthetic.test=16",
                  "task.synthetic.vocab_size=120", "task.decode.batch_size=4", "task.model.emb=8",
                  "task.model.hidden=8"],
    "reader": ["task.synthetic.train_size=40", "task.synthetic.valid_size=40", "task.synthetic.test_size=40",
               "task.eval_batch_size=8", "task.model.emb_dim=8", "task.model.hidden=8"],
    "retrieval": ["task.synthetic.train_images=20", "task.synthetic.valid_images=10", "task.synthetic.test_images=10",
                  "task.synthetic.feature_dim=16", "task.eval_batch_size=8", "task.model.word_dim=8", "task.model.dim=8"],
    "convpool": ["task.model.width_mult=0.05", "task.synthetic.train_size=64", "task.synthetic.test_size=40",
                 "task.train_error_size=16", "task.eval_batch_size=8", "train.batch_size=16"],
}


def compose_cfg(tmp_path: Path, task: str, *overrides: str):
    with initialize_config_dir(config_dir=CONFIGS, version_base="1.3"):
        return compose("train", overrides=[f"task={task}", "norm=layernorm", "scale=mini",
                                           f"paths.cache_dir={tmp_path / 'cache'}", *TINY[task], *overrides])


def make_task(tmp_path: Path, task: str, *overrides: str) -> Task:
    cfg = compose_cfg(tmp_path, task, *overrides)
    cls = get_task_class(task)
    norms = build_normalization(cfg.norm.name, cfg.norm, cls.supported_norms, task)
    torch.manual_seed(0)
    return cls(cfg, norms, torch.device("cpu"))


class NeverEnds(torch.nn.Module):
    """A seq2seq stand-in that never emits EOS (an untrained model on a line it cannot translate)."""

    def __init__(self, vocab: int):
        super().__init__()
        self.vocab = vocab

    def encode(self, src, src_mask):
        return {"src_mask": src_mask}

    def decode_step(self, state, prefix):
        logits = torch.zeros(prefix.size(0), self.vocab)
        logits[:, :EOS + 1] = -math.inf
        logits[:, EOS + 1] = 1.0
        return torch.log_softmax(logits, -1), state


class Scripted(torch.nn.Module):
    """Next-token log-probabilities looked up by prefix (tokens after BOS); anything else is -8."""

    def __init__(self, table: dict[tuple[int, ...], dict[int, float]], vocab: int = 7):
        super().__init__()
        self.table, self.vocab = table, vocab

    def encode(self, src, src_mask):
        return {"src_mask": src_mask}

    def decode_step(self, state, prefix):
        rows = []
        for p in prefix.tolist():
            row = torch.full((self.vocab,), -8.0)
            row[:BOS + 1] = -math.inf
            for token, lp in self.table.get(tuple(p[1:]), {}).items():
                row[token] = lp
            rows.append(row)
        return torch.stack(rows), state


# Item 6: the length cap -----------------------------------------------------------------------

def test_max_length_has_an_absolute_cap():
    short = torch.ones(2, 7, dtype=torch.bool)
    long = torch.ones(1, 50_000, dtype=torch.bool)
    assert max_length(short, 1.2, 10) == int(1.2 * 7 + 10)  # short sources: unchanged
    assert DEFAULT_MAX_DECODE_LEN == 256
    assert max_length(long, 1.2, 10) == 256
    assert max_length(long, 1.2, 10, cap=40) == 40


@pytest.mark.parametrize("beam", [1, 3])
def test_a_very_long_source_line_decodes_at_most_the_cap(tmp_path, beam):
    """Before: a 100k-character valid line decoded a * len + b tokens (tens of thousands) with no cap."""
    task = make_task(tmp_path, "transformer", "++task.decode.max_len=30")
    enc = Encoded([[5] * 3000, [6] * 4], [[5], [6]])
    start = time.perf_counter()
    task.translate(NeverEnds(len(task.vocab)), enc, beam)
    assert time.perf_counter() - start < 20
    seen = []
    original = task.vocab.decode
    task.vocab.decode = lambda hyps: seen.extend(hyps) or original(hyps)
    task.translate(NeverEnds(len(task.vocab)), enc, beam)
    assert [len(h) for h in seen] == [30, 30]  # one batch: its longest source sets the length
    seen.clear()
    task.translate(NeverEnds(len(task.vocab)), Encoded([[6] * 4], [[6]]), beam)
    assert [len(h) for h in seen] == [int(1.2 * 5 + 10)]  # short sources keep a * len + b (EOS counted)
    default = make_task(tmp_path, "transformer")  # without the key: the built-in cap
    seen.clear()
    default.vocab.decode = lambda hyps: seen.extend(hyps) or original(hyps)
    default.translate(NeverEnds(len(default.vocab)), Encoded([[5] * 3000], [[5]]), beam)
    assert len(seen[0]) == DEFAULT_MAX_DECODE_LEN


def write_text_corpus(root: Path, long_valid_line: str) -> None:
    root.mkdir(parents=True)
    words = "a man woman dog cat runs sits on the in red blue hat park street near with".split()
    sents = [" ".join(words[(i * 7 + j) % len(words)] for j in range(4 + i % 6)) + " ." for i in range(120)]
    for split, lines in (("train", sents), ("val", sents[:12])):
        (root / f"{split}.en").write_text("".join(line + "\n" for line in lines))
        (root / f"{split}.de").write_text("".join(line + "\n" for line in lines))
    valid = sents[:12]
    valid[5] = long_valid_line
    (root / "val.en").write_text("".join(line + "\n" for line in valid))


def test_a_100k_character_valid_line_evaluates_in_seconds(tmp_path, caplog):
    """Before: its batch was padded to ~26k source subwords; one greedy evaluation took 14 minutes."""
    write_text_corpus(tmp_path / "text", ("the man in the red hat " * 5000)[:100_000])
    text = ["data=text", f"data.root={tmp_path / 'text'}", "data.vocab_size=60"]
    task = make_task(tmp_path, "transformer", *text)
    assert int(task.data.valid.src_len.max()) == 1024 and "cut to 1024" in caplog.text
    model = task.build_model().eval()
    start = time.perf_counter()
    assert set(task.evaluate(model, "valid")) == {"bleu", "loss"}
    assert time.perf_counter() - start < 60
    assert int(make_task(tmp_path, "transformer", *text, "++task.decode.max_eval_len=40").data.valid.src_len.max()) == 40


# Item 6: beam search keeps finished hypotheses ----------------------------------------------------

A, X, Y = 4, 5, 6
# Step 1: A (-0.5) and the finished empty hypothesis [EOS] (-0.9) fill a beam of 2. Step 2: A X (-0.6)
# and A Y (-0.7) outrank the finished one, which used to fall out of the beam. Step 3: both end with
# EOS at -3: per-token scores -1.2 and -1.23, worse than the finished [EOS]'s -0.9 (and -3.6 raw).
DISPLACED = {(): {EOS: -0.9, A: -0.5}, (A,): {X: -0.1, Y: -0.2, EOS: -4.0}, (A, X): {EOS: -3.0}, (A, Y): {EOS: -3.0}}


@pytest.mark.parametrize("penalty", [0.0, 1.0])
def test_beam_search_never_drops_a_finished_hypothesis(penalty):
    model = Scripted(DISPLACED)
    src = torch.tensor([[7], [8]])
    mask = torch.ones_like(src, dtype=torch.bool)
    assert greedy(model, src, mask, 5) == [[A, X], [A, X]]
    assert beam_search(model, src, mask, beam=2, max_len=5, length_penalty=penalty) == [[], []]


def test_beam_search_at_the_length_cap_keeps_the_finished_hypothesis():
    """At the cap the open hypotheses are cut; a finished hypothesis with the better score still wins."""
    table = {(): {EOS: -0.9, A: -0.5}, (A,): {X: -0.1, Y: -0.2}, (A, X): {A: -3.0}, (A, Y): {A: -3.0}}
    src = torch.tensor([[7]])
    mask = torch.ones_like(src, dtype=torch.bool)
    assert beam_search(Scripted(table), src, mask, beam=2, max_len=3, length_penalty=1.0) == [[]]


# Item 6: a stop request ends evaluation between batches ------------------------------------------

def stop_after(n: int):
    calls = {"n": 0}

    def stop() -> bool:
        calls["n"] += 1
        return calls["n"] > n

    return stop, calls


def test_decoders_check_the_stop_flag():
    model = NeverEnds(9)
    src = torch.tensor([[5, 6]])
    mask = torch.ones_like(src, dtype=torch.bool)
    for decode in (lambda s: greedy(model, src, mask, 1000, should_stop=s),
                   lambda s: beam_search(model, src, mask, 3, 1000, should_stop=s)):
        stop, calls = stop_after(5)
        with pytest.raises(EvaluationInterrupted):
            decode(stop)
        assert calls["n"] == 6


@pytest.mark.parametrize("task_name", ["transformer", "rnnsearch"])
@pytest.mark.parametrize("split", ["valid", "test"])
def test_translation_evaluation_stops_when_asked(tmp_path, task_name, split):
    task = make_task(tmp_path, task_name)
    assert task.stop_requested() is False  # the default: never
    model = task.build_model().eval()
    stop, calls = stop_after(3)
    task.stop_requested = stop
    with pytest.raises(EvaluationInterrupted):
        task.evaluate(model, split)
    assert calls["n"] == 4


@pytest.mark.parametrize("task_name", ["reader", "retrieval", "convpool"])
def test_other_evaluations_stop_when_asked(tmp_path, task_name):
    task = make_task(tmp_path, task_name)
    model = task.build_model().eval()
    assert set(task.evaluate(model, "valid"))  # runs normally without a stop request
    stop, calls = stop_after(1)
    task.stop_requested = stop
    with pytest.raises(EvaluationInterrupted):
        task.evaluate(model, "valid")
    assert calls["n"] == 2


# Item 9: decode / eval settings are checked when the task is built ---------------------------------

BAD = [
    ("transformer", "task.decode.beam=0", "task.decode.beam must be an integer >= 1"),
    ("transformer", "task.decode.beam=2.5", "task.decode.beam must be an integer >= 1"),
    ("transformer", "task.decode.beam=abc", "task.decode.beam must be an integer >= 1"),
    ("transformer", "task.decode.beam=true", "task.decode.beam must be an integer >= 1"),
    ("transformer", "task.decode.valid_beam=0", "task.decode.valid_beam must be an integer >= 1"),
    ("transformer", "task.decode.valid_sentences=0", "task.decode.valid_sentences must be an integer >= 1 or null"),
    ("transformer", "task.decode.length_penalty=nan", "task.decode.length_penalty must be a finite number"),
    ("rnnsearch", "task.decode.length_penalty=-1", "task.decode.length_penalty must be a finite number >= 0"),
    ("rnnsearch", "task.decode.max_len_a=inf", "task.decode.max_len_a must be a finite number >= 0"),
    ("rnnsearch", "task.decode.max_len_b=-1", "task.decode.max_len_b must be an integer >= 0"),
    ("transformer", "task.decode.batch_size=0", "task.decode.batch_size must be an integer >= 1"),
    ("transformer", "++task.decode.max_len=0", "task.decode.max_len must be an integer >= 1"),
    ("rnnsearch", "++task.decode.max_eval_len=0", "task.decode.max_eval_len must be an integer >= 1"),
    ("transformer", "++task.decode.valid_loss_sentences=0", "task.decode.valid_loss_sentences must be an integer >= 1"),
    ("transformer", "task.label_smoothing=1.0", "task.label_smoothing must be a finite number in [0, 1)"),
    ("transformer", "task.max_len=0", "task.max_len must be an integer >= 1"),
    ("reader", "task.eval_batch_size=0", "task.eval_batch_size must be an integer >= 1"),
    ("retrieval", "task.eval_batch_size=-4", "task.eval_batch_size must be an integer >= 1"),
    ("retrieval", "task.margin=nan", "task.margin must be a finite number >= 0"),
    ("convpool", "task.eval_batch_size=0", "task.eval_batch_size must be an integer >= 1"),
    ("convpool", "task.train_error_size=0", "task.train_error_size must be an integer >= 1"),
    # an empty generated split used to fail only at the first evaluation
    ("transformer", "task.synthetic.valid=0", "task.synthetic.valid must be an integer >= 1"),
    ("reader", "task.synthetic.test_size=0", "task.synthetic.test_size must be an integer >= 1"),
    ("retrieval", "task.synthetic.valid_images=0", "task.synthetic.valid_images must be an integer >= 1"),
    ("convpool", "task.synthetic.test_size=0", "task.synthetic.test_size must be an integer >= 1"),
]


@pytest.mark.parametrize("task_name,override,message", BAD)
def test_bad_settings_are_refused_before_any_data_is_read(tmp_path, task_name, override, message):
    # data that cannot be read: the setting must be refused first, so nothing waits on the data
    data = ["data=text", f"data.root={tmp_path / 'nowhere'}"] if task_name in ("transformer", "rnnsearch") else []
    if task_name == "reader":
        data = ["data=cnn", f"data.root={tmp_path / 'nowhere'}"]
    if task_name == "retrieval":
        data = ["data=coco", f"data.root={tmp_path / 'nowhere'}"]
    if task_name == "convpool":
        data = ["data=cifar10", f"data.root={tmp_path / 'nowhere'}"]
    with pytest.raises(ValueError) as err:
        make_task(tmp_path, task_name, *data, override)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)
    key = override.lstrip("+").split("=")[0]
    assert str(err.value).endswith(f"got {OmegaConf.select(compose_cfg(tmp_path, task_name, override), key)!r}")


def test_the_valid_loss_covers_the_first_valid_loss_sentences_or_all(tmp_path):
    """task.decode.valid_loss_sentences (absent: the whole valid set, as before it existed) cuts the eval-step
    loss to the first N valid sentences, the set the BLEU of decode.valid_sentences reads."""
    from rmsnorm_repro.tasks.translation.data import subset

    task = make_task(tmp_path, "rnnsearch")
    model = task.build_model().eval()
    whole = task.evaluate(model, "valid")["loss"]
    assert whole == task.nll(model, task.data.valid)
    OmegaConf.update(task.cfg, "task.decode.valid_loss_sentences", 10, force_add=True)
    first = task.evaluate(model, "valid")["loss"]
    assert first == task.nll(model, subset(task.data.valid, torch.arange(10).numpy())) != whole


def test_good_settings_pass_the_check(tmp_path):
    """Every task's own settings and every experiment preset, at both scales, pass."""
    for task_name in TINY:
        cls = get_task_class(task_name)
        cls.check_config(compose_cfg(tmp_path, task_name))
        cls.check_config(compose_cfg(tmp_path, task_name, "scale=paper"))
    for preset in sorted(p.stem for p in (REPO / "configs" / "experiment").glob("*.yaml")):
        for scale in ("mini", "paper"):
            with initialize_config_dir(config_dir=CONFIGS, version_base="1.3"):
                cfg = compose("train", overrides=[f"experiment={preset}", f"scale={scale}"])
            get_task_class(cfg.task.name).check_config(cfg)


@pytest.mark.slow
def test_the_cli_refuses_a_bad_decode_setting_at_start(tmp_path):
    """Before: task.decode.beam=0 trained every step, then the final beam search crashed (rc 1)."""
    cmd = [sys.executable, "-m", "rmsnorm_repro.train", "task=transformer", "norm=layernorm", "task.decode.beam=0",
           f"hydra.run.dir={tmp_path / 'run'}", f"paths.cache_dir={tmp_path / 'cache'}", *TINY["transformer"]]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**__import__("os").environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": "disabled"})
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.strip().splitlines()[-1] == "error: task.decode.beam must be an integer >= 1, got 0"
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "run" / "metrics.jsonl").exists()
