"""task=reader: CNN .question loader on tiny files, synthetic data, batches, masking, tiny training."""
import json

import pytest
import torch
from omegaconf import OmegaConf

from rmsnorm_repro.norms import build_normalization
from rmsnorm_repro.tasks.reader.data import collate, entity_number, load_cnn, parse_question, synthetic_reader
from rmsnorm_repro.tasks.reader.task import ReaderTask

QUESTION = """http://web.archive.org/web/2015/http://www.cnn.com/{n}

( @entity1 ) -- @entity3 met @entity5 in @entity7 on {word} . the talks went well .

@placeholder met @entity5 in @entity7

@entity3

@entity1:CNN
@entity3:Obama
@entity5:Merkel
@entity7:Berlin
"""


def write_cnn(root, words=None):
    """Two .question files per split in the DeepMind Q&A layout; valid/test use unseen words."""
    words = words or {"training": "monday", "validation": "tuesday", "test": "sunday"}
    for split, word in words.items():
        folder = root / "questions" / split
        folder.mkdir(parents=True)
        for n in range(2):
            (folder / f"{split}{n}.question").write_text(QUESTION.format(n=n, word=word))


def synthetic_cfg(**train):
    sizes = dict(seed=7, entities=8, relations=6, filler_words=10, doc_entities=3, facts=2, distractors=1,
                 train_size=2000, valid_size=200, test_size=200)
    return OmegaConf.create({
        "seed": 1,
        "data": {"name": "synthetic", "root": None},
        "task": {"name": "reader", "model": {"emb_dim": 16, "hidden": 16, "forget_bias": 1.0},
                 "eval_batch_size": 64, "synthetic": sizes},
        "train": {"batch_size": 16, **train},
    })


def test_parse_question_blocks():
    context, query, answer, listed = parse_question(QUESTION.format(n=0, word="monday"))
    assert context[:3] == ["(", "@entity1", ")"] and query[0] == "@placeholder"
    assert answer == "@entity3" and listed == ["@entity1", "@entity3", "@entity5", "@entity7"]
    assert entity_number("@entity17") == 17 and entity_number("@placeholder") is None
    with pytest.raises(ValueError, match="not a DeepMind Q&A"):
        parse_question("http://x\n\njust one block", "bad.question")


def test_cnn_loader_real_layout(tmp_path):
    write_cnn(tmp_path)
    data = load_cnn({"root": str(tmp_path), "max_doc_len": 6})
    assert {k: len(v) for k, v in data.splits.items()} == {"train": 2, "valid": 2, "test": 2}
    ex = data.splits["train"][0]
    assert ex.answer == 3 and ex.candidates == [1, 3, 5, 7] and data.n_entities == 8
    assert len(ex.doc) == 6  # length limit
    assert [data.vocab[i] for i in ex.query.tolist()] == ["@placeholder", "met", "@entity5", "in", "@entity7"]
    # unseen valid word -> <unk>, entities kept verbatim (anonymized ids)
    full = load_cnn({"root": str(tmp_path)})
    assert "monday" in full.vocab and "tuesday" not in full.vocab  # vocabulary from training only
    assert "monday" not in data.vocab  # ... from what the model reads: after the length limit
    valid_tokens = [full.vocab[i] for i in full.splits["valid"][0].doc.tolist()]
    assert "<unk>" in valid_tokens and "@entity3" in valid_tokens


def test_cnn_loader_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="data.root"):
        load_cnn({"root": str(tmp_path / "nowhere")})
    with pytest.raises(ValueError, match="data.root"):
        load_cnn({"root": None})


def test_synthetic_answer_is_written_in_the_document():
    data = synthetic_reader(synthetic_cfg().task.synthetic)
    vocab = data.vocab
    for ex in data.splits["train"][:200]:
        doc, query = [vocab[i] for i in ex.doc.tolist()], [vocab[i] for i in ex.query.tolist()]
        slot = query.index("@placeholder")
        fact = query[:slot] + [f"@entity{ex.answer}"] + query[slot + 1 :]
        hits = [t for t in range(len(doc) - 2) if doc[t : t + 3] == fact]
        assert len(hits) == 1 and ex.answer in ex.candidates and len(ex.candidates) >= 2


