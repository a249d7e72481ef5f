"""Translation data: the synthetic pair, every loader on tiny files in its real format, the cached
BPE vocabulary, and the deterministic length-bucketed batches."""
import gzip
import importlib.util
import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from rmsnorm_repro.tasks.translation import synthetic
from rmsnorm_repro.tasks.translation.data import (
    Encoded, TranslationData, collate, load_corpus, make_buckets, read_lines, subset,
)
from rmsnorm_repro.tasks.translation.vocab import BOS, EOS, PAD, build_vocab, corpus_hash

SYN = dict(seed=7, nouns=12, adjectives=6, verbs=6, max_adjectives=2, train=600, valid=40, test=40, vocab_size=120)


def run_cfg(tmp_path, data=None, **task):
    return OmegaConf.create({
        "seed": 3,
        "paths": {"cache_dir": str(tmp_path / "cache"), "data_dir": str(tmp_path / "data")},
        "data": data or {"name": "synthetic", "root": None},
        "task": {"max_len": 80, "synthetic": SYN, **task},
    })


# The synthetic language -------------------------------------------------------------------------

def test_synthetic_is_a_pure_function_of_its_seed():
    a, b = synthetic.generate(SYN), synthetic.generate(SYN)
    assert a == b
    assert synthetic.generate({**SYN, "seed": 8})["train"] != a["train"]
    train = set(a["train"][0])
    assert not train & set(a["valid"][0]) and not train & set(a["test"][0]), "held-out sentences leak into train"
    assert len(set(a["valid"][0])) == len(a["valid"][0])


def test_synthetic_target_needs_reordering_and_agreement():
    lang = synthetic.Language(SYN["seed"], SYN["nouns"], SYN["adjectives"], SYN["verbs"])
    verbs = dict(lang.classes["verb"])
    src, tgt = synthetic.generate(SYN)["train"]
    for s, t in zip(src, tgt):
        assert s[0].isupper() and t[0].isupper() and s.endswith(".") and t.endswith(".")
        s_words, t_words = s.rstrip(".").lower().split(), t.rstrip(".").lower().split()
        v_pos = next(i for i, w in enumerate(s_words) if w in verbs)
        stem = verbs[s_words[v_pos]]
        t_pos = next(i for i, w in enumerate(t_words) if w.startswith(stem) and w[len(stem):] in synthetic.VERB_SUFFIX)
        # agreement: the verb's suffix is the subject's number, which the source marks only on the noun
        subject_plural = s_words[v_pos - 1].endswith(synthetic.SRC_PLURAL)
        assert t_words[t_pos] == stem + synthetic.VERB_SUFFIX[subject_plural]
        # reordering: SVO -> SOV, the verb moves behind the object
        assert t_pos > v_pos + 1
    other = synthetic.Language(SYN["seed"] + 1, SYN["nouns"], SYN["adjectives"], SYN["verbs"])
    assert other.classes["verb"] != lang.classes["verb"], "another seed is another language"


# Loaders on tiny files in their real formats ----------------------------------------------------

def write_split(root: Path, split: str, lang: str, lines, gz: bool):
    root.mkdir(parents=True, exist_ok=True)
    text = "".join(line + "\n" for line in lines)
    if gz:
        with gzip.open(root / f"{split}.{lang}.gz", "wt", encoding="utf-8") as f:
            f.write(text)
    else:
        (root / f"{split}.{lang}").write_text(text, encoding="utf-8")


def multi30k_layout(root: Path, n_train=30):
    en = [f"A man number {i} rides a bike." for i in range(n_train)]
    de = [f"Ein Mann Nummer {i} fährt Fahrrad." for i in range(n_train)]
    for lang, lines in (("en", en), ("de", de)):
        write_split(root, "train", lang, lines, gz=True)
        write_split(root, "val", lang, lines[:5], gz=True)
        write_split(root, "test_2016_flickr", lang, lines[5:9], gz=False)
    return en, de


