"""Parallel corpora (synthetic, text, multi30k, wmt14, wmt14_nematus), subword encoding and length-bucketed batches.

`load_corpus` turns the data config into raw sentences: {train, valid, tests{name: split}, dev}.
With data.dev_pairs = N, the last N training pairs are held out as `dev`: the split that evaluation
during training (the curves, best-model selection, early stopping) uses, so that valid and the tests
are scored only by weights they did not choose. Without it, dev is valid (the paper's setting).
`TranslationData` trains/loads the joint BPE vocabulary (data=wmt14_nematus: reads the authors' two
Nematus vocabularies instead, nematus.py), encodes every split once (cached under paths.cache_dir),
drops training pairs over the length limit and cuts the training set into length buckets. Valid and
test sentences are cut to task.decode.max_eval_len subwords per side
(default DEFAULT_MAX_EVAL_LEN, with a warning when it happens): a stray 100k-character line would
otherwise make every evaluation batch it lands in cost minutes; BLEU still scores the whole reference. `train_batch(step, rank, world_size)` is a pure function of (seed, step): the
batches of epoch e are the fixed buckets in the order of a permutation seeded by (seed, e).
"""
from __future__ import annotations

import hashlib
import logging
import os
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import numpy as np
import torch
from torch import Tensor

from ...atomic import atomic_path, cached
from ...record import shown_folder
from ..base import read_lines as read_file_lines
from . import nematus, synthetic
from .vocab import BOS, EOS, PAD, Vocab, build_vocab, corpus_hash

Pair = tuple[list[str], list[str]]  # (source sentences, target sentences), aligned
#: valid/test sentences are cut to this many subwords per side when task.decode.max_eval_len is not set
DEFAULT_MAX_EVAL_LEN = 1024
log = logging.getLogger(__name__)


@dataclass
class Corpus:
    train: Pair
    valid: Pair
    tests: dict[str, Pair]          # metric prefix -> split, e.g. {"test14": ..., "test17": ...}
    info: dict[str, Any] = field(default_factory=dict)  # provenance worth recording (test variant)
    dev: Pair | None = None         # held out from train (data.dev_pairs); None: valid selects
    # split -> the raw references BLEU scores against where the pair's target side is not plain text
    # (data=wmt14_nematus: BPE); a split without one is scored against its target side made plain text
    references: dict[str, list[str]] = field(default_factory=dict)


# Loaders ------------------------------------------------------------------------------------

def load_corpus(cfg: Mapping[str, Any]) -> Corpus:
    """Raw sentences for the run's data config (cfg is the whole run config)."""
    data = cfg["data"]
    name = data["name"]
    if name == "synthetic":
        s = synthetic.generate(cfg["task"]["synthetic"])
        return Corpus(s["train"], s["valid"], {"test": s["test"]}, {"data": "synthetic"})
    if name == "text":
        corpus = _text_corpus(data, cfg["paths"])
    elif name == "multi30k":
        corpus = _multi30k(data, cfg["paths"])
    elif name == "wmt14":
        corpus = _wmt14(data, cfg["paths"])
    elif name == nematus.NAME:
        corpus = Corpus(**nematus.load(data, cfg["paths"]))
    else:
        raise ValueError(f"data={name} is not a translation data set; choose synthetic, text, multi30k, wmt14 "
                         f"or {nematus.NAME}")
    _check_corpus(corpus, f"data={name}")
    return hold_out_dev(corpus, data.get("dev_pairs"))


def hold_out_dev(corpus: Corpus, pairs: int | None) -> Corpus:
    """The corpus with its last `pairs` training pairs moved to `dev` (fixed: the same pairs for every
    run and seed), and data_info saying which split selects the weights."""
    src, tgt = corpus.train
    if not pairs:
        corpus.info["selection"] = "valid (no dev split: data.dev_pairs is null)"
        return corpus
    pairs = int(pairs)
    if pairs >= len(src):
        raise ValueError(f"data.dev_pairs={pairs} would hold out all {len(src)} training pairs; "
                         f"choose fewer than {len(src)}, or null to choose the weights on valid")
    keep = len(src) - pairs
    corpus.train, corpus.dev = (src[:keep], tgt[:keep]), (src[keep:], tgt[keep:])
    corpus.info["selection"] = f"dev: the last {pairs} training pairs, held out (train keeps {keep})"
    return corpus