def test_train_batch_is_pure_and_shards_by_slicing():
    task = ReaderTask(synthetic_cfg(), build_normalization("none"), torch.device("cpu"))
    a, b = task.train_batch(5), task.train_batch(5)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(a["answer"], task.train_batch(6)["answer"])
    halves = [task.train_batch(5, rank, 2) for rank in (0, 1)]
    assert torch.equal(torch.cat([h["answer"] for h in halves]), a["answer"])


def test_prediction_ignores_padding_and_non_candidates():
    task = ReaderTask(synthetic_cfg(), build_normalization("rmsnorm"), torch.device("cpu"))
    model = task.build_model().eval()
    examples = task.data.splits["valid"][:6]
    batch = collate(examples, task.data.n_entities, torch.device("cpu"))
    logits = model(batch["doc"], batch["doc_mask"], batch["query"], batch["query_mask"], batch["candidates"])
    assert torch.isinf(logits[~batch["candidates"]]).all() and torch.isfinite(logits[batch["candidates"]]).all()
    for row, ex in enumerate(examples):
        alone = collate([ex], task.data.n_entities, torch.device("cpu"))
        single = model(alone["doc"], alone["doc_mask"], alone["query"], alone["query_mask"], alone["candidates"])
        torch.testing.assert_close(single[0][alone["candidates"][0]], logits[row][batch["candidates"][row]],
                                   atol=1e-5, rtol=1e-5)


def test_tiny_training_beats_chance():
    torch.manual_seed(0)
    task = ReaderTask(synthetic_cfg(), build_normalization("rmsnorm"), torch.device("cpu"))
    model = task.build_model()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for step in range(80):
        model.train()
        loss, n = task.loss(model, task.train_batch(step))
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0)
        optimizer.step()
    model.eval()
    metrics = task.evaluate(model, "valid")
    chance = sum(1 / len(e.candidates) for e in task.data.splits["valid"]) / len(task.data.splits["valid"])
    assert metrics["error"] == pytest.approx(1 - metrics["accuracy"])
    assert metrics["accuracy"] > chance + 0.15, (metrics, chance)  # chance ~0.37; reaches ~0.6


def test_cnn_end_to_end_through_the_task(tmp_path):
    write_cnn(tmp_path)
    cfg = synthetic_cfg()
    cfg.data = {"name": "cnn", "root": str(tmp_path), "vocab_size": None, "max_doc_len": None, "limit": None}
    task = ReaderTask(cfg, build_normalization("layernorm"), torch.device("cpu"))
    model = task.build_model()
    loss, n = task.loss(model, task.train_batch(0))
    loss.backward()
    assert n == 16 and torch.isfinite(loss)
    model.eval()
    assert set(task.evaluate(model, "test")) == {"accuracy", "error"}


def test_tiny_bn_lstm_run_through_the_runner(tmp_path):
    """The real config files + the runner with BN-LSTM: accuracy and error land in the run's files."""
    from rmsnorm_repro.runner import run
    from runner_fixtures.helpers import compose_cfg

    cfg = compose_cfg([
        "task=reader", "norm=batchnorm", f"paths.runs_dir={tmp_path}", "train.steps=10", "train.eval_every=5",
        "train.checkpoint_every=10", "train.batch_size=8", "task.model.emb_dim=8", "task.model.hidden=8",
        "task.synthetic.train_size=100", "task.synthetic.valid_size=20", "task.synthetic.test_size=20",
    ])
    summary = run(cfg, tmp_path / "run")
    assert summary["status"] == "completed" and {"accuracy", "error"} <= set(summary["final"])
    evals = [r for r in map(json.loads, (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()) if "error" in r]
    assert [r["step"] for r in evals] == [5, 10]