def test_text_loader_reads_the_multi30k_layout(tmp_path):
    en, de = multi30k_layout(tmp_path / "m30k")
    data = {"name": "text", "root": str(tmp_path / "m30k"), "src": "en", "tgt": "de", "train": "train",
            "valid": "val", "test": ["test_2016_flickr", "val"], "vocab_size": 100}
    c = load_corpus(run_cfg(tmp_path, data))
    assert c.train == (en, de) and c.valid == (en[:5], de[:5])
    assert set(c.tests) == {"test_2016_flickr", "val"} and c.tests["test_2016_flickr"] == (en[5:9], de[5:9])
    single = load_corpus(run_cfg(tmp_path, {**data, "test": "test_2016_flickr"}))
    assert set(single.tests) == {"test"}, "one test split is reported as test_bleu"
    multi = load_corpus(run_cfg(tmp_path, {**data, "name": "multi30k", "test": ["test_2016_flickr"]}))
    assert multi.train == (en, de) and set(multi.tests) == {"test"}


def test_the_record_names_a_data_folder_without_this_machines_paths(tmp_path, monkeypatch):
    multi30k_layout(tmp_path / "data" / "m30k")
    data = {"name": "text", "src": "en", "tgt": "de", "train": "train", "valid": "val", "test": "test_2016_flickr",
            "vocab_size": 100}
    cfg = run_cfg(tmp_path, {**data, "root": str(tmp_path / "data" / "m30k")})  # paths.data_dir = tmp/data
    assert load_corpus(cfg).info["data"] == "text:<data_dir>/m30k"
    elsewhere = tmp_path / "corpora" / "multi30k"
    multi30k_layout(elsewhere)
    cfg = run_cfg(tmp_path, {**data, "root": str(elsewhere)})
    assert load_corpus(cfg).info["data"] == "text:.../corpora/multi30k"
    monkeypatch.chdir(tmp_path)  # a checkout's own folder: relative to it
    assert load_corpus(cfg).info["data"] == "text:corpora/multi30k"
    assert str(tmp_path) not in str(load_corpus(cfg).info)


def test_text_loader_errors_are_clear(tmp_path):
    multi30k_layout(tmp_path / "m")
    data = {"name": "text", "root": str(tmp_path / "m"), "src": "en", "tgt": "fr", "train": "train", "valid": "val", "test": []}
    with pytest.raises(FileNotFoundError, match=r"train\.fr"):
        load_corpus(run_cfg(tmp_path, data))
    write_split(tmp_path / "m", "train", "fr", ["une"], gz=False)
    with pytest.raises(ValueError, match="aligned"):
        load_corpus(run_cfg(tmp_path, data))
    with pytest.raises(ValueError, match="data.root"):
        load_corpus(run_cfg(tmp_path, {**data, "root": None}))


def test_multi30k_without_root_or_network_says_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    data = {"name": "multi30k", "root": None, "src": "en", "tgt": "de", "train": "train", "valid": "val", "test": []}
    with pytest.raises(FileNotFoundError, match="data.root"):
        load_corpus(run_cfg(tmp_path, data))


def test_wmt14_loader_reads_a_saved_hub_dataset(tmp_path):
    """A local DatasetDict in the hub's schema ({"translation": {"de", "en"}}), read through datasets."""
    import datasets

    def rows(n, tag):
        return {"translation": [{"de": f"Das ist {tag} Satz {i}.", "en": f"This is {tag} sentence {i}."} for i in range(n)]}

    root = tmp_path / "wmt14"
    datasets.DatasetDict({
        "train": datasets.Dataset.from_dict(rows(40, "train")),
        "validation": datasets.Dataset.from_dict(rows(6, "dev")),
        "test": datasets.Dataset.from_dict(rows(7, "test")),
    }).save_to_disk(str(root))
    write_split(root, "newstest2017", "en", ["This is 2017."] * 3, gz=False)
    write_split(root, "newstest2017", "de", ["Das ist 2017."] * 3, gz=False)
    write_split(root, "newstest2014-filtered", "en", ["This is test sentence 1."] * 5, gz=False)
    write_split(root, "newstest2014-filtered", "de", ["Das ist test Satz 1."] * 5, gz=False)
    data = {"name": "wmt14", "root": str(root), "src": "en", "tgt": "de", "vocab_size": 100}
    c = load_corpus(run_cfg(tmp_path, data))
    assert c.train[0][3] == "This is train sentence 3." and c.train[1][3] == "Das ist train Satz 3."
    assert c.valid[0][0] == "This is dev sentence 0."
    # both newstest2014 variants are scored: the full set (the paper's Test14 column) and sacreBLEU's filtered one
    assert set(c.tests) == {"test14", "test14_filtered", "test17"} and len(c.tests["test14"][0]) == 7
    assert len(c.tests["test14_filtered"][0]) == 5 and c.tests["test17"][1] == ["Das ist 2017."] * 3
    assert "newstest2014 full (7 lines" in c.info["test14"] and "filtered (5 lines" in c.info["test14_filtered"]
    # offline and no saved copy: one clear instruction
    with pytest.raises(FileNotFoundError, match="make data-wmt14"):
        load_corpus(run_cfg(tmp_path, {**data, "root": str(tmp_path / "absent")}))


