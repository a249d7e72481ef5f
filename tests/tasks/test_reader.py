"""task=reader: CNN loaders (top4 pickles, .question files) on tiny files, synthetic data, batches,
the authors' model options, entity permutation, masking, tiny training."""
import json
import pickle

import pytest
import torch
from omegaconf import OmegaConf

from rmsnorm_repro.norms import build_normalization
from rmsnorm_repro.tasks.reader.data import entity_number, load_cnn, parse_question, synthetic_reader, top_sentences
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


def synthetic_cfg(model=None, permute=True, **train):
    sizes = dict(seed=7, entities=8, relations=6, filler_words=10, doc_entities=3, facts=2, distractors=1,
                 train_size=2000, valid_size=200, test_size=200)
    m = {"emb_dim": 16, "hidden": 16, "forget_bias": 0.0, "dropout": 0.0, "use_dq_sims": False,
         "use_desc_skip_c_g": True, "learn_h0": True, "entity_mask": False, "init": "cooijmans",
         "input_bias": "both", **(model or {})}
    return OmegaConf.create({
        "seed": 1,
        "data": {"name": "synthetic", "root": None},
        "task": {"name": "reader", "model": m, "permute_entities": permute, "eval_batch_size": 64,
                 "synthetic": sizes},
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
    # every answer class has its own output: @entity0 .. @entity7 are all in the vocabulary
    assert [data.vocab[i] for i in data.answer_ids] == [f"@entity{c}" for c in range(8)]
    assert data.info["layout"] == "questions"
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
    for key in ("answer", "target", "doc"):
        assert torch.equal(torch.cat([h[key] for h in halves]), a[key])


def test_training_batches_permute_the_entities_consistently():
    """pkl_data_iterator.DataIterator(permute_ents=True): one permutation of all entity ids per batch,
    applied to documents, queries and answers alike; other words stay; evaluation reads the data as is."""
    task = ReaderTask(synthetic_cfg(), build_normalization("none"), torch.device("cpu"))
    plain = ReaderTask(synthetic_cfg(permute=False), build_normalization("none"), torch.device("cpu"))
    vocab, entities = task.data.vocab, set(task.data.entity_ids())
    a, b = task.train_batch(3), plain.train_batch(3)
    table = task.entity_permutation(3)
    assert sorted(table[sorted(entities)].tolist()) == sorted(entities)  # a permutation of the entity ids
    assert not torch.equal(table, torch.arange(len(vocab)))
    for key in ("doc", "query", "target"):
        assert torch.equal(a[key], table[b[key]])
        words = ~torch.isin(b[key], torch.tensor(sorted(entities)))
        assert torch.equal(a[key][words], b[key][words])
    assert not torch.equal(table, task.entity_permutation(4))  # a new permutation per step
    for row in range(len(a["target"])):  # the permuted answer still sits in the permuted document
        ids = a["doc"][row].tolist()
        query = [vocab[i] for i in a["query"][row].tolist() if i]
        slot = query.index("@placeholder")
        fact = [i for i in a["query"][row].tolist() if i]
        fact[slot] = int(a["target"][row])
        assert any(ids[t:t + 3] == fact for t in range(len(ids) - 2))
    batch = task.prepare(task.data.splits["valid"][:4])  # evaluation: no permutation
    assert torch.equal(batch["target"], task.answer_ids[batch["answer"]])


def test_output_runs_over_the_vocabulary_and_the_entity_mask_is_an_option():
    """The authors' n_words_ans = emb_sz and cost_mask = None: a softmax over every word; with
    task.model.entity_mask the logits of all but the document's entities are -inf."""
    task = ReaderTask(synthetic_cfg(), build_normalization("rmsnorm"), torch.device("cpu"))
    model = task.build_model().eval()
    batch = task.prepare(task.data.splits["valid"][:6])
    logits = task.forward(model, batch)
    assert logits.shape == (6, len(task.data.vocab)) and torch.isfinite(logits).all()
    assert "vocab_candidates" not in batch

    masked = ReaderTask(synthetic_cfg({"entity_mask": True}), build_normalization("rmsnorm"), torch.device("cpu"))
    examples = masked.data.splits["valid"][:6]
    batch = masked.prepare(examples)
    logits = masked.forward(model, batch)
    allowed = batch["vocab_candidates"]
    for row, ex in enumerate(examples):
        assert set(allowed[row].nonzero().flatten().tolist()) == {masked.data.answer_ids[c] for c in ex.candidates}
    assert torch.isinf(logits[~allowed]).all() and torch.isfinite(logits[allowed]).all()
    for row, ex in enumerate(examples):  # padding does not change a document's prediction
        alone = masked.prepare([ex])
        single = masked.forward(model, alone)
        torch.testing.assert_close(single[0][alone["vocab_candidates"][0]], logits[row][allowed[row]],
                                   atol=1e-5, rtol=1e-5)
    permuted = masked.prepare(examples, masked.entity_permutation(0) if masked.permute else None)
    assert torch.equal(permuted["vocab_candidates"].sum(1), allowed.sum(1))


def test_the_authors_model_options():
    """dropout on the embeddings (a fresh mask per direction) and on g; use_dq_sims; the document-mean
    skip into g; a learned h0 per LSTM direction; Cooijmans' init (0.05 x orthogonal square blocks)."""
    from rmsnorm_repro.tasks.reader.model import AttentiveReader

    torch.manual_seed(0)
    kw = dict(max_doc_len=9, max_query_len=4)
    full = AttentiveReader(30, 30, build_normalization("rmsnorm"), emb_dim=8, hidden=8, **kw)
    assert full.att_bilinear is not None and full.out_mean is not None
    assert full.doc_encoder.fwd.h0 is not None and full.query_encoder.bwd.h0 is not None
    u = full.doc_encoder.fwd.hidden_proj.weight.detach()[:8]
    torch.testing.assert_close(u @ u.T, 0.05 ** 2 * torch.eye(8), atol=1e-7, rtol=0)  # ortho_weight(scale=0.05)
    w = full.att_doc.weight.detach()  # (8, 16): U(-r, r), r = sqrt(6 / (16 + 8 + 1))
    assert w.abs().max() <= (6 / 25) ** 0.5
    assert torch.all(full.doc_encoder.fwd.bias == 0)  # forget bias 0, as their LSTMs
    bare = AttentiveReader(30, 30, build_normalization("rmsnorm"), emb_dim=8, hidden=8, use_dq_sims=False,
                           use_desc_skip=False, learn_h0=False, **kw)
    assert bare.att_bilinear is None and bare.out_mean is None and bare.doc_encoder.fwd.h0 is None

    doc, query = torch.randint(2, 30, (3, 9)), torch.randint(2, 30, (3, 4))
    doc_mask, query_mask = torch.ones_like(doc, dtype=torch.bool), torch.ones_like(query, dtype=torch.bool)
    full.eval()
    out = full(doc, doc_mask, query, query_mask)
    torch.testing.assert_close(out, full(doc, doc_mask, query, query_mask))  # no dropout in eval
    with torch.no_grad():
        full.att_bilinear.weight.mul_(3.0)
    assert not torch.allclose(out, full(doc, doc_mask, query, query_mask))  # the dq term is used
    full.train()
    assert not torch.allclose(full(doc, doc_mask, query, query_mask), full(doc, doc_mask, query, query_mask))
    loss = full(doc, doc_mask, query, query_mask).logsumexp(-1).sum()
    loss.backward()
    assert full.doc_encoder.fwd.h0.grad.abs().sum() > 0 and full.out_mean.weight.grad.abs().sum() > 0


def test_lstm_input_bias_sits_inside_and_after_the_input_norm():
    """rlnlstm_layer: lstm_state_below = dot(x, W) + b, normalized, then preact adds b again."""
    from rmsnorm_repro.nn.lstm import NormLSTM

    torch.manual_seed(0)
    lstm = NormLSTM(3, 4, build_normalization("rmsnorm"), 5, input_bias="both")
    with torch.no_grad():
        lstm.fwd.bias.normal_()
    seen = []
    hook = lstm.fwd.norm_x.norm.register_forward_hook(lambda mod, inp, out: seen.append(inp[0]))
    x = torch.randn(2, 5, 3)
    lstm(x)
    hook.remove()
    torch.testing.assert_close(seen[0], (x.transpose(0, 1) @ lstm.fwd.input_proj.weight.T) + lstm.fwd.bias)
    with pytest.raises(ValueError, match="input_bias"):
        NormLSTM(3, 4, build_normalization("none"), 5, input_bias="before")


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
    assert metrics["accuracy"] > chance + 0.15, (metrics, chance)  # chance among the candidates ~0.37


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


# top4: the pickles the authors trained on ---------------------------------------------------------
def py2_dict_pickle(words: dict[str, int]) -> bytes:
    """dict.pkl as Python 2 wrote it (preprocess_shortend.py safe_pickle, protocol 2): str keys are
    byte strings (SHORT_BINSTRING), so Python 3 reads them only with an encoding."""
    out = bytearray(b"\x80\x02}(")
    for word, i in words.items():
        raw = word.encode("utf-8")
        out += b"U" + bytes([len(raw)]) + raw
        out += b"K" + bytes([i]) if i < 256 else b"M" + i.to_bytes(2, "little")
    return bytes(out + b"u.")


TOP4_WORDS = {"NIL": 0, "EOS": 1, "UNK": 2, "NUM": 3, "@entity1": 4, "@entity3": 5, "@entity5": 6,
              "@placeholder": 7, "met": 8, "in": 9, "café": 10, ".": 11}


def write_top4(root, splits=("train4", "valid4"), n=3):
    """dict.pkl + {split}_{pass,qs,ans}.pkl as binarize_text_3parts.py wrote them (Python 2 pkl.dump,
    protocol 0): passages and questions end with EOS (1); the answer is a one-id list."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "dict.pkl").write_bytes(py2_dict_pickle(TOP4_WORDS))
    for split in splits:
        passages = [[5, 8, 6, 9, 4, 10, 11, 1]] * n  # @entity3 met @entity5 in @entity1 café . EOS
        questions = [[7, 8, 6, 1]] * n  # @placeholder met @entity5 EOS
        answers = [[5]] * n
        for part, rows in (("pass", passages), ("qs", questions), ("ans", answers)):
            (root / f"{split}_{part}.pkl").write_bytes(pickle.dumps(rows, protocol=0))


def test_top4_loader_reads_the_authors_pickles(tmp_path):
    write_top4(tmp_path)
    data = load_cnn({"root": str(tmp_path)})  # layout auto: train4_pass.pkl is there
    assert data.info == {"layout": "top4", "test_split": "valid4 (no test files)"}
    assert len(data.vocab) == 12 and data.vocab[10] == "café" and data.vocab[0] == "<pad>"
    ex = data.splits["train"][0]
    assert ex.doc.tolist() == [5, 8, 6, 9, 4, 10, 11]  # EOS dropped, as prepare_data's s[:-1]
    assert ex.query.tolist() == [7, 8, 6] and ex.answer == 5 and ex.candidates == [4, 5, 6]
    assert data.answer_ids == list(range(12)) and data.n_entities == 12  # classes are vocabulary ids
    assert data.splits["test"] is data.splits["valid"]  # the authors load no test files
    write_top4(tmp_path, splits=("test4",), n=2)
    with_test = load_cnn({"root": str(tmp_path), "limit": 1})
    assert len(with_test.splits["test"]) == 1 and with_test.info["test_split"] == "test4"
    with pytest.raises(FileNotFoundError, match="dict.pkl"):
        load_cnn({"root": str(tmp_path), "layout": "top4", "dict": "missing.pkl"})


def test_top4_through_the_task(tmp_path):
    write_top4(tmp_path, n=20)
    cfg = synthetic_cfg()
    cfg.data = {"name": "cnn", "root": str(tmp_path), "layout": "auto", "limit": None, "max_doc_len": None}
    task = ReaderTask(cfg, build_normalization("rmsnorm"), torch.device("cpu"))
    model = task.build_model()
    batch = task.train_batch(0)
    assert batch["target"].unique().numel() == 1 and int(batch["target"][0]) in (4, 5, 6)  # @entity3, permuted
    loss, n = task.loss(model, batch)
    loss.backward()
    assert n == 16 and torch.isfinite(loss)
    model.eval()
    assert set(task.evaluate(model, "test")) == {"accuracy", "error"}
    assert task.provenance()["data_info"]["layout"] == "top4"


def test_top4_pickles_that_name_code_are_refused(tmp_path):
    write_top4(tmp_path)
    (tmp_path / "train4_ans.pkl").write_bytes(pickle.dumps([[5], OmegaConf], protocol=2))
    with pytest.raises(ValueError, match="refusing to load"):
        load_cnn({"root": str(tmp_path)})
    with pytest.raises(ValueError, match="data.layout"):
        load_cnn({"root": str(tmp_path), "layout": "pickles"})


def test_questions_layout_can_keep_the_top_sentences(tmp_path):
    """data.top_sentences: the k sentences sharing the most words with the query, in document order
    (an approximation of top4, whose selection script is not public)."""
    context = "a b c . @entity1 met x . y z ! @entity3 met @entity5 in @entity7 . w".split()
    query = "@placeholder met @entity5 in @entity7".split()
    assert top_sentences(context, query, 1) == "@entity3 met @entity5 in @entity7 .".split()
    assert top_sentences(context, query, 2) == "@entity1 met x . @entity3 met @entity5 in @entity7 .".split()
    assert top_sentences(context, query, 9) == context
    write_cnn(tmp_path)
    data = load_cnn({"root": str(tmp_path), "top_sentences": 1, "layout": "questions"})
    doc = [data.vocab[i] for i in data.splits["train"][0].doc.tolist()]
    assert doc == "( @entity1 ) -- @entity3 met @entity5 in @entity7 on monday .".split()
    assert data.info == {"layout": "questions", "top_sentences": 1}


def test_paper_batches_follow_the_authors_file_order():
    """Attentive_reader bn: the training iterator has shuffle=False and drops a last partial batch
    (pkl_data_iterator.py:105,244-247,270-287); every epoch restarts it (attentive_reader.py:412-418)."""
    from rmsnorm_repro.tasks.sampling import file_order_indices

    n, b = 2000, 16  # 125 whole batches an epoch
    assert file_order_indices(n, b, 0).tolist() == list(range(16))
    assert file_order_indices(n, b, 124).tolist() == list(range(1984, 2000))
    assert file_order_indices(n, b, 125).tolist() == list(range(16)), "the next epoch repeats the order"
    assert file_order_indices(2010, b, 125).tolist() == list(range(16)), "a last partial batch is dropped"
    assert torch.cat([file_order_indices(n, b, 7, r, 2) for r in (0, 1)]).tolist() == list(range(112, 128))
    cfg = synthetic_cfg()
    cfg.task.batch_order = "file"
    task = ReaderTask(cfg, build_normalization("none"), torch.device("cpu"))
    train = task.data.splits["train"]
    want = task.prepare([train[i] for i in range(16, 32)], task.entity_permutation(1))
    got = task.train_batch(1)
    assert all(torch.equal(got[k], want[k]) for k in got)


def test_paper_reader_runs_without_top4_must_choose_their_passages(tmp_path):
    from rmsnorm_repro.tasks.reader.data import check_paper_passages

    write_cnn(tmp_path)
    data = {"name": "cnn", "root": str(tmp_path), "layout": "auto", "files": {"train": "train4"},
            "top_sentences": None, "whole_documents": False}
    cfg = OmegaConf.create({"scale": {"name": "paper"}, "data": data})
    with pytest.raises(ValueError, match="scale=paper reader: no top4 pickles .* data.whole_documents=true"):
        check_paper_passages(cfg)
    for choice in ({"whole_documents": True}, {"top_sentences": 4}):
        check_paper_passages(OmegaConf.merge(cfg, {"data": choice}))
    check_paper_passages(OmegaConf.merge(cfg, {"scale": {"name": "mini"}}))
    write_top4(tmp_path)
    check_paper_passages(cfg)  # the authors' passages: nothing to choose
