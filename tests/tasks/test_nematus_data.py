"""data=wmt14_nematus: the authors' preprocessed WMT data read as Nematus reads it, on tiny files written
in that format (wmt17_systems' BPE text with "@@ ", JSON dictionaries built as Nematus'
data/build_dictionary.py builds them), the translations' way back to plain text for BLEU, the one-line
refusals, and a short training run through the entry point."""
from __future__ import annotations

import json
import re
import sys
from collections import OrderedDict
from pathlib import Path

import numpy as np
import pytest
import sacrebleu
from omegaconf import OmegaConf

from rmsnorm_repro.tasks.translation.data import TranslationData, load_corpus
from rmsnorm_repro.tasks.translation.nematus import AUTHORS_URL, NematusVocab
from rmsnorm_repro.tasks.translation.vocab import BOS, EOS, PAD, UNK
from runner_fixtures.helpers import main_in_process, read_summary

# tokenized, truecased text as wmt17's preprocess.sh leaves it (Moses escapes: &quot;), segmented with "@@ "
EN = ["the Kat@@ ze sits on the mat .", "a dog runs &quot; fast &quot; .", "the dog sees the Kat@@ ze .",
      "a bird sings .", "the bird sees a dog ."]
DE = ["die Kat@@ ze sitzt auf der Mat@@ te .", "ein Hund läuft &quot; schnell &quot; .",
      "der Hund sieht die Kat@@ ze .", "ein Vogel singt .", "der Vogel sieht einen Hund ."]
# the raw references the BPE target side was made from (download_files.sh: newstest<year>.de)
RAW_DE = ["Die Katze sitzt auf der Matte.", 'Ein Hund läuft "schnell".', "Der Hund sieht die Katze.",
          "Ein Vogel singt.", "Der Vogel sieht einen Hund."]


def build_dictionary(path: Path) -> dict[str, int]:
    """Nematus' data/build_dictionary.py (3655c38) on one file: words by first occurrence counted, then
    numpy.argsort of the counts reversed; eos 0, UNK 1, the words from 2. Writes <path>.json."""
    freqs: OrderedDict[str, int] = OrderedDict()
    for line in path.read_text(encoding="utf-8").splitlines():
        for w in line.strip().split(" "):
            freqs[w] = freqs.get(w, 0) + 1
    words, counts = list(freqs.keys()), list(freqs.values())
    order = np.argsort(counts)[::-1]
    worddict: OrderedDict[str, int] = OrderedDict([("eos", 0), ("UNK", 1)])
    for i, k in enumerate(order):
        worddict[words[k]] = i + 2
    Path(f"{path}.json").write_text(json.dumps(worddict, indent=2, ensure_ascii=False), encoding="utf-8")
    return dict(worddict)


def write_nematus_folder(root: Path, test17: bool = True) -> Path:
    """corpus.bpe.{en,de} (+ .json), newstest2013/2014(/2017).bpe.{en,de} and the raw newstest*.de."""
    root.mkdir(parents=True, exist_ok=True)
    lines = lambda rows: "\n".join(rows) + "\n"  # noqa: E731
    (root / "corpus.bpe.en").write_text(lines(EN * 8), encoding="utf-8")
    (root / "corpus.bpe.de").write_text(lines(DE * 8), encoding="utf-8")
    for side in ("en", "de"):
        build_dictionary(root / f"corpus.bpe.{side}")
    for year in ("2013", "2014", "2017")[: 3 if test17 else 2]:
        (root / f"newstest{year}.bpe.en").write_text(lines(EN[:4]), encoding="utf-8")
        (root / f"newstest{year}.bpe.de").write_text(lines(DE[:4]), encoding="utf-8")
        (root / f"newstest{year}.de").write_text(lines(RAW_DE[:4]), encoding="utf-8")
    return root


def data_cfg(root: Path, **over) -> dict:
    cfg = OmegaConf.load(Path(__file__).resolve().parents[2] / "configs" / "data" / "wmt14_nematus.yaml")
    return OmegaConf.merge(OmegaConf.create({"data": cfg}), {"data": {"root": str(root), **over}})


