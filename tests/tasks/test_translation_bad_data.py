"""Issue 15, data: every text reader splits lines on "\\n" only, and bad files (empty, truncated .gz,
invalid UTF-8, an offline hub, an offline download) end in one clear error naming the file.

Each test writes tiny files in the real formats (raw bytes where the bytes matter) under tmp_path.
"""
from __future__ import annotations

import gzip
import time
import urllib.error
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf

from rmsnorm_repro.tasks.convpool import data as convpool_data
from rmsnorm_repro.tasks.reader.data import load_cnn
from rmsnorm_repro.tasks.retrieval.data import load_coco
from rmsnorm_repro.tasks.translation import data as translation_data
from rmsnorm_repro.tasks.translation.data import TranslationData, load_corpus, read_lines


def run_cfg(tmp_path: Path, data: dict) -> OmegaConf:
    return OmegaConf.create({
        "seed": 1,
        "paths": {"cache_dir": str(tmp_path / "cache"), "data_dir": str(tmp_path / "data")},
        "data": data,
        "task": {"max_len": 80, "synthetic": {}},
    })


def text_data(root: Path, **extra) -> dict:
    return {"name": "text", "root": str(root), "src": "en", "tgt": "de", "train": "train", "valid": "val",
            "test": [], "vocab_size": 60, **extra}


def write_bytes(root: Path, name: str, data: bytes, gz: bool = False) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    path = root / (name + (".gz" if gz else ""))
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def parallel(root: Path, n: int = 8, gz: bool = False) -> tuple[list[str], list[str]]:
    en = [f"the cat number {i} sleeps ." for i in range(n)]
    de = [f"die katze nummer {i} schläft ." for i in range(n)]
    for split, (a, b) in (("train", (en, de)), ("val", (en[:3], de[:3]))):
        write_bytes(root, f"{split}.en", "".join(s + "\n" for s in a).encode(), gz)
        write_bytes(root, f"{split}.de", "".join(s + "\n" for s in b).encode(), gz)
    return en, de


# Item 3: "\n" is the only line separator ---------------------------------------------------------

@pytest.mark.parametrize("gz", [False, True])
def test_stray_cr_inside_a_line_keeps_translation_pairs_aligned(tmp_path, gz):
    """`wc -l` counts 6 lines in each file; a reader with universal newlines counted 7 in each, so the
    count check passed while every pair between the two stray CRs was misaligned."""
    en = [f"english {i} ." for i in range(6)]
    de = [f"deutsch {i} ." for i in range(6)]
    en[1] = "english 1 first half\rsecond half ."
    de[4] = "deutsch 4 erste\rzweite ."
    write_bytes(tmp_path, "train.en", "".join(s + "\n" for s in en).encode(), gz)
    write_bytes(tmp_path, "train.de", "".join(s + "\n" for s in de).encode(), gz)
    write_bytes(tmp_path, "val.en", b"english 0 .\n")
    write_bytes(tmp_path, "val.de", b"deutsch 0 .\n")
    corpus = load_corpus(run_cfg(tmp_path, text_data(tmp_path)))
    src, tgt = corpus.train
    assert len(src) == len(tgt) == 6
    for i, (s, t) in enumerate(zip(src, tgt)):
        assert s.startswith(f"english {i}") and t.startswith(f"deutsch {i}"), (i, s, t)
    assert src[1] == "english 1 first half\rsecond half ."  # the line is kept whole


def test_crlf_line_endings_still_read_as_one_line_each(tmp_path):
    write_bytes(tmp_path, "x.en", b"one\r\ntwo\r\n\r\nfour\r\n")
    assert read_lines(tmp_path, "x", "en") == ["one", "two", "", "four"]
    write_bytes(tmp_path, "y.en", b"no final newline\r\nlast")
    assert read_lines(tmp_path, "y", "en") == ["no final newline", "last"]
    write_bytes(tmp_path, "z.en", "a\u2028b\x85c\x0cd\n".encode())  # not line breaks in a corpus file
    assert read_lines(tmp_path, "z", "en") == ["a\u2028b\x85c\x0cd"]


