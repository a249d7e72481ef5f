"""Cloze reading-comprehension data: DeepMind Q&A CNN `.question` files, or a generated stand-in.

An example is a document, a query with one `@placeholder`, the answer entity and the candidate
entities (those of the document). Entities stay anonymized as in the files (`@entity17`); the
answer classes are the entity numbers, so the model predicts "@entity17" as class 17, and only the
document's candidates may be predicted (Hermann et al. 2015).
"""
from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import torch
from torch import Tensor
from torch.nn.utils.rnn import pad_sequence

PAD, UNK, PLACEHOLDER = "<pad>", "<unk>", "@placeholder"
CNN_SPLITS = {"train": "training", "valid": "validation", "test": "test"}


@dataclass
class Example:
    doc: Tensor  # (T_doc,) token ids
    query: Tensor  # (T_query,) token ids
    answer: int  # entity number
    candidates: list[int]  # entity numbers the model may answer


@dataclass
class ReaderData:
    vocab: list[str]  # id -> token; 0 is padding
    n_entities: int  # answer classes: entity numbers 0 .. n_entities-1
    splits: dict[str, list[Example]]  # "train", "valid", "test"

    def max_len(self, field: str) -> int:
        return max(len(getattr(e, field)) for examples in self.splits.values() for e in examples)


def entity_number(token: str) -> int | None:
    """17 for "@entity17", None for any other token."""
    digits = token[len("@entity"):]
    return int(digits) if token.startswith("@entity") and digits.isdigit() else None


def collate(examples: list[Example], n_entities: int, device: torch.device) -> dict[str, Tensor]:
    """Pad a list of examples into one batch (masks True on real tokens)."""
    doc = pad_sequence([e.doc for e in examples], batch_first=True).long()
    query = pad_sequence([e.query for e in examples], batch_first=True).long()
    candidates = torch.zeros(len(examples), n_entities, dtype=torch.bool)
    for row, e in enumerate(examples):
        candidates[row, e.candidates] = True
    batch = {
        "doc": doc, "doc_mask": doc != 0, "query": query, "query_mask": query != 0,
        "candidates": candidates, "answer": torch.tensor([e.answer for e in examples]),
    }
    return {k: v.to(device) for k, v in batch.items()}


# Real data: DeepMind Q&A CNN --------------------------------------------------------------------
def parse_question(text: str, path: Path | str = "<text>") -> tuple[list[str], list[str], str, list[str]]:
    """One `.question` file -> (context tokens, query tokens, answer token, entity tokens listed).

    Blocks separated by blank lines: URL; context; question with @placeholder; answer; one
    "@entityN:Name" line per entity.
    """
    blocks = text.strip().split("\n\n")
    if len(blocks) < 4 or PLACEHOLDER not in blocks[2].split():
        raise ValueError(
            f"{path}: not a DeepMind Q&A .question file (want blocks URL, context, question with "
            f"{PLACEHOLDER}, answer, entities, separated by blank lines)"
        )
    listed = [line.split(":", 1)[0].strip() for line in blocks[4].splitlines()] if len(blocks) > 4 else []
    return blocks[1].split(), blocks[2].split(), blocks[3].strip(), listed


def _read_split(folder: Path, limit: int | None, max_doc_len: int | None) -> list[tuple]:
    """(context tokens, query tokens, answer number, candidate numbers) per file, in name order."""
    files = sorted(folder.glob("*.question"))
    if not files:
        raise FileNotFoundError(f"data=cnn: no .question files in {folder}")
    raw = []
    for path in files[:limit]:
        context, query, answer, listed = parse_question(path.read_text(encoding="utf-8"), path)
        if max_doc_len:
            context = context[:max_doc_len]
        entities = {n for n in map(entity_number, listed + context) if n is not None}
        number = entity_number(answer)
        if number is None:
            raise ValueError(f"{path}: answer {answer!r} is not an @entityN token")
        raw.append((context, query, number, sorted(entities | {number})))
    return raw