def run_cfg(tmp_path: Path, root: Path, **over):
    return OmegaConf.merge(data_cfg(root, **over), {
        "seed": 1, "paths": {"cache_dir": str(tmp_path / "cache"), "data_dir": str(tmp_path / "data")},
        "task": {"max_len": 80, "maxibatch": None, "decode": {}, "synthetic": {"vocab_size": 1}}})


def nematus_ids(dictionary: dict[str, int], line: str, n_words: int | None) -> list[int]:
    """Nematus' TextIterator on one line (data_iterator.py:83-95, 138, 186-195): entries at or above
    n_words deleted, a word not in the dictionary is 1."""
    kept = {w: i for w, i in dictionary.items() if n_words is None or i < n_words}
    return [kept.get(w, 1) for w in line.split()]


def test_a_line_is_cut_at_ascii_white_space_only_as_python_2_nematus_cuts_it(tmp_path):
    """A no-break space inside a token stays in it, in the dictionary (build_dictionary.py: split(" ")) and
    in the text (data_iterator.py: a Python 2 byte string's split)."""
    root = tmp_path / "wmt"
    root.mkdir()
    (root / "c.de").write_text("3\u00a0000 Euro\n3\u00a0000 Euro\tmehr\n", encoding="utf-8")
    dictionary = build_dictionary(root / "c.de")
    assert "3\u00a0000" in dictionary and "Euro\tmehr" in dictionary  # build_dictionary splits at " " only
    vocab = NematusVocab(root / "c.de.json")
    assert vocab.encode(["3\u00a0000 Euro\tmehr"]) == [[dictionary["3\u00a0000"] + 2, dictionary["Euro"] + 2, UNK]]


@pytest.mark.parametrize("n_words", [None, 6])
def test_the_suite_reads_each_word_as_nematus_does_shifted_past_pad_and_bos(tmp_path, n_words):
    root = write_nematus_folder(tmp_path / "wmt")
    dictionary = json.loads((root / "corpus.bpe.de.json").read_text(encoding="utf-8"))
    assert dictionary["eos"] == 0 and dictionary["UNK"] == 1 and dictionary["."] == 2  # "." is the most frequent
    vocab = NematusVocab(root / "corpus.bpe.de.json", n_words)
    line = "der Hund sieht ein Zebra , nicht die Kat@@ ze ."
    want = [{0: EOS, 1: UNK}.get(i, i + 2) for i in nematus_ids(dictionary, line, n_words)]
    assert vocab.encode([line]) == [want]
    assert UNK in want and (n_words is None or max(want) < n_words + 2)
    assert len(vocab) == (max(dictionary.values()) + 1 if n_words is None else n_words) + 2
    assert not {PAD, BOS} & set(want)  # padding and the decoder's start keep ids no word has


def v04_dictionary(path: Path) -> dict[str, int]:
    """Nematus 1487724 / v0.4's build_dictionary.py: <EOS> 0, <GO> 1, <UNK> 2, the words from 3."""
    old = json.loads(Path(f"{path}.json").read_text(encoding="utf-8"))
    new = {"<EOS>": 0, "<GO>": 1, "<UNK>": 2, **{w: i + 1 for w, i in old.items() if i >= 2}}
    Path(f"{path}.json").write_text(json.dumps(new, ensure_ascii=False), encoding="utf-8")
    return new


def v04_ids(dictionary: dict[str, int], line: str, n_words: int | None) -> list[int]:
    """Nematus v0.4's TextIterator (data_iterator.py:84-95, 172-201): entries at or above the limit deleted,
    a word not in the dictionary is unk_val 2."""
    kept = {w: i for w, i in dictionary.items() if n_words is None or i < n_words}
    return [kept.get(w, 2) for w in line.split()]