def test_wmt14_newstest2017_copy_keeps_a_stray_cr_inside_its_line(tmp_path, monkeypatch):
    """ensure_wmt14 copies sacrebleu's newstest2017 into data.root; the copy must have the same lines."""
    import datasets
    import sacrebleu.utils

    root = tmp_path / "wmt14"
    rows = {"translation": [{"de": f"Satz {i}.", "en": f"Sentence {i}."} for i in range(3)]}
    splits = {s: datasets.Dataset.from_dict(rows) for s in ("train", "validation", "test")}
    datasets.DatasetDict(splits).save_to_disk(str(root))
    src = write_bytes(tmp_path / "sb", "src.en", b"First.\nSecond\rhalf.\nThird.\n")
    ref = write_bytes(tmp_path / "sb", "ref.de", b"Erster.\nZweiter.\nDritter.\n")
    monkeypatch.setattr(sacrebleu.utils, "get_source_file", lambda *a, **k: str(src))
    monkeypatch.setattr(sacrebleu.utils, "get_reference_files", lambda *a, **k: [str(ref)])
    corpus = load_corpus(run_cfg(tmp_path, {"name": "wmt14", "root": str(root), "src": "en", "tgt": "de"}))
    assert corpus.tests["test17"] == (["First.", "Second\rhalf.", "Third."], ["Erster.", "Zweiter.", "Dritter."])


