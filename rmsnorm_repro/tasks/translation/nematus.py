"""The authors' preprocessed WMT data, read as Nematus reads it (data=wmt14_nematus), no sentencepiece.

The rmsnorm README points at http://data.statmt.org/bzhang/neurips19_rmsnorm/ ("the used/preprocessed
dataset") and at wmt17_systems' training scripts (EdinburghNLP/wmt17-scripts `training/`), whose file names
are the defaults here (configs/data/wmt14_nematus.yaml):
  <root>/<prefix>.<lang>   Moses-tokenized, truecased, BPE-segmented text ("@@ " marks a split word), one
                           sentence a line: corpus.bpe.*, newstest2013.bpe.* ... (preprocess.sh:28-71)
  <root>/<dictionary>      Nematus' JSON vocabulary of one side (data/build_dictionary.py: word -> id,
                           "eos" 0, "UNK" 1, the words by falling frequency from 2; from Nematus 1487724 / v0.4
                           "<EOS>" 0, "<GO>" 1, "<UNK>" 2, the words from 3): corpus.bpe.<lang>.json
  <root>/<prefix>.<tgt>    the raw references BLEU scores against (download_files.sh:54-76: newstest2013.de ...)
Source and target have their own vocabulary. A line is its words split on ASCII white space, a word not
in the dictionary or with an id at or above the side's n_words limit is the unknown id (Nematus
data_iterator.py:83-95, 136-195: 1; v0.4: 2), a limit above the dictionary's ids is bounded by them. Each
format is read as its Nematus reads it (DictionaryFormat): eos is the suite's EOS, the unknown id its UNK
(decoded as the dictionary's word there, as seq2words writes it), v0.4's <GO> its BOS, and word k the
suite's k + 2 (v0.3) or k + 1 (v0.4), so PAD (0) is no word's id. Translations are turned back into text
as wmt17's postprocess.sh:17-19 does: "@@ " removed, detruecased and Moses-detokenized (sacremoses, Moses'
scripts in Python), then scored against the raw references with the suite's sacreBLEU."""
from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from ...record import shown_folder
from ..base import read_lines
from ..paper_data import NEMATUS_DATA_URL as AUTHORS_URL
from .vocab import BOS, EOS, PAD, UNK

NAME = "wmt14_nematus"
UNK_WORD = "UNK"  # what Nematus writes for an id its dictionary lacks (util.py seq2words)
# Nematus (Python 2) splits a line's bytes, so at ASCII white space only: a no-break space or U+2009 inside a
# token stays in it, as in the dictionary (build_dictionary.py splits at " "), where Python 3's split would cut
ASCII_SPACE = re.compile(r"[ \t\n\r\x0b\x0c]+")
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DictionaryFormat:
    """Nematus' special ids in one dictionary format, and where its words start."""
    version: str
    specials: dict[int, int]  # Nematus id -> the suite's
    first_word: int  # the first word's Nematus id; the suite's id of word k is k + (EOS + 1 - first_word)

    def suite_id(self, nematus_id: int) -> int:
        return self.specials.get(nematus_id, nematus_id + EOS + 1 - self.first_word)

    @property
    def unk(self) -> int:
        return next(i for i, ours in self.specials.items() if ours == UNK)


# build_dictionary.py up to 3655c38 / v0.3: "eos" 0, "UNK" 1, words from 2 (nmt.py hard-codes 1 as unknown);
# from 1487724 (v0.4): "<EOS>" 0, "<GO>" 1, "<UNK>" 2, words from 3 (data_iterator.py unk_val = 2; util.py
# load_dict tells them apart by "<GO>" at 1, as here)
V03 = DictionaryFormat("v0.3 (eos 0, UNK 1)", {0: EOS, 1: UNK}, 2)
V04 = DictionaryFormat("v0.4 (<EOS> 0, <GO> 1, <UNK> 2)", {0: EOS, 1: BOS, 2: UNK}, 3)


def dictionary_format(words: Mapping[str, int]) -> DictionaryFormat:
    return V04 if words.get("<GO>") == 1 else V03