def _check_corpus(corpus: Corpus, where: str) -> None:
    """Every split has sentences and training has a pair with text on both sides (text files are
    checked file by file in _text_pair; this catches the same in hub sets)."""
    for split, (src, _) in (("train", corpus.train), ("valid", corpus.valid), *corpus.tests.items()):
        if not src:
            raise ValueError(f"{where}: the {split} split is empty")
    if not _has_text(corpus.train):
        raise ValueError(f"{where}: no training sentence pair has text on both sides")


def _has_text(pair: Pair) -> bool:
    return any(s.strip() and t.strip() for s, t in zip(*pair))


def _find(root: str | os.PathLike, split: str, lang: str) -> Path:
    base = Path(os.path.expanduser(str(root))) / f"{split}.{lang}"
    found = [path for path in (base, base.with_name(base.name + ".gz")) if path.exists()]
    if len(found) == 2:  # two copies of a split that may differ: which is the data is not guessed
        raise ValueError(f"both {base} and {found[1].name} exist in {base.parent}: keep one of them")
    if found:
        return found[0]
    raise FileNotFoundError(f"missing {base}[.gz]: check data.root, data.src/data.tgt and the split names")


def read_lines(root: str | os.PathLike, split: str, lang: str) -> list[str]:
    """<root>/<split>.<lang>, plain or .gz; one sentence per line, lines split on "\\n" only (as
    `wc -l`: a stray "\\r" inside a line cannot shift the file against its other side)."""
    return read_file_lines(_find(root, split, lang))


def _text_pair(root: str, split: str, src: str, tgt: str, train: bool = False) -> Pair:
    src_path, tgt_path = _find(root, split, src), _find(root, split, tgt)
    s, t = read_file_lines(src_path), read_file_lines(tgt_path)
    if len(s) != len(t):
        raise ValueError(f"{root}/{split}: {len(s)} {src} lines but {len(t)} {tgt} lines; files must be aligned")
    if not s:
        raise ValueError(f"{src_path} and {tgt_path} are empty: the {split} split needs at least one sentence pair")
    if train and not _has_text((s, t)):
        raise ValueError(f"{src_path} and {tgt_path} have no sentence pair with text on both sides "
                         "(every line is blank on one side or the other)")
    return s, t


def _test_splits(data: Mapping[str, Any]) -> list[str]:
    test = data.get("test") or []
    return [test] if isinstance(test, str) else list(test)


def _text_corpus(data: Mapping[str, Any], paths: Mapping[str, Any]) -> Corpus:
    root = data.get("root")
    if not root:
        raise ValueError(f"data={data['name']} needs data.root: a folder with <split>.<lang>[.gz] files")
    src, tgt = data["src"], data["tgt"]
    splits = _test_splits(data)
    # One test split is reported as test_bleu; several as <split>_bleu each (named after the list as
    # configured, so a split skipped below does not rename the others).
    names = {s: ("test" if len(splits) == 1 else s) for s in splits}
    if data.get("test_if_present"):  # e.g. Multi30k's test sets, which differ between copies of it
        absent = [s for s in splits if not any(_present(root, s, lang) for lang in (src, tgt))]
        if absent:
            log.info(f"data.test: no {', '.join(absent)} files in {root}: scoring "
                     f"{', '.join(s for s in splits if s not in absent) or 'the valid split only'}")
        splits = [s for s in splits if s not in absent]
    tests = {names[s]: _text_pair(root, s, src, tgt) for s in splits}
    info = {"data": f"text:{shown_folder(root, paths.get('data_dir'))}", "valid": str(data["valid"]),
            "tests": ", ".join(f"{s} ({names[s]}_bleu)" for s in splits) or "none (valid only)"}
    return Corpus(_text_pair(root, data["train"], src, tgt, train=True), _text_pair(root, data["valid"], src, tgt),
                  tests, info)