def test_read_lines_prefers_plain_then_gz(tmp_path):
    write_split(tmp_path, "x", "en", ["gz"], gz=True)
    assert read_lines(tmp_path, "x", "en") == ["gz"]


# Vocabulary -----------------------------------------------------------------------------------

def test_vocab_is_trained_once_and_keyed_by_corpus_and_settings(tmp_path):
    src, tgt = synthetic.generate(SYN)["train"]
    key = corpus_hash(src, tgt)
    v1 = build_vocab(src, tgt, 120, tmp_path, key)
    mtime = os.stat(v1.model_file).st_mtime_ns
    v2 = build_vocab(src, tgt, 120, tmp_path, key)
    assert v2.model_file == v1.model_file and os.stat(v2.model_file).st_mtime_ns == mtime
    assert build_vocab(src, tgt, 100, tmp_path, key).model_file != v1.model_file
    assert corpus_hash(src[1:], tgt[1:]) != key
    assert (v1.pad_id, v1.unk_id, v1.bos_id, v1.eos_id) == (PAD, 0 + 1, BOS, EOS)
    ids = v1.encode(src[:5])
    assert v1.decode(ids) == src[:5], "BPE must round-trip raw text (detokenization)"
    assert v1.decode([ids[0] + [EOS] + ids[1]]) == [src[0]], "everything after EOS is dropped"


def test_encoding_chunk_by_chunk_gives_the_arrays_of_encoding_at_once(tmp_path):
    src, tgt = synthetic.generate(SYN)["train"]
    vocab = build_vocab(src, tgt, 120, tmp_path, corpus_hash(src, tgt))
    src, tgt = src[:50] + [""], tgt[:50] + ["x"]  # an empty sentence keeps its place
    whole = Encoded(vocab.encode(src), vocab.encode(tgt))
    for chunk in (7, 51, 1000):
        chunked = Encoded.encode(vocab, (src, tgt), chunk=chunk)
        for key in ("src", "src_off", "tgt", "tgt_off"):
            assert np.array_equal(getattr(chunked, key), getattr(whole, key)), (chunk, key)
            assert getattr(chunked, key).dtype == getattr(whole, key).dtype
    empty = Encoded.encode(vocab, ([], []))
    assert len(empty) == 0 and empty.src.dtype == np.int32