@pytest.mark.parametrize("n_words", [None, 6])
def test_a_v04_dictionary_is_read_as_nematus_v04_reads_it(tmp_path, n_words):
    """v0.4 dictionaries (<EOS> 0, <GO> 1, <UNK> 2) were accepted as v0.3's: unknown words read as id 1 (<GO>),
    "<UNK>" an ordinary word (fidelity audit at f15a5c5)."""
    root = write_nematus_folder(tmp_path / "wmt")
    dictionary = v04_dictionary(root / "corpus.bpe.de")
    vocab = NematusVocab(root / "corpus.bpe.de.json", n_words, detruecase=False, detokenize=False)
    line = "der Hund sieht ein Zebra , nicht die Kat@@ ze . <UNK> <GO>"
    want = [{0: EOS, 1: BOS, 2: UNK}.get(i, i + 1) for i in v04_ids(dictionary, line, n_words)]
    assert vocab.encode([line]) == [want]
    assert want.count(UNK) >= 3 and want[-1] == BOS
    assert len(vocab) == (max(dictionary.values()) + 1 if n_words is None else n_words) + 1
    # decoding writes what v0.4's seq2words writes for the unknown id: the dictionary's "<UNK>"
    assert vocab.decode([[dictionary["Hund"] + 1, UNK, EOS]]) == ["Hund <UNK>"]
    v03 = write_nematus_folder(tmp_path / "v03")
    assert NematusVocab(v03 / "corpus.bpe.de.json", detruecase=False, detokenize=False).decode([[UNK]]) == ["UNK"]
    with pytest.raises(ValueError, match="data.n_words / data.n_words_src = 2 leaves no word of .* v0.4"):
        NematusVocab(root / "corpus.bpe.de.json", 2)


def test_a_limit_above_the_dictionary_is_bounded_by_it(tmp_path, caplog):
    """n_words 1e9 sized the model for a billion words: "can't allocate 256 GB" (reliability audit at f15a5c5)."""
    root = write_nematus_folder(tmp_path / "wmt")
    size = max(json.loads((root / "corpus.bpe.de.json").read_text(encoding="utf-8")).values()) + 1
    with caplog.at_level("INFO"):
        vocab = NematusVocab(root / "corpus.bpe.de.json", 10**9)
    assert len(vocab) == len(NematusVocab(root / "corpus.bpe.de.json")) == size + 2
    assert f"n_words 1000000000 is above the {size} ids of corpus.bpe.de.json: bounded to {size}" in caplog.text


def test_translations_go_back_to_plain_text_as_wmt17_postprocess_does_and_score_with_sacrebleu(tmp_path):
    root = write_nematus_folder(tmp_path / "wmt")
    vocab = NematusVocab(root / "corpus.bpe.de.json")
    ids = vocab.encode(DE[:2])
    # an EOS ends a hypothesis; what follows (and padding, the start id) is not text
    hyps = [ids[0] + [EOS, ids[1][0]], [BOS] + ids[1] + [EOS, PAD]]
    text = vocab.decode(hyps)
    assert text == RAW_DE[:2]  # '@@ ' joined, 'die' -> 'Die', &quot; unescaped and attached
    assert sacrebleu.corpus_bleu(text, [RAW_DE[:2]]).score == pytest.approx(100.0)
    raw = NematusVocab(root / "corpus.bpe.de.json", detruecase=False, detokenize=False).decode(hyps)
    assert raw == ["die Katze sitzt auf der Matte .", "ein Hund läuft &quot; schnell &quot; ."]
    assert sacrebleu.corpus_bleu(raw, [RAW_DE[:2]]).score < 85  # unprocessed: case and &quot; cost 19 points here
    assert vocab.decode([[UNK, vocab.encode(["Hund"])[0][0]]]) == ["UNK Hund"]  # Nematus writes an unknown id as UNK
    # tokenizer.perl -a's hyphens and escapes, and detruecase.perl's sentence starts (after ": &quot;" too)
    assert vocab.plain_text(["ein 3 @-@ Zim@@ mer @-@ Apartment kostet 5 &amp; mehr .",
                             "sie sagte : &quot; es geht &quot; ; dann ging sie ."]) == [
        "Ein 3-Zimmer-Apartment kostet 5 & mehr.", 'Sie sagte: "Es geht"; dann ging sie.']