def _present(root: str | os.PathLike, split: str, lang: str) -> bool:
    base = Path(os.path.expanduser(str(root))) / f"{split}.{lang}"
    return base.exists() or base.with_name(base.name + ".gz").exists()


def _multi30k(data: Mapping[str, Any], paths: Mapping[str, Any]) -> Corpus:
    if data.get("root"):
        return _text_corpus(data, paths)
    import datasets

    cache = Path(paths["data_dir"]) / "hf"
    try:
        hub = datasets.load_dataset("bentrevett/multi30k", cache_dir=str(cache))
    except Exception as e:  # offline, hub down: say what to do instead
        or_root = "or set data.root to a folder of train/val .en/.de[.gz] text files"
        if hub_offline():
            raise FileNotFoundError(
                f"data=multi30k: 'bentrevett/multi30k' is not in the cache {cache} and the hub is switched off "
                f"(HF_HUB_OFFLINE=1 / HF_DATASETS_OFFLINE=1); run `make data-multi30k` once where there is network "
                f"(it fills data/hf, the cache of the default paths.data_dir), {or_root}") from e
        raise FileNotFoundError(f"data=multi30k: cannot download 'bentrevett/multi30k' from the hub ({_why(e)}); "
                                f"this needs network once (the copy is then cached in {cache}), {or_root}") from e
    src, tgt = data["src"], data["tgt"]
    pair = lambda d: (list(d[src]), list(d[tgt]))  # noqa: E731
    return Corpus(pair(hub["train"]), pair(hub["validation"]), {"test": pair(hub["test"])},
                  {"data": "hub:bentrevett/multi30k", "valid": "validation (val)",
                   "tests": "test = test_2016_flickr (test_bleu)"})


def _wmt14(data: Mapping[str, Any], paths: Mapping[str, Any]) -> Corpus:
    """WMT14 from the saved copy in data.root (default <paths.data_dir>/wmt14), made once by
    `ensure_wmt14`. Test14 is the hub's newstest2014, the FULL 3003-line set, which the report compares
    with the paper's column; test14_filtered is sacrebleu's 2737-line filtered "wmt14", scored beside
    it; Test17 is sacrebleu's "wmt17" en-de."""
    import datasets

    root = ensure_wmt14(data.get("root") or Path(paths["data_dir"]) / "wmt14", Path(paths["data_dir"]) / "hf")
    src, tgt = data["src"], data["tgt"]
    try:  # a truncated or foreign .arrow file is pyarrow's OSError / ArrowInvalid, a missing split a KeyError
        ds = datasets.load_from_disk(str(root))
        rows = {split: ds[split]["translation"] for split in ("train", "validation", "test")}
    except Exception as e:
        raise ValueError(f"data=wmt14: the saved copy in {root} cannot be read ({_why(e)}); delete it and run "
                         "`make data-wmt14` again where there is network") from e

    def pair(split: str) -> Pair:
        return [r[src] for r in rows[split]], [r[tgt] for r in rows[split]]

    tests = {"test14": pair("test"), "test14_filtered": _text_pair(root, "newstest2014-filtered", src, tgt),
             "test17": _text_pair(root, "newstest2017", src, tgt)}
    info = {"data": f"wmt14:{shown_folder(root, paths.get('data_dir'))}",
            "test14": f"newstest2014 full ({len(tests['test14'][0])} lines, hub wmt/wmt14 de-en): the paper's Test14 column",
            "test14_filtered": f"newstest2014 filtered ({len(tests['test14_filtered'][0])} lines, sacrebleu wmt14 en-de)",
            "test17": "newstest2017 (sacrebleu wmt17 en-de)"}
    return Corpus(pair("train"), pair("validation"), tests, info)