class NematusVocab:
    """One side's Nematus dictionary: encodes BPE text to the suite's ids and decodes ids back to plain
    text (the target side: "@@ " joined, detruecased, detokenized as data.detruecase / data.detokenize say)."""

    pad_id, unk_id, bos_id, eos_id = PAD, UNK, BOS, EOS

    def __init__(self, path: str | os.PathLike, n_words: int | None = None, lang: str = "de",
                 detruecase: bool = True, detokenize: bool = True):
        raw = Path(path).read_bytes()
        words = _dictionary(raw, path)
        form = dictionary_format(words)
        size = max(words.values()) + 1
        # null: the whole dictionary, as Nematus sizes a vocabulary it is not given (nmt.py:747-755); a limit
        # above it would size the model for ids that name no word (n_words 1e9: a 256 GB embedding)
        limit = size if n_words is None else min(int(n_words), size)
        if n_words is not None and int(n_words) > size:
            log.info(f"data.n_words / data.n_words_src: n_words {int(n_words)} is above the {size} ids of "
                     f"{Path(path).name}: bounded to {size}")
        if limit <= form.first_word:
            raise ValueError(f"data.n_words / data.n_words_src = {limit} leaves no word of {path} (a Nematus "
                             f"{form.version} dictionary): give more, or null for the whole dictionary")
        self.ids = {word: form.suite_id(i) for word, i in words.items() if i < limit}
        self.words = {i: word for word, i in self.ids.items() if i > EOS}
        # what Nematus' seq2words writes for the unknown id: its dictionary's word there ("UNK", "<UNK>")
        self.words[UNK] = next((word for word, i in words.items() if i == form.unk), UNK_WORD)
        self.size = form.suite_id(limit - 1) + 1
        self.lang, self.detruecase, self.detokenize = lang, bool(detruecase), bool(detokenize)
        if self.detruecase or self.detokenize:
            try:  # known now, not at the first evaluation
                import sacremoses  # noqa: F401
            except ImportError:
                raise ValueError("data.detruecase / data.detokenize need sacremoses (this package's `nematus` extra): "
                                 "pip install -e '.[nematus]' (or set both to false to score the tokenized text)") from None
        self.cache_key = hashlib.sha256(raw + f"|{limit}".encode()).hexdigest()[:16]

    def __len__(self) -> int:
        return self.size

    def encode(self, sentences: Sequence[str]) -> list[list[int]]:
        ids, split = self.ids, ASCII_SPACE.split
        return [[ids.get(word, UNK) for word in split(line) if word] for line in sentences]

    def decode(self, ids: Sequence[Sequence[int]]) -> list[str]:
        """Plain text; everything from the first EOS on is dropped, PAD and BOS are skipped, UNK is "UNK"."""
        lines = []
        for seq in ids:
            seq = list(seq)
            if EOS in seq:
                seq = seq[: seq.index(EOS)]
            lines.append(" ".join(self.words.get(i, UNK_WORD) for i in seq if i not in (PAD, BOS)))
        return self.plain_text(lines)

    def plain_text(self, lines: Sequence[str]) -> list[str]:
        """BPE text back to plain text: postprocess.sh's sed 's/\\@\\@ //g', detruecase.perl, detokenizer.perl -l <tgt>."""
        out = [line.replace("@@ ", "") for line in lines]
        if self.detruecase or self.detokenize:
            from sacremoses import MosesDetokenizer, MosesDetruecaser

            truecase, detok = MosesDetruecaser(), MosesDetokenizer(lang=self.lang)
            if self.detruecase:
                out = [truecase.detruecase(line, return_str=True) for line in out]
            if self.detokenize:  # the tokens as the model wrote them: cut at " " only
                out = [detok.detokenize([t for t in line.split(" ") if t], return_str=True) for line in out]
        return out


def _dictionary(raw: bytes, path: str | os.PathLike) -> dict[str, int]:
    """A Nematus JSON dictionary, checked: word -> id, ids whole, non-negative and distinct."""
    try:
        words = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise ValueError(f"{path} is not a Nematus JSON dictionary ({type(e).__name__}: {str(e)[:80]}); "
                         f"data.src_dict and data.tgt_dict name the corpus.bpe.<lang>.json files of {AUTHORS_URL}") from e
    if (not isinstance(words, dict) or not words
            or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in words.values())):
        raise ValueError(f"{path} is not a Nematus JSON dictionary (an object of word -> whole id >= 0, as "
                         "Nematus' data/build_dictionary.py writes it)")
    if len(set(words.values())) != len(words):
        raise ValueError(f"{path} gives two words the same id: a Nematus dictionary maps each word to its own id")
    return words