def test_a_truncated_saved_wmt14_copy_is_one_clear_error(tmp_path):
    """Before: pyarrow's OSError ("Expected to be able to read ... bytes") as a traceback."""
    import datasets

    root = tmp_path / "wmt14"
    rows = {"translation": [{"de": f"Satz {i}.", "en": f"Sentence {i}."} for i in range(300)]}
    datasets.DatasetDict({s: datasets.Dataset.from_dict(rows) for s in ("train", "validation", "test")}).save_to_disk(str(root))
    for name in ("newstest2017", "newstest2014-filtered"):
        write_bytes(root, f"{name}.en", b"One.\n")
        write_bytes(root, f"{name}.de", b"Eins.\n")
    (arrow,) = (root / "train").glob("*.arrow")
    arrow.write_bytes(arrow.read_bytes()[: arrow.stat().st_size // 2])
    with pytest.raises(ValueError, match=r"data=wmt14: the saved copy in .*wmt14 cannot be read .*make data-wmt14") as err:
        load_corpus(run_cfg(tmp_path, {"name": "wmt14", "root": str(root), "src": "en", "tgt": "de"}))
    assert "\n" not in str(err.value)


QUESTION = ("http://www.cnn.com/{n}{nl}{nl}( @entity1 ) -- @entity3 met{stray}@entity5 in @entity7 .{nl}{nl}"
            "@placeholder met @entity5 in @entity7{nl}{nl}@entity3{nl}{nl}@entity1:CNN{nl}@entity3:Obama{sep}Jr{nl}"
            "@entity5:Merkel{nl}@entity7:Berlin{nl}")


def write_cnn(root: Path, stray: str = " ", nl: str = "\n", sep: str = " ") -> None:
    for split in ("training", "validation", "test"):
        folder = root / "questions" / split
        folder.mkdir(parents=True)
        for n in range(2):
            (folder / f"{split}{n}.question").write_bytes(QUESTION.format(n=n, nl=nl, stray=stray, sep=sep).encode())


def test_question_file_with_stray_crs_inside_the_context_parses(tmp_path):
    """Two CRs inside the context read as a blank line under universal newlines: a block boundary."""
    write_cnn(tmp_path, stray=" \r\r ")
    data = load_cnn({"root": str(tmp_path)})
    doc = [data.vocab[i] for i in data.splits["train"][0].doc.tolist()]
    assert doc == ["(", "@entity1", ")", "--", "@entity3", "met", "@entity5", "in", "@entity7", "."]
    assert data.splits["train"][0].answer == 3


def test_question_file_with_crlf_or_a_unicode_separator_parses(tmp_path):
    write_cnn(tmp_path / "crlf", nl="\r\n")
    write_cnn(tmp_path / "sep", sep="\u2028")
    for root in (tmp_path / "crlf", tmp_path / "sep"):
        data = load_cnn({"root": str(root)})
        ex = data.splits["valid"][1]
        assert ex.answer == 3 and ex.candidates == [1, 3, 5, 7]
        assert [data.vocab[i] for i in ex.query.tolist()] == ["@placeholder", "met", "@entity5", "in", "@entity7"]


def write_coco(root: Path, captions: dict[str, list[str]] | None = None, images=(3, 2, 2), dim=4) -> None:
    root.mkdir(parents=True, exist_ok=True)
    for name, n in zip(("train", "dev", "test"), images):
        lines = (captions or {}).get(name) or [f"image{i} caption{c}" for i in range(n) for c in range(5)]
        (root / f"{name}_caps.txt").write_bytes("".join(line + "\n" for line in lines).encode())
        np.save(root / f"{name}_ims.npy", np.arange(n * dim, dtype=np.float32).reshape(n, dim))


def test_coco_captions_stay_aligned_with_a_stray_cr_and_an_empty_caption(tmp_path):
    """Universal newlines split caption 3 in two and dropping the empty caption 9 made up for it: 15
    captions, the count check passed, and every caption between them belonged to the wrong image."""
    caps = [f"image{i} caption{c}" for i in range(3) for c in range(5)]
    caps[3] = "image0 caption3 first\rsecond"
    caps[9] = ""
    write_coco(tmp_path, {"train": caps})
    data = load_coco({"root": str(tmp_path)})
    train = data.splits["train"]
    assert len(train.captions) == 15
    words = [[data.vocab[i] for i in c.tolist()] for c in train.captions]
    for k, w in enumerate(words):
        if k != 9:
            assert w[0] == f"image{k // 5}", (k, w)
    assert words[3] == ["image0", "caption3", "first", "second"]


def test_coco_caption_with_a_unicode_line_separator_is_one_caption(tmp_path):
    caps = [f"image{i} caption{c}" for i in range(3) for c in range(5)]
    caps[2] = "image0 caption2\u2028more"
    write_coco(tmp_path, {"train": caps})
    assert len(load_coco({"root": str(tmp_path)}).splits["train"].captions) == 15


# Item 10: one clear error per bad file --------------------------------------------------------

def test_empty_train_files_are_one_clear_error(tmp_path):
    parallel(tmp_path)
    for lang in ("en", "de"):
        write_bytes(tmp_path, f"train.{lang}", b"")
    with pytest.raises(ValueError, match=r"train\.en.*empty"):
        TranslationData(run_cfg(tmp_path, text_data(tmp_path)), "sentences", 4)


def test_blank_only_train_files_are_one_clear_error(tmp_path):
    parallel(tmp_path)
    for lang in ("en", "de"):
        write_bytes(tmp_path, f"train.{lang}", b"\n\n  \n")
    with pytest.raises(ValueError, match=r"train\.en.*no sentence pair"):
        TranslationData(run_cfg(tmp_path, text_data(tmp_path)), "sentences", 4)


@pytest.mark.parametrize("split", ["val", "test"])
def test_empty_valid_or_test_files_are_refused_at_load(tmp_path, split):
    """Before: an empty valid split trained until the first eval, then died in sacreBLEU."""
    parallel(tmp_path)
    for lang in ("en", "de"):
        write_bytes(tmp_path, f"{split}.{lang}", b"")
    with pytest.raises(ValueError, match=rf"{split}\.en.*empty"):
        load_corpus(run_cfg(tmp_path, text_data(tmp_path, test=["test"] if split == "test" else [])))


def test_truncated_gz_is_one_clear_error(tmp_path):
    parallel(tmp_path, n=200, gz=True)
    path = tmp_path / "train.de.gz"
    raw = path.read_bytes()
    path.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(ValueError, match=r"train\.de\.gz.*(truncated|corrupt)") as err:
        load_corpus(run_cfg(tmp_path, text_data(tmp_path)))
    assert "\n" not in str(err.value)
    path.write_bytes(b"this is not gzip data at all")
    with pytest.raises(ValueError, match=r"train\.de\.gz"):
        load_corpus(run_cfg(tmp_path, text_data(tmp_path)))


@pytest.mark.parametrize("gz", [False, True])
def test_invalid_utf8_names_the_file_and_the_line(tmp_path, gz):
    parallel(tmp_path, gz=gz)
    write_bytes(tmp_path, "train.de", b"gut\nauch gut\nkaputt \xff hier\nwieder gut\n" * 2, gz)
    with pytest.raises(ValueError, match=r"train\.de(\.gz)?: line 3 is not valid UTF-8") as err:
        load_corpus(run_cfg(tmp_path, text_data(tmp_path)))
    assert "\n" not in str(err.value)


def test_invalid_utf8_in_a_question_file_names_it(tmp_path):
    write_cnn(tmp_path)
    bad = tmp_path / "questions" / "validation" / "validation1.question"
    bad.write_bytes(bad.read_bytes().replace(b"Merkel", b"Merk\xe9l"))
    with pytest.raises(ValueError, match=r"validation1\.question: line 11 is not valid UTF-8"):
        load_cnn({"root": str(tmp_path)})


def test_empty_question_split_and_bad_limit_are_clear_errors(tmp_path):
    write_cnn(tmp_path)
    (tmp_path / "questions" / "training" / "training0.question").write_bytes(b"")
    with pytest.raises(ValueError, match=r"training0\.question.*empty"):
        load_cnn({"root": str(tmp_path)})
    with pytest.raises(ValueError, match="data.limit"):
        load_cnn({"root": str(tmp_path), "limit": 0})


def test_coco_bad_files_are_clear_errors(tmp_path):
    write_coco(tmp_path)
    caps = tmp_path / "dev_caps.txt"
    good = caps.read_bytes()
    caps.write_bytes(good.replace(b"image1 caption2", b"image1 capti\xffon2"))
    with pytest.raises(ValueError, match=r"dev_caps\.txt: line 8 is not valid UTF-8"):
        load_coco({"root": str(tmp_path)})
    caps.write_bytes(good)
    ims = tmp_path / "train_ims.npy"
    raw = ims.read_bytes()
    ims.write_bytes(raw[: len(raw) - 7])  # truncated
    with pytest.raises(ValueError, match=r"train_ims\.npy"):
        load_coco({"root": str(tmp_path)})
    ims.write_bytes(b"")
    with pytest.raises(ValueError, match=r"train_ims\.npy"):
        load_coco({"root": str(tmp_path)})
    write_coco(tmp_path / "empty", images=(0, 2, 2))
    with pytest.raises(ValueError, match=r"train_caps\.txt.*empty"):
        load_coco({"root": str(tmp_path / "empty")})


def test_multi30k_offline_without_cache_is_fast_and_points_at_make(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    data = {"name": "multi30k", "root": None, "src": "en", "tgt": "de", "train": "train", "valid": "val", "test": []}
    start = time.perf_counter()
    with pytest.raises(FileNotFoundError) as err:
        load_corpus(run_cfg(tmp_path, data))
    assert time.perf_counter() - start < 5
    message = str(err.value)
    assert "make data-multi30k" in message and "HF_HUB_OFFLINE" in message and "data.root" in message
    assert "\n" not in message


def test_hub_download_failure_does_not_tell_make_to_run_itself(tmp_path, monkeypatch):
    """`make data-multi30k` / `make data-wmt14` run with the hub on; when the network fails there, the
    message must say the network is needed, not "run make data-..." again."""
    import datasets

    def unreachable(*args, **kwargs):
        raise ConnectionError("Couldn't reach the Hub (Name or service not known)")

    monkeypatch.setattr(datasets, "load_dataset", unreachable)
    for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.setenv(var, "0")
    with pytest.raises(FileNotFoundError) as err:
        translation_data.ensure_wmt14(tmp_path / "wmt14", tmp_path / "hf")
    assert "network" in str(err.value) and "make data-wmt14" not in str(err.value)
    data = {"name": "multi30k", "root": None, "src": "en", "tgt": "de", "train": "train", "valid": "val", "test": []}
    with pytest.raises(FileNotFoundError) as err:
        load_corpus(run_cfg(tmp_path, data))
    assert "network" in str(err.value) and "make data-multi30k" not in str(err.value)
    # the same failure with the hub switched off (a training run under make): point at the make target
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(FileNotFoundError, match="make data-wmt14"):
        translation_data.ensure_wmt14(tmp_path / "wmt14", tmp_path / "hf")


def test_cifar10_download_offline_is_one_clear_error(tmp_path, monkeypatch):
    import torchvision.datasets.cifar as cifar

    def offline(*args, **kwargs):
        raise urllib.error.URLError("[Errno -2] Name or service not known")

    monkeypatch.setattr(cifar, "download_and_extract_archive", offline)
    with pytest.raises(FileNotFoundError, match=r"download.*network.*make data-cifar10") as err:
        convpool_data.load_cifar10(tmp_path / "cifar", download=True)
    assert "\n" not in str(err.value)