def ensure_wmt14(root: str | os.PathLike, hf_cache: str | os.PathLike) -> Path:
    """Make <root> hold the hub set "wmt/wmt14" de-en (save_to_disk) and newstest2017.{en,de}.

    Downloads only what is missing (network needed once); later runs read the saved copy offline.
    Hub splits: train (4.5M pairs), validation = newstest2013, test = newstest2014 (3003 lines).
    """
    import datasets

    root = Path(os.path.expanduser(str(root)))
    # Offline (the hub switched off, as `make` runs training): `make data-wmt14` is the fix. Online but
    # unreachable (which is how `make data-wmt14` itself fails): the network is, not another make call.
    offline_fix = "run `make data-wmt14` once where there is network (it saves the copy there), or set data.root"
    if not (root / "dataset_dict.json").exists():
        try:
            hub = datasets.load_dataset("wmt/wmt14", "de-en", cache_dir=str(hf_cache))
        except Exception as e:  # offline, hub down: say what to do instead
            if hub_offline():
                raise FileNotFoundError(f"data=wmt14: no saved copy in {root} and the hub is switched off "
                                        f"(HF_HUB_OFFLINE=1 / HF_DATASETS_OFFLINE=1); {offline_fix}") from e
            raise FileNotFoundError(f"data=wmt14: no saved copy in {root} and downloading 'wmt/wmt14' failed "
                                    f"({_why(e)}); this needs network: check the connection or proxy, or set "
                                    "data.root to a saved copy") from e
        hub.save_to_disk(str(root))
    # sacreBLEU's test sets: newstest2017 (Test17), and its "wmt14" newstest2014, the FILTERED 2737-line
    # variant, beside the hub's full 3003 lines, so both Test14 variants are scored
    for name, test_set in (("newstest2017", "wmt17"), ("newstest2014-filtered", "wmt14")):
        if (root / f"{name}.en").exists() and (root / f"{name}.de").exists():
            continue
        from sacrebleu import utils as sacrebleu_utils

        try:
            files = {"en": sacrebleu_utils.get_source_file(test_set, "en-de"),
                     "de": sacrebleu_utils.get_reference_files(test_set, "en-de")[0]}
        except Exception as e:
            fix = offline_fix if hub_offline() else "this needs network once: check the connection or proxy"
            raise FileNotFoundError(f"data=wmt14: {name} is not in {root} and sacrebleu cannot download it "
                                    f"({_why(e)}); {fix}") from e
        for lang, path in files.items():
            # bytes as they are: a text-mode copy would turn a stray CR inside a line into a line break
            with atomic_path(root / f"{name}.{lang}") as tmp:
                tmp.write_bytes(Path(path).read_bytes())
    return root


