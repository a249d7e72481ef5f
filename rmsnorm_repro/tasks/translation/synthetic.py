"""A generated language pair that a translation model must really learn (data=synthetic).

Source ("English-like", SVO): Det Adj* Noun[s] Verb Det Adj* Noun[s] [Prep Det Adj* Noun[s]] .
Target ("German-like"): every word is translated through a fixed random lexicon, and
- reordering: adjectives follow their noun in reverse order, the verb moves to the end of the
  clause (after the object), the prepositional phrase stays last;
- agreement: each target noun has a gender (3 classes); the target determiner and adjectives take
  a suffix for the noun's gender and number, and the verb a suffix for the subject's number. The
  source marks number only on the noun (and gender not at all), so the model must look ahead.
- first word capitalized, sentence-final "." attached as in real text: detokenization and case-sensitive BLEU are exercised.

The whole corpus is a pure function of the sizes and `seed`, which is the language's own seed,
not the run's: runs with different training seeds see the same language and the same splits.
"""
from __future__ import annotations

import random
from typing import Mapping

SRC_SYLLABLES = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]
TGT_SYLLABLES = [c + v for c in ("b", "ch", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "sch", "t", "w") for v in ("a", "ä", "e", "i", "o", "ö", "u", "ü")]
GENDER_SUFFIX = {"det": (("er", "ie", "as"), ("ie", "ie", "ie")), "adj": (("er", "e", "es"), ("en", "en", "en"))}
VERB_SUFFIX = ("t", "en")
SRC_PLURAL = "s"
TGT_PLURAL = "en"


def _words(rng: random.Random, syllables: list[str], n: int, taken: set[str]) -> list[str]:
    out = []
    while len(out) < n:
        w = "".join(rng.choice(syllables) for _ in range(rng.randint(2, 3)))
        if w not in taken:
            taken.add(w)
            out.append(w)
    return out


class Language:
    """The lexicon of one synthetic pair: source words and their target stems (+ noun genders)."""

    def __init__(self, seed: int, nouns: int, adjectives: int, verbs: int, determiners: int = 4, prepositions: int = 6):
        rng = random.Random(f"synthetic-language-{seed}")
        taken_s: set[str] = set()
        taken_t: set[str] = set()
        self.classes = {}
        for name, n in (("noun", nouns), ("adj", adjectives), ("verb", verbs), ("det", determiners), ("prep", prepositions)):
            src = _words(rng, SRC_SYLLABLES, n, taken_s)
            tgt = _words(rng, TGT_SYLLABLES, n, taken_t)
            self.classes[name] = list(zip(src, tgt))
        self.gender = [rng.randrange(3) for _ in range(nouns)]

    def noun_phrase(self, rng: random.Random, max_adjectives: int) -> tuple[list[str], list[str], int]:
        """(source words, target words, number) of one Det Adj* Noun phrase."""
        det = rng.choice(self.classes["det"])
        k = rng.randrange(len(self.classes["noun"]))
        noun, gender = self.classes["noun"][k], self.gender[k]
        adjs = [rng.choice(self.classes["adj"]) for _ in range(rng.randint(0, max_adjectives))]
        plural = int(rng.random() < 0.3)
        src = [det[0]] + [a[0] for a in adjs] + [noun[0] + (SRC_PLURAL if plural else "")]
        tgt = [det[1] + GENDER_SUFFIX["det"][plural][gender], noun[1] + (TGT_PLURAL if plural else "")]
        tgt += [a[1] + GENDER_SUFFIX["adj"][plural][gender] for a in reversed(adjs)]
        return src, tgt, plural

    def sentence(self, rng: random.Random, max_adjectives: int) -> tuple[str, str]:
        subj_s, subj_t, plural = self.noun_phrase(rng, max_adjectives)
        verb = rng.choice(self.classes["verb"])
        obj_s, obj_t, _ = self.noun_phrase(rng, max_adjectives)
        src = subj_s + [verb[0]] + obj_s
        tgt = subj_t + obj_t + [verb[1] + VERB_SUFFIX[plural]]
        if rng.random() < 0.5:
            prep = rng.choice(self.classes["prep"])
            pp_s, pp_t, _ = self.noun_phrase(rng, max_adjectives)
            src += [prep[0]] + pp_s
            tgt += [prep[1]] + pp_t
        return _sentence_case(src), _sentence_case(tgt)


def _sentence_case(words: list[str]) -> str:
    return " ".join([words[0].capitalize()] + words[1:]) + "."


def generate(cfg: Mapping) -> dict[str, tuple[list[str], list[str]]]:
    """{"train" | "valid" | "test": (source sentences, target sentences)} from task.synthetic.

    Valid and test sentences never occur in train (exact duplicates are regenerated), so BLEU
    measures generalization over new combinations, not memorization.
    """
    lang = Language(int(cfg["seed"]), int(cfg["nouns"]), int(cfg["adjectives"]), int(cfg["verbs"]))
    max_adj = int(cfg.get("max_adjectives", 2))
    rng = random.Random(f"synthetic-corpus-{cfg['seed']}")
    seen: set[str] = set()
    splits = {}
    for split in ("valid", "test", "train"):
        src, tgt = [], []
        while len(src) < int(cfg[split]):
            s, t = lang.sentence(rng, max_adj)
            if s in seen:
                continue
            if split != "train":  # train may repeat itself, never a valid/test sentence
                seen.add(s)
            src.append(s)
            tgt.append(t)
        splits[split] = (src, tgt)
    return splits