def test_without_sacremoses_the_postprocessing_is_refused_when_the_data_is_read(tmp_path, monkeypatch):
    root = write_nematus_folder(tmp_path / "wmt")
    monkeypatch.setitem(sys.modules, "sacremoses", None)  # import fails
    with pytest.raises(ValueError, match=r"need sacremoses \(this package.s `nematus` extra\): pip install -e"):
        NematusVocab(root / "corpus.bpe.de.json")
    assert NematusVocab(root / "corpus.bpe.de.json", detruecase=False, detokenize=False).decode([[4]]) == ["."]


def test_the_corpus_pairs_bpe_text_with_raw_references_and_skips_an_absent_test_set(tmp_path):
    root = write_nematus_folder(tmp_path / "wmt", test17=False)
    corpus = load_corpus(run_cfg(tmp_path, root))
    assert corpus.train == (EN * 8, DE * 8) and corpus.valid == (EN[:4], DE[:4])
    assert set(corpus.tests) == {"test14"} and corpus.references == {"valid": RAW_DE[:4], "test14": RAW_DE[:4]}
    data = TranslationData(run_cfg(tmp_path, root), "sentences", 4)
    assert data.valid_text == (EN[:4], RAW_DE[:4]) and data.tests["test14"][0] == (EN[:4], RAW_DE[:4])
    assert len(data.src_vocab) != len(data.vocab)  # two dictionaries, each its own size
    assert data.valid.tgt_ids(0).tolist() == data.vocab.encode(DE[:1])[0]
    assert data.valid.src_ids(0).tolist() == data.src_vocab.encode(EN[:1])[0]
    # a dev split held out of training is scored against its target side made plain text
    held = TranslationData(run_cfg(tmp_path, root, dev_pairs=5), "sentences", 4)
    assert held.dev_text == (EN, RAW_DE)
    assert "detokenized (sacremoses)" in held.info["bleu"] and "newstest2013.de" in held.info["bleu"]


@pytest.mark.parametrize("remove, named", [
    ("corpus.bpe.de.json", "corpus.bpe.de.json"), ("newstest2013.de", "newstest2013.de"),
    ("corpus.bpe.en", "corpus.bpe.en"),
])
def test_a_missing_file_is_one_line_naming_it_and_the_authors_copy(tmp_path, remove, named):
    root = write_nematus_folder(tmp_path / "wmt")
    (root / remove).unlink()
    with pytest.raises(FileNotFoundError) as info:
        TranslationData(run_cfg(tmp_path, root), "sentences", 4)
    line = str(info.value)
    assert "\n" not in line and f"{named} missing in {root}" in line and AUTHORS_URL in line


def test_a_limit_that_leaves_no_word_is_refused(tmp_path):
    root = write_nematus_folder(tmp_path / "wmt")
    with pytest.raises(ValueError, match="data.n_words / data.n_words_src = 1 leaves no word of"):
        TranslationData(run_cfg(tmp_path, root, n_words=1), "sentences", 4)


@pytest.mark.parametrize("content, why", [
    ("[1, 2]", "is not a Nematus JSON dictionary"), ("{\"eos\": 0, \"UNK\": 1,", "is not a Nematus JSON dictionary"),
    ('{"eos": 0, "UNK": 1, "a": 1}', "gives two words the same id"), ('{"eos": 0, "a": -3}', "whole id >= 0"),
])
def test_a_file_that_is_not_a_nematus_dictionary_is_refused(tmp_path, content, why):
    root = write_nematus_folder(tmp_path / "wmt")
    (root / "corpus.bpe.en.json").write_text(content, encoding="utf-8")
    with pytest.raises(ValueError, match=re.escape(why)):
        TranslationData(run_cfg(tmp_path, root), "sentences", 4)


def test_a_split_without_a_raw_reference_is_refused(tmp_path):
    root = write_nematus_folder(tmp_path / "wmt")
    with pytest.raises(ValueError, match="data.references names no raw reference for valid, test14, test17: BLEU"):
        load_corpus(run_cfg(tmp_path, root, references=None))


def test_a_reference_not_aligned_with_its_source_is_refused(tmp_path):
    root = write_nematus_folder(tmp_path / "wmt")
    (root / "newstest2014.de").write_text("\n".join(RAW_DE[:3]) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match="newstest2014.de has 3 lines but newstest2014.bpe.en has 4"):
        load_corpus(run_cfg(tmp_path, root))