def load_cnn(data_cfg: Mapping[str, Any]) -> ReaderData:
    """Read root/questions/{training,validation,test}/*.question; vocabulary from training only.

    data.vocab_size keeps the most frequent training words (every @-token is always kept);
    data.max_doc_len cuts documents after that many tokens; data.limit reads only the first
    files of each split (sorted by name), for quick checks.
    """
    if not data_cfg.get("root"):
        raise ValueError("data=cnn needs data.root: the folder that holds questions/{training,validation,test}")
    questions = Path(str(data_cfg["root"])).expanduser() / "questions"
    for name in CNN_SPLITS.values():
        if not (questions / name).is_dir():
            raise FileNotFoundError(
                f"data=cnn: {questions / name} not found; set data.root to the DeepMind Q&A CNN folder "
                "holding questions/training, questions/validation and questions/test"
            )
    raw = {split: _read_split(questions / name, data_cfg.get("limit"), data_cfg.get("max_doc_len"))
           for split, name in CNN_SPLITS.items()}

    counts = Counter(token for context, query, _, _ in raw["train"] for token in context + query)
    ranked = sorted(counts, key=lambda w: (-counts[w], w))
    size = data_cfg.get("vocab_size")
    kept = [w for w in ranked if w.startswith("@")] + [w for w in ranked if not w.startswith("@")]
    keep = set(ranked if size is None else kept[: max(size - 2, 0)])
    vocab = [PAD, UNK] + [w for w in ranked if w in keep]
    ids = {w: i for i, w in enumerate(vocab)}

    def encode(tokens: list[str]) -> Tensor:
        return torch.tensor([ids.get(t, 1) for t in tokens], dtype=torch.int32)

    splits = {split: [Example(encode(c), encode(q), a, cands) for c, q, a, cands in rows]
              for split, rows in raw.items()}
    n_entities = 1 + max(max(e.candidates) for rows in splits.values() for e in rows)
    return ReaderData(vocab, n_entities, splits)


# Generated data -----------------------------------------------------------------------------------
def synthetic_reader(sizes: Mapping[str, Any]) -> ReaderData:
    """Cloze documents whose answer is written in the text.

    A document is a shuffled list of sentences: facts "@entityA relK @entityB ." (each relation at
    most once per document) and distractors "@entityC wI wJ ." (filler words). The query copies one
    fact with one entity replaced by @placeholder; the answer is that entity. Entity numbers are
    drawn afresh per document (anonymization, as in CNN), so the model must read, not memorize.
    Chance is 1 / (number of entities in the document). The data are fixed by task.synthetic.seed,
    not by the run's seed, so runs with different seeds differ only in init and batch order.
    """
    n_ent, n_rel, n_words = int(sizes["entities"]), int(sizes["relations"]), int(sizes["filler_words"])
    per_doc, n_facts, n_distract = int(sizes["doc_entities"]), int(sizes["facts"]), int(sizes["distractors"])
    if per_doc < 2 or per_doc > n_ent or n_facts > n_rel:
        raise ValueError("task.synthetic: need 2 <= doc_entities <= entities and facts <= relations")
    vocab = [PAD, UNK, PLACEHOLDER, "."] + [f"@entity{i}" for i in range(n_ent)]
    vocab += [f"rel{i}" for i in range(n_rel)] + [f"w{i}" for i in range(n_words)]
    ids = {w: i for i, w in enumerate(vocab)}

    def example(rng: random.Random) -> Example:
        entities = rng.sample(range(n_ent), per_doc)
        facts = [(*rng.sample(entities, 2), rel) for rel in rng.sample(range(n_rel), n_facts)]
        sentences = [[f"@entity{a}", f"rel{r}", f"@entity{b}", "."] for a, b, r in facts]
        for _ in range(n_distract):
            words = [f"w{rng.randrange(n_words)}" for _ in range(rng.randint(1, 3))]
            sentences.append([f"@entity{rng.choice(entities)}", *words, "."])
        rng.shuffle(sentences)
        doc = [token for sentence in sentences for token in sentence]
        a, b, r = rng.choice(facts)
        if rng.random() < 0.5:
            query, answer = [PLACEHOLDER, f"rel{r}", f"@entity{b}"], a
        else:
            query, answer = [f"@entity{a}", f"rel{r}", PLACEHOLDER], b
        present = sorted({n for n in map(entity_number, doc) if n is not None})
        encode = lambda tokens: torch.tensor([ids[t] for t in tokens], dtype=torch.int32)  # noqa: E731
        return Example(encode(doc), encode(query), answer, present)

    splits = {}
    for split in ("train", "valid", "test"):
        rng = random.Random(f"reader-{sizes['seed']}-{split}")
        splits[split] = [example(rng) for _ in range(int(sizes[f"{split}_size"]))]
    return ReaderData(vocab, n_ent, splits)


def load_reader_data(cfg: Any) -> ReaderData:
    name = cfg.data.name
    if name == "cnn":
        return load_cnn(cfg.data)
    if name == "synthetic":
        return synthetic_reader(cfg.task.synthetic)
    raise ValueError(f"task=reader reads data=synthetic or data=cnn, not data={name}")