def hub_offline() -> bool:
    """The Hugging Face hub is switched off by the environment (what `make` sets for training runs)."""
    return any(os.environ.get(var, "").strip().upper() in ("1", "ON", "YES", "TRUE")
               for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"))


def _why(err: BaseException) -> str:
    """An exception as a short one-line reason: "ConnectionError: Couldn't reach ..." (cut at 160 chars)."""
    text = " ".join(str(err).split())
    text = text[:157] + "..." if len(text) > 160 else text
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


# Encoded splits -----------------------------------------------------------------------------

ENCODE_CHUNK = 100_000  # sentences tokenized at a time (Encoded.encode)


class Encoded:
    """One split as flat int32 token arrays + offsets (millions of sentences stay compact)."""

    def __init__(self, src: list[list[int]], tgt: list[list[int]]):
        self.src, self.src_off = _flatten(src)
        self.tgt, self.tgt_off = _flatten(tgt)

    def __len__(self) -> int:
        return len(self.src_off) - 1

    @property
    def src_len(self) -> np.ndarray:
        return np.diff(self.src_off)

    @property
    def tgt_len(self) -> np.ndarray:
        return np.diff(self.tgt_off)

    def src_ids(self, i: int) -> np.ndarray:
        return self.src[self.src_off[i]: self.src_off[i + 1]]

    def tgt_ids(self, i: int) -> np.ndarray:
        return self.tgt[self.tgt_off[i]: self.tgt_off[i + 1]]

    def state(self) -> dict[str, Tensor]:
        return {k: torch.from_numpy(getattr(self, k)) for k in ("src", "src_off", "tgt", "tgt_off")}

    @classmethod
    def encode(cls, vocab: Vocab, pair: Pair, chunk: int = ENCODE_CHUNK, target_vocab: Vocab | None = None) -> "Encoded":
        """Tokenize a split `chunk` sentences at a time straight into the flat arrays: sentencepiece's
        lists of Python ints cost ~36 bytes a subword, so WMT14's ~300M subwords as lists would need
        over 10 GB; the same arrays as Encoded(vocab.encode(src), target_vocab.encode(tgt)).
        target_vocab: the target side's where it has its own (data=wmt14_nematus); None: `vocab`."""
        obj = cls.__new__(cls)
        for side, sentences, vocab in (("src", pair[0], vocab), ("tgt", pair[1], target_vocab or vocab)):
            parts = [_flatten(vocab.encode(sentences[start:start + chunk])) for start in range(0, len(sentences), chunk)]
            lengths = np.concatenate([np.diff(off) for _, off in parts]) if parts else np.zeros(0, dtype=np.int64)
            off = np.zeros(len(lengths) + 1, dtype=np.int64)
            np.cumsum(lengths, out=off[1:])
            flat = np.concatenate([flat for flat, _ in parts]) if parts else np.zeros(0, dtype=np.int32)
            setattr(obj, side, flat)
            setattr(obj, f"{side}_off", off)
        return obj

    @classmethod
    def from_state(cls, state: Mapping[str, Tensor]) -> "Encoded":
        obj = cls.__new__(cls)
        for k, v in state.items():
            setattr(obj, k, v.numpy())
        return obj


def _flatten(seqs: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    off = np.zeros(len(seqs) + 1, dtype=np.int64)
    np.cumsum([len(s) for s in seqs], out=off[1:])
    flat = np.fromiter((i for s in seqs for i in s), dtype=np.int32, count=int(off[-1]))
    return flat, off


def collate(enc: Encoded, idx: Sequence[int], device: torch.device | str = "cpu") -> dict[str, Tensor]:
    """Right-padded batch: src = x EOS, tgt_in = BOS y, tgt_out = y EOS; masks True on real tokens."""
    b = len(idx)
    s_len = np.array([enc.src_off[i + 1] - enc.src_off[i] for i in idx]) + 1
    t_len = np.array([enc.tgt_off[i + 1] - enc.tgt_off[i] for i in idx]) + 1
    src = np.full((b, int(s_len.max())), PAD, dtype=np.int64)
    tgt_in = np.full((b, int(t_len.max())), PAD, dtype=np.int64)
    tgt_out = np.full_like(tgt_in, PAD)
    for r, i in enumerate(idx):
        x, y = enc.src_ids(i), enc.tgt_ids(i)
        src[r, : len(x)], src[r, len(x)] = x, EOS
        tgt_in[r, 0], tgt_in[r, 1: len(y) + 1] = BOS, y
        tgt_out[r, : len(y)], tgt_out[r, len(y)] = y, EOS
    t = {k: torch.from_numpy(v) for k, v in (("src", src), ("tgt_in", tgt_in), ("tgt_out", tgt_out))}
    t["src_mask"], t["tgt_mask"] = t["src"] != PAD, t["tgt_out"] != PAD
    return {k: v.to(device) for k, v in t.items()}


def make_buckets(src_len: np.ndarray, tgt_len: np.ndarray, by: str, size: int) -> list[np.ndarray]:
    """Cut sentences sorted by (source, target) length into batches of similar length.

    by="sentences": `size` sentences each; by="tokens": as many sentences as fit `size` padded
    tokens, counting max(source, target) + 1 per sentence (fairseq's max_tokens rule).
    """
    order = np.lexsort((tgt_len, src_len))
    if by == "sentences":
        return [order[i: i + size] for i in range(0, len(order), size)]
    if by != "tokens":
        raise ValueError(f"batching must be 'sentences' or 'tokens' (the task class's), got {by!r}")
    cost = np.maximum(src_len, tgt_len)[order] + 1
    if cost.max() > size:
        raise ValueError(f"train.batch_tokens={size} is smaller than the longest sentence ({cost.max()} tokens)")
    buckets, start, longest = [], 0, 0
    for i, c in enumerate(cost):
        longest = max(longest, c)
        if longest * (i + 1 - start) > size:
            buckets.append(order[start:i])
            start, longest = i, c
    buckets.append(order[start:])
    return buckets


def maxibatch_batch(lengths: np.ndarray, batch_size: int, maxibatch: int, seed: int, step: int) -> np.ndarray:
    """Batch `step` in Nematus' order (data_iterator.py:101,133-216; nmt.py shuffle_each_epoch, maxibatch_size
    20): each epoch the training set is shuffled and read in maxibatches of maxibatch * batch_size
    sentences; a maxibatch is sorted by max(source, target) length and its batches are popped off the
    end, longest first. An epoch has ceil(n / batch_size) batches. `lengths` = max(source, target) per
    sentence; ties keep the shuffled order (a stable sort; Nematus' argsort is unstable)."""
    n = len(lengths)
    epoch, pos = divmod(int(step), -(-n // batch_size))
    chunk, j = divmod(pos, maxibatch)
    size = maxibatch * batch_size
    members = _epoch_permutation(n, seed, epoch)[chunk * size: (chunk + 1) * size]
    longest_first = members[np.argsort(lengths[members], kind="stable")][::-1]
    return longest_first[j * batch_size: (j + 1) * batch_size]


@lru_cache(maxsize=2)
def _epoch_permutation(n: int, seed: int, epoch: int) -> np.ndarray:
    return np.random.default_rng([seed, epoch]).permutation(n)


# The data of one run ------------------------------------------------------------------------

class TranslationData:
    """Vocabulary, encoded splits and the deterministic training batch schedule of one run."""

    def __init__(self, cfg: Mapping[str, Any], batching: str, batch_size: int):
        corpus = load_corpus(cfg)
        self.info = corpus.info
        data, paths = cfg["data"], cfg["paths"]
        key = corpus_hash(*corpus.train)
        cache = Path(os.path.expanduser(str(paths["cache_dir"])))
        # self.vocab is the target side's (decoding, the output layer); src_vocab the source side's, the
        # same joint vocabulary except for data=wmt14_nematus' two Nematus dictionaries
        if data["name"] == nematus.NAME:
            self.src_vocab, self.vocab = nematus.vocabularies(data, paths)
            vocab_key = hashlib.sha256(f"{self.src_vocab.cache_key}|{self.vocab.cache_key}".encode()).hexdigest()[:16]
        else:
            vocab_size = int(cfg["task"]["synthetic"]["vocab_size"] if data["name"] == "synthetic" else data["vocab_size"])
            self.vocab = self.src_vocab = build_vocab(*corpus.train, vocab_size=vocab_size, cache_dir=cache, corpus_key=key)
            vocab_key = hashlib.sha256(Path(self.vocab.model_file).read_bytes()).hexdigest()[:16]
        self.max_len = int(cfg["task"]["max_len"])

        train = self._encode(corpus.train, cache / "tokenized" / f"{key[:16]}-{vocab_key}.pt")
        keep = np.flatnonzero((train.src_len <= self.max_len) & (train.tgt_len <= self.max_len)
                              & (train.src_len > 0) & (train.tgt_len > 0))
        if len(keep) == 0:
            raise ValueError(f"no training pair has 1..{self.max_len} subwords per side; raise task.max_len")
        self.train = train if len(keep) == len(train) else subset(train, keep)
        cut = (cfg["task"].get("decode") or {}).get("max_eval_len")
        cut = DEFAULT_MAX_EVAL_LEN if cut is None else int(cut)

        def scored(name: str, pair: Pair) -> Pair:
            """(source, the references BLEU scores against): the *_text pairs."""
            return pair[0], corpus.references.get(name) or self.vocab.plain_text(pair[1])

        self.valid_text, self.valid = scored("valid", corpus.valid), self._encode_eval("valid", corpus.valid, cut)
        # the split that evaluation during training reads: held-out dev, else valid
        self.dev_text, self.dev = ((scored("dev", corpus.dev), self._encode_eval("dev", corpus.dev, cut))
                                   if corpus.dev is not None else (self.valid_text, self.valid))
        self.tests = {name: (scored(name, pair), self._encode_eval(name, pair, cut)) for name, pair in corpus.tests.items()}

        self.seed = int(cfg["seed"])
        self.batch_size = int(batch_size)
        # task.maxibatch: Nematus' shuffled maxibatches (RNNSearch); null: fixed length-sorted buckets in a fresh order each epoch
        self.maxibatch = cfg["task"].get("maxibatch")
        if self.maxibatch is not None and batching != "sentences":
            raise ValueError(f"task.maxibatch applies to batches of sentences, not to batching by {batching}; set it to null")
        self.lengths = np.maximum(self.train.src_len, self.train.tgt_len)
        self.buckets = (None if self.maxibatch is not None else
                        make_buckets(self.train.src_len, self.train.tgt_len, batching, int(batch_size)))
        # a report turns steps into epochs with these
        per_epoch = len(self.buckets) if self.buckets is not None else -(-len(self.train) // self.batch_size)
        self.info.update(train_pairs=len(self.train), batches_per_epoch=per_epoch)

    def _encode(self, pair: Pair, path: Path) -> Encoded:
        def build(tmp: Path) -> None:
            torch.save(Encoded.encode(self.src_vocab, pair, target_vocab=self.vocab).state(), tmp)

        return cached(path, lambda p: Encoded.from_state(torch.load(p, weights_only=True)), build)

    def _encode_eval(self, name: str, pair: Pair, cut: int) -> Encoded:
        """An evaluation split, each side cut to `cut` subwords (said once in the log when any is)."""
        sides = [self.src_vocab.encode(pair[0]), self.vocab.encode(pair[1])]
        for side, label in zip(sides, ("source", "target")):
            longer = [len(ids) for ids in side if len(ids) > cut]
            if longer:
                log.warning(f"{name}: {len(longer)} {label} sentence(s) longer than {cut} subwords (longest "
                            f"{max(longer)}) cut to {cut} for decoding and the valid loss (task.decode.max_eval_len)")
                side[:] = [ids[:cut] for ids in side]
        return Encoded(*sides)

    def batch_indices(self, step: int) -> np.ndarray:
        """Sentence indices of the global batch of `step` (a pure function of seed and step): with task.maxibatch
        Nematus' order (maxibatch_batch), else bucket perm_e[step mod n], e = epoch."""
        if self.maxibatch is not None:
            return maxibatch_batch(self.lengths, self.batch_size, int(self.maxibatch), self.seed, step)
        n = len(self.buckets)
        epoch, pos = divmod(int(step), n)
        perm = np.random.default_rng([self.seed, epoch]).permutation(n)
        return self.buckets[perm[pos]]

    def train_batch(self, step: int, rank: int = 0, world_size: int = 1, device: torch.device | str = "cpu") -> dict[str, Tensor]:
        idx = self.batch_indices(step)
        if len(idx) < world_size:
            raise ValueError(f"a batch of {len(idx)} sentences cannot be split over {world_size} ranks; raise the batch size")
        return collate(self.train, idx[rank::world_size], device)


def subset(enc: Encoded, keep: np.ndarray) -> Encoded:
    """The sentences `keep` of a split, in that order (vectorized: WMT-sized splits take seconds)."""
    out = Encoded.__new__(Encoded)
    for side in ("src", "tgt"):
        flat, off = getattr(enc, side), getattr(enc, side + "_off")
        lens = np.diff(off)[keep]
        new_off = np.zeros(len(keep) + 1, dtype=np.int64)
        np.cumsum(lens, out=new_off[1:])
        # token j of kept sentence r sits at off[keep[r]] + j
        gather = np.repeat(off[:-1][keep] - new_off[:-1], lens) + np.arange(new_off[-1])
        setattr(out, side, flat[gather])
        setattr(out, side + "_off", new_off)
    return out


def eval_batches(enc: Encoded, batch_size: int, device: torch.device | str = "cpu") -> Iterator[tuple[np.ndarray, dict[str, Tensor]]]:
    """(original indices, batch) over a split, sorted by length so little padding is decoded."""
    order = np.argsort(enc.src_len, kind="stable")
    for i in range(0, len(order), batch_size):
        idx = order[i: i + batch_size]
        yield idx, collate(enc, idx, device)