def test_separate_vocabularies_size_rnnsearch_sides_and_a_shared_transformer_refuses(tmp_path):
    from rmsnorm_repro.norms import build_normalization
    from rmsnorm_repro.tasks.translation.rnnsearch import RNNSearch
    from rmsnorm_repro.tasks.translation.transformer import Transformer

    norms = build_normalization("rmsnorm")
    model = RNNSearch(dict(emb=8, hidden=6, dropout=0.0, tie_embeddings=False, init_std=0.01, init_center=0.0),
                      11, PAD, norms, src_vocab_size=17)
    assert model.src_emb.num_embeddings == 17 and model.tgt_emb.num_embeddings == 11
    assert model.out_proj.weight.shape[0] == 11
    cfg = OmegaConf.create(dict(d_model=8, heads=2, ffn_dim=16, encoder_layers=1, decoder_layers=1, dropout=0.0,
                                attention_dropout=0.0, activation_dropout=0.0, share_embeddings=True))
    with pytest.raises(ValueError, match="set task.model.share_embeddings=false"):
        Transformer(cfg, 11, PAD, norms, src_vocab_size=17)
    cfg.share_embeddings = False
    unshared = Transformer(cfg, 11, PAD, norms, src_vocab_size=17)
    assert unshared.src_embed.num_embeddings == 17 and unshared.tgt_embed.num_embeddings == 11


TINY_RNNSEARCH = ["task=rnnsearch", "scale=mini", "data=wmt14_nematus", "task.model.emb=8", "task.model.hidden=8",
                  "train.batch_size=4", "train.steps=2", "train.eval_every=2", "train.checkpoint_every=2",
                  "train.log_every=1", "task.decode.beam=2", "task.decode.valid_sentences=2", "device=cpu"]


def test_rnnsearch_trains_on_the_nematus_folder_through_the_entry_point(tmp_path, monkeypatch, capsys):
    root = write_nematus_folder(tmp_path / "wmt")
    runs = tmp_path / "runs"
    code, err = main_in_process(monkeypatch, capsys, *TINY_RNNSEARCH, f"data.root={root}",
                                f"paths.runs_dir={runs}", f"paths.cache_dir={tmp_path / 'cache'}")
    assert code == 0, err
    (summary_path,) = runs.rglob("summary.json")
    summary = read_summary(summary_path.parent)
    assert summary["data"] == "wmt14_nematus" and summary["status"] == "completed"
    assert all(0 <= summary["final"][k] <= 100 for k in ("test14_bleu", "test17_bleu", "valid_beam_bleu"))
    assert summary["data_info"]["tests"] == "newstest2014.bpe (test14_bleu), newstest2017.bpe (test17_bleu)"
    assert str(tmp_path) not in json.dumps(summary)


def test_a_missing_folder_through_the_entry_point_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    code, err = main_in_process(monkeypatch, capsys, *TINY_RNNSEARCH, f"paths.data_dir={tmp_path / 'data'}",
                                f"paths.runs_dir={tmp_path / 'runs'}", f"paths.cache_dir={tmp_path / 'cache'}")
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith(f"error: data=wmt14_nematus: no folder {tmp_path / 'data' / 'wmt14_nematus'}: get the "
                             "authors' preprocessed WMT data")
    assert AUTHORS_URL in err[0]


def test_a_transformer_sharing_one_vocabulary_is_refused_through_the_entry_point(tmp_path, monkeypatch, capsys):
    root = write_nematus_folder(tmp_path / "wmt")
    code, err = main_in_process(monkeypatch, capsys, "task=transformer", "scale=mini", "data=wmt14_nematus",
                                f"data.root={root}", f"paths.runs_dir={tmp_path / 'runs'}",
                                f"paths.cache_dir={tmp_path / 'cache'}", "device=cpu")
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith("error: task.model.share_embeddings=true needs one vocabulary for both sides")
    assert err[0].endswith("set task.model.share_embeddings=false")
