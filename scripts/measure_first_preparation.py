"""Time and peak memory of a translation corpus' first preparation at WMT14's size, on generated text.

    /usr/bin/time -v python scripts/measure_first_preparation.py --pairs 4500000 --work /tmp/prep

writes <work>/text/{train,val}.{en,de} (Zipf-distributed pseudo-words from a 200,000-word lexicon per
language, 20-30 words a sentence: WMT14 En-De's scale), then runs what a first `data=wmt14` run does
after reading its copy (rmsnorm_repro/tasks/translation/data.py TranslationData): the corpus hash, the
32k joint sentencepiece BPE (cached under <work>/cache) and the tokenization of every pair (Encoded.encode). It prints the
seconds of each phase and the process' peak resident memory. Reading the hub's saved copy (data=wmt14)
instead of text files (data=text, measured here) is not part of the numbers.

With --nematus it times what a first `data=wmt14_nematus` run does instead: no BPE; the two Nematus
dictionaries (written first from the generated text, words by falling frequency, untimed) are read and
every pair's words looked up in them (translation/nematus.py NematusVocab, Encoded.encode).
"""
from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np


def write_corpus(root: Path, pairs: int, seed: int = 0, lexicon: int = 200_000) -> None:
    """train (pairs lines) and val (1,000 lines) per language, one sentence a line."""
    rng = np.random.default_rng(seed)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    root.mkdir(parents=True, exist_ok=True)
    for lang in ("en", "de"):
        words = ["".join(rng.choice(letters, size=int(n))) for n in rng.integers(2, 12, size=lexicon)]
        ranks = np.arange(1, lexicon + 1)
        zipf = 1.0 / ranks
        zipf /= zipf.sum()
        for split, count in (("train", pairs), ("val", 1000)):
            with open(root / f"{split}.{lang}", "w", encoding="utf-8") as f:
                for start in range(0, count, 100_000):
                    n = min(100_000, count - start)
                    lengths = rng.integers(20, 31, size=n)
                    ids = rng.choice(lexicon, size=int(lengths.sum()), p=zipf)
                    at = 0
                    for length in lengths:
                        f.write(" ".join(words[i] for i in ids[at:at + length]) + "\n")
                        at += length


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=4_500_000)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--vocab-size", type=int, default=32_000)
    parser.add_argument("--lexicon", type=int, default=200_000, help="distinct pseudo-words per language")
    parser.add_argument("--nematus", action="store_true", help="time data=wmt14_nematus' preparation instead")
    args = parser.parse_args(argv)
    from rmsnorm_repro.tasks.translation.data import Encoded, load_corpus
    from rmsnorm_repro.tasks.translation.nematus import NematusVocab
    from rmsnorm_repro.tasks.translation.vocab import build_vocab, corpus_hash

    text = args.work / "text"
    clock = time.perf_counter()
    if not (text / "train.de").exists():
        write_corpus(text, args.pairs, lexicon=args.lexicon)
    phases = {"generate": time.perf_counter() - clock}
    cfg = {"data": {"name": "text", "root": str(text), "src": "en", "tgt": "de", "train": "train", "valid": "val",
                    "test": [], "test_if_present": False, "vocab_size": args.vocab_size, "dev_pairs": None},
           "paths": {"data_dir": str(args.work), "cache_dir": str(args.work / "cache")}}
    clock = time.perf_counter()
    corpus = load_corpus(cfg)
    phases["read"] = time.perf_counter() - clock
    clock = time.perf_counter()
    key = corpus_hash(*corpus.train)
    phases["hash"] = time.perf_counter() - clock
    if args.nematus:
        for side, lines in zip(("en", "de"), corpus.train):
            if not (text / f"train.{side}.json").exists():
                counts = Counter(word for line in lines for word in line.split(" "))
                words = {"eos": 0, "UNK": 1, **{w: i + 2 for i, (w, _) in enumerate(counts.most_common())}}
                (text / f"train.{side}.json").write_text(json.dumps(words, ensure_ascii=False), encoding="utf-8")
        clock = time.perf_counter()
        src_vocab, vocab = (NematusVocab(text / f"train.{side}.json") for side in ("en", "de"))
        phases["dictionaries"] = time.perf_counter() - clock
    else:
        clock = time.perf_counter()
        src_vocab = vocab = build_vocab(*corpus.train, vocab_size=args.vocab_size, cache_dir=args.work / "cache",
                                        corpus_key=key)
        phases["bpe"] = time.perf_counter() - clock
    clock = time.perf_counter()
    encoded = Encoded.encode(src_vocab, corpus.train, target_vocab=vocab)
    phases["tokenize"] = time.perf_counter() - clock
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
    print(f"{len(encoded):,} pairs, {len(encoded.src) + len(encoded.tgt):,} subwords; "
          + ", ".join(f"{name} {seconds:.0f} s" for name, seconds in phases.items()) + f"; peak RSS {peak:.2f} GB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