def vocabularies(data: Mapping[str, Any], paths: Mapping[str, Any]) -> tuple[NematusVocab, NematusVocab]:
    """(source, target) vocabularies from data.src_dict / data.tgt_dict in the data root."""
    root = data_root(data, paths)
    _require([root / str(data["src_dict"]), root / str(data["tgt_dict"])], root)
    options = dict(lang=str(data["tgt"]), detruecase=bool(data.get("detruecase", True)),
                   detokenize=bool(data.get("detokenize", True)))
    return (NematusVocab(root / str(data["src_dict"]), data.get("n_words_src"), **options),
            NematusVocab(root / str(data["tgt_dict"]), data.get("n_words"), **options))


def data_root(data: Mapping[str, Any], paths: Mapping[str, Any]) -> Path:
    return Path(os.path.expanduser(str(data.get("root") or Path(str(paths["data_dir"])) / NAME)))


def _require(files: Sequence[Path], root: Path) -> None:
    get = (f"get the authors' preprocessed WMT data (BPE text, Nematus JSON dictionaries) from {AUTHORS_URL} "
           "and set data.root to its folder")
    if not root.is_dir():
        raise FileNotFoundError(f"data={NAME}: no folder {root}: {get}")
    missing = [f.name for f in files if not f.is_file()]
    if missing:
        raise FileNotFoundError(f"data={NAME}: {', '.join(missing)} missing in {root}: {get}; "
                                "data.train/valid/test/references/src_dict/tgt_dict name the files")


def load(data: Mapping[str, Any], paths: Mapping[str, Any]) -> dict[str, Any]:
    """The corpus as data.Corpus' fields: BPE pairs per split, and the raw references of valid and the tests."""
    root = data_root(data, paths)
    _require([], root)  # no folder: that line, before any about the test sets
    src, tgt = str(data["src"]), str(data["tgt"])
    tests = dict(data.get("test") or {})
    refs = dict(data.get("references") or {})
    absent = [name for name in tests if not (root / f"{tests[name]}.{src}").is_file()]
    if absent and data.get("test_if_present", True):
        log.info(f"data.test: no {', '.join(f'{tests[n]}.{src}' for n in absent)} in {root}: not scored")
        tests = {name: prefix for name, prefix in tests.items() if name not in absent}
    unreferenced = [name for name in ("valid", *tests) if name not in refs]
    if unreferenced:
        raise ValueError(f"data.references names no raw reference for {', '.join(unreferenced)}: BLEU scores "
                         f"plain text against it (e.g. data.references.valid=newstest2013 for <root>/newstest2013.{tgt})")
    splits = {"train": str(data["train"]), "valid": str(data["valid"]), **{n: str(p) for n, p in tests.items()}}
    _require([root / f"{prefix}.{lang}" for prefix in splits.values() for lang in (src, tgt)]
             + [root / f"{refs[name]}.{tgt}" for name in ("valid", *tests)]
             + [root / str(data["src_dict"]), root / str(data["tgt_dict"])], root)
    pairs = {name: _pair(root, prefix, src, tgt) for name, prefix in splits.items()}
    references = {}
    for name in ("valid", *tests):
        path = root / f"{refs[name]}.{tgt}"
        references[name] = read_lines(path)
        if len(references[name]) != len(pairs[name][0]):
            raise ValueError(f"{path} has {len(references[name])} lines but {splits[name]}.{src} has "
                             f"{len(pairs[name][0])}: a reference must be aligned with its BPE source")
    steps = ["'@@ ' removed", *(["detruecased"] if data.get("detruecase", True) else []),
             *(["detokenized (sacremoses)"] if data.get("detokenize", True) else [])]
    info = {"data": f"{NAME}:{shown_folder(root, paths.get('data_dir'))}", "valid": splits["valid"],
            "tests": ", ".join(f"{p} ({n}_bleu)" for n, p in tests.items()) or "none (valid only)",
            "bleu": f"translations {', '.join(steps)}, against the raw "
                    + ", ".join(f"{refs[n]}.{tgt}" for n in ("valid", *tests))}
    return dict(train=pairs["train"], valid=pairs["valid"], tests={name: pairs[name] for name in tests}, info=info,
                references=references)


def _pair(root: Path, prefix: str, src: str, tgt: str) -> tuple[list[str], list[str]]:
    s, t = read_lines(root / f"{prefix}.{src}"), read_lines(root / f"{prefix}.{tgt}")
    if len(s) != len(t):
        raise ValueError(f"{root}/{prefix}: {len(s)} {src} lines but {len(t)} {tgt} lines; files must be aligned")
    if not s:
        raise ValueError(f"{root}/{prefix}.{src} and .{tgt} are empty: the split needs at least one sentence pair")
    return s, t