def test_the_first_preparation_measurement_runs_the_real_steps_on_generated_text(tmp_path, capsys):
    """scripts/measure_first_preparation.py (the README's WMT14-size numbers), at 300 pairs."""
    spec = importlib.util.spec_from_file_location("measure", Path(__file__).resolve().parents[2] / "scripts" /
                                                  "measure_first_preparation.py")
    measure = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(measure)
    assert measure.main(["--pairs", "300", "--work", str(tmp_path), "--vocab-size", "300", "--lexicon", "500"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("300 pairs, ") and "bpe" in out and "tokenize" in out and "peak RSS" in out
    lines = (tmp_path / "text" / "train.de").read_text().splitlines()
    assert len(lines) == 300 and all(20 <= len(line.split()) <= 30 for line in lines)
    assert list((tmp_path / "cache" / "spm").glob("*.model"))
    # --nematus: data=wmt14_nematus' preparation on the same text, no BPE: every word is in the dictionaries
    assert measure.main(["--pairs", "300", "--work", str(tmp_path), "--lexicon", "500", "--nematus"]) == 0
    out = capsys.readouterr().out
    words = sum(len(line.split()) for side in ("en", "de") for line in (tmp_path / "text" / f"train.{side}").read_text().splitlines())
    assert out.startswith(f"300 pairs, {words:,} subwords; ") and "dictionaries" in out and "bpe" not in out
    dictionary = json.loads((tmp_path / "text" / "train.de.json").read_text())
    assert dictionary["eos"] == 0 and dictionary["UNK"] == 1 and sorted(dictionary.values()) == list(range(len(dictionary)))


# Batches --------------------------------------------------------------------------------------

def test_collate_builds_shifted_targets_and_masks():
    enc = Encoded([[5, 6, 7], [8]], [[9, 10], [11, 12, 13]])
    b = collate(enc, [0, 1])
    assert b["src"].tolist() == [[5, 6, 7, EOS], [8, EOS, PAD, PAD]]
    assert b["tgt_in"].tolist() == [[BOS, 9, 10, PAD], [BOS, 11, 12, 13]]
    assert b["tgt_out"].tolist() == [[9, 10, EOS, PAD], [11, 12, 13, EOS]]
    assert b["src_mask"].sum(1).tolist() == [4, 2] and b["tgt_mask"].sum(1).tolist() == [3, 4]


def test_token_buckets_respect_the_budget_and_sort_by_length():
    rng = np.random.default_rng(0)
    s, t = rng.integers(1, 30, 500), rng.integers(1, 30, 500)
    buckets = make_buckets(s, t, "tokens", 200)
    assert sorted(np.concatenate(buckets).tolist()) == list(range(500))
    for b in buckets:
        assert len(b) * (np.maximum(s[b], t[b]).max() + 1) <= 200
    assert [len(b) for b in make_buckets(s, t, "sentences", 64)][:-1] == [64] * 7
    with pytest.raises(ValueError, match="batch_tokens"):
        make_buckets(s, t, "tokens", 10)


def test_train_batches_are_a_pure_function_of_seed_and_step(tmp_path):
    cfg = run_cfg(tmp_path, max_len=30)
    a, b = TranslationData(cfg, "tokens", 300), TranslationData(cfg, "tokens", 300)
    assert a.train.src_len.max() <= 30 and a.train.tgt_len.max() <= 30 and len(a.train) < SYN["train"]
    n = len(a.buckets)
    for step in (0, 5, n + 3):
        x, y = a.train_batch(step), b.train_batch(step)
        assert all(torch.equal(x[k], y[k]) for k in x)
        assert x["src"].numel() <= 300 and x["tgt_in"].numel() <= 300
    epoch0 = np.concatenate([a.batch_indices(s) for s in range(n)])
    assert sorted(epoch0.tolist()) == list(range(len(a.train))), "an epoch visits every pair once"
    epoch1 = [a.batch_indices(s).tolist() for s in range(n, 2 * n)]
    assert epoch1 != [a.batch_indices(s).tolist() for s in range(n)], "each epoch reshuffles the buckets"
    other_seed = TranslationData(OmegaConf.merge(cfg, {"seed": 4}), "tokens", 300)
    assert [other_seed.batch_indices(s).tolist() for s in range(n)] != [a.batch_indices(s).tolist() for s in range(n)]
    # ranks split the global batch: together they hold exactly its sentences
    full = a.train_batch(7)
    shards = [a.train_batch(7, rank=r, world_size=2) for r in range(2)]
    assert sum(s["src"].shape[0] for s in shards) == full["src"].shape[0]
    assert sum(int(s["tgt_mask"].sum()) for s in shards) == int(full["tgt_mask"].sum())


def nematus_epoch(shuffled_pairs, batch_size, maxibatch_size):
    """Nematus' TextIterator over one epoch of an already shuffled corpus (data_iterator.py:101,136-216):
    fill a buffer of batch_size * maxibatch_size pairs, sort it by max(len source, len target), pop batches
    of batch_size off the end. Pairs are (id, src_len, tgt_len); returns the batches' ids."""
    k, stream, batches = batch_size * maxibatch_size, list(shuffled_pairs), []
    while stream:
        buffer, stream = stream[:k], stream[k:]
        tlen = np.array([max(s, t) for _, s, t in buffer])
        buffer = [buffer[i] for i in tlen.argsort(kind="stable")]
        while buffer:
            batch = []
            while buffer and len(batch) < batch_size:
                batch.append(buffer.pop()[0])
            batches.append(batch)
    return batches


def test_rnnsearch_batches_follow_nematus_maxibatches(tmp_path):
    cfg = run_cfg(tmp_path, max_len=30, maxibatch=3)
    data, again = TranslationData(cfg, "sentences", 16), TranslationData(cfg, "sentences", 16)
    n = len(data.train)
    per_epoch = -(-n // 16)
    for epoch in (0, 1):
        perm = np.random.default_rng([3, epoch]).permutation(n)  # the epoch's shuffle, drawn from (seed, epoch)
        want = nematus_epoch([(int(i), int(data.train.src_len[i]), int(data.train.tgt_len[i])) for i in perm], 16, 3)
        got = [data.batch_indices(epoch * per_epoch + s).tolist() for s in range(per_epoch)]
        assert got == want
    assert len(want) == per_epoch and sorted(sum(want, [])) == list(range(n))
    lengths = [int(np.maximum(data.train.src_len, data.train.tgt_len)[b].max()) for b in got[:3]]
    assert lengths == sorted(lengths, reverse=True), "a maxibatch's batches come longest first"
    # resumable: a fresh object (a resumed run) gives the same batch for any step
    assert all(np.array_equal(data.batch_indices(s), again.batch_indices(s)) for s in (0, 5, per_epoch + 2))
    with pytest.raises(ValueError, match="task.maxibatch applies to batches of sentences"):
        TranslationData(cfg, "tokens", 300)


def test_subset_keeps_the_chosen_sentences_in_order():
    enc = Encoded([[5], [6, 7], [], [8, 9, 10]], [[11, 12], [13], [14], [15]])
    sub = subset(enc, np.array([3, 1, 2]))
    assert [sub.src_ids(i).tolist() for i in range(3)] == [[8, 9, 10], [6, 7], []]
    assert [sub.tgt_ids(i).tolist() for i in range(3)] == [[15], [13], [14]]


def test_damaged_tokenizer_and_corpus_caches_are_rebuilt_with_a_log_line(tmp_path, caplog):
    cfg = run_cfg(tmp_path, max_len=30)
    first = TranslationData(cfg, "tokens", 300)
    model, = (tmp_path / "cache" / "spm").glob("*.model")
    corpora = sorted((tmp_path / "cache" / "tokenized").glob("*.pt"))
    assert corpora
    model.write_bytes(b"not a sentencepiece model")
    for path in corpora:
        path.write_bytes(path.read_bytes()[:100])  # a copy cut short
    with caplog.at_level("WARNING"):
        again = TranslationData(cfg, "tokens", 300)
    damaged = [r.getMessage() for r in caplog.records if "is damaged" in r.getMessage()]
    assert len(damaged) == 1 + len(corpora) and all("rebuilding it" in m for m in damaged)
    assert all(torch.equal(first.train_batch(3)[k], again.train_batch(3)[k]) for k in first.train_batch(3))


def test_a_dev_split_is_held_out_from_the_end_of_train(tmp_path):
    """data.dev_pairs = N: the last N training pairs become dev (the split that chooses the weights); train
    keeps the rest, valid and the tests are untouched, data_info says which split selects."""
    en, de = multi30k_layout(tmp_path / "m30k")
    data = {"name": "text", "root": str(tmp_path / "m30k"), "src": "en", "tgt": "de", "train": "train",
            "valid": "val", "test": "test_2016_flickr", "vocab_size": 100}
    held = load_corpus(run_cfg(tmp_path, {**data, "dev_pairs": 4}))
    assert held.train == (en[:26], de[:26]) and held.dev == (en[26:], de[26:])
    assert held.valid == (en[:5], de[:5]) and held.tests["test"] == (en[5:9], de[5:9])
    assert held.info["selection"] == "dev: the last 4 training pairs, held out (train keeps 26)"
    plain = load_corpus(run_cfg(tmp_path, data))
    assert plain.dev is None and plain.train == (en, de) and plain.info["selection"].startswith("valid")
    with pytest.raises(ValueError, match="data.dev_pairs=30 would hold out all 30 training pairs; choose fewer than 30"):
        load_corpus(run_cfg(tmp_path, {**data, "dev_pairs": 30}))


def test_a_split_both_plain_and_gzipped_is_refused_naming_both(tmp_path):
    write_split(tmp_path, "x", "en", ["plain"], gz=False)
    write_split(tmp_path, "x", "en", ["gz"], gz=True)  # which one is the data? never guessed silently
    with pytest.raises(ValueError, match=r"both .*x\.en and x\.en\.gz.*keep one"):
        read_lines(tmp_path, "x", "en")
