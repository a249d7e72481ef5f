"""Cloze reading-comprehension data: the CNN corpus in one of two layouts, or a generated stand-in.

data=cnn reads either (data.layout: auto picks the one found under data.root, top4 first):
  top4       the pickles the paper's authors trained on (Kiros' top4.zip, read by Cooijmans'
             pkl_data_iterator.py): dict.pkl (word -> id: NIL 0, EOS 1, UNK 2, NUM 3, words from 4)
             and {train4,valid4}_{pass,qs,ans}.pkl, lists of id lists (Attentive_reader
             scripts/binarize_text_3parts.py: passage and question end with EOS, which
             attentive_reader.py prepare_data drops; the answer's first id is the label);
             test4_*.pkl when present, else the test split is the validation split (the authors
             load no test files: Figure 5 is validation error).
  questions  DeepMind Q&A `questions/{training,validation,test}/*.question` files (whole documents).

An example is a document, a query with one `@placeholder`, the answer class and the candidate
classes (the document's entities). Entities stay anonymized as in the files (`@entity17`). For
.question files and generated data the classes are entity numbers ("@entity17" is class 17); for
top4 they are vocabulary ids. `ReaderData.answer_ids[c]` is the vocabulary id of class c: the
model's softmax runs over the whole vocabulary, as the authors' (n_words_ans = the vocabulary), and
may be restricted to the document's candidates (task.model.entity_mask, Hermann et al. 2015).
"""
from __future__ import annotations

import pickle
import random
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import torch
from torch import Tensor
from torch.nn.utils.rnn import pad_sequence

from ..base import check_int, read_text, split_lines
from ..paper_data import TOP4_URL

PAD, UNK, PLACEHOLDER = "<pad>", "<unk>", "@placeholder"
CNN_SPLITS = {"train": "training", "valid": "validation", "test": "test"}


@dataclass
class Example:
    doc: Tensor  # (T_doc,) token ids
    query: Tensor  # (T_query,) token ids
    answer: int  # answer class: the entity number (vocabulary id for top4)
    candidates: list[int]  # classes the model may answer (the document's entities)


@dataclass
class ReaderData:
    vocab: list[str]  # id -> token; 0 is padding
    n_entities: int  # answer classes 0 .. n_entities-1
    splits: dict[str, list[Example]]  # "train", "valid", "test"
    answer_ids: list[int] = field(default_factory=list)  # class -> vocabulary id (default: of "@entity<class>")
    info: dict[str, Any] = field(default_factory=dict)  # provenance for summary.json (layout, test split)

    def __post_init__(self) -> None:
        if not self.answer_ids:
            ids = {w: i for i, w in enumerate(self.vocab)}
            self.answer_ids = [ids.get(f"@entity{c}", 1) for c in range(self.n_entities)]

    def entity_ids(self) -> list[int]:
        """Vocabulary ids of every entity token (what the authors' training batches permute)."""
        return [i for i, w in enumerate(self.vocab) if "@entity" in w]

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
    "@entityN:Name" line per entity. Lines end at "\\n" only (one "\\r" before it is dropped, for CRLF
    files); a stray "\\r" or a Unicode line separator inside a line is just whitespace there.
    """
    if not text.strip():
        raise ValueError(f"{path}: empty file; a .question file holds URL, context, question, answer and entities")
    blocks = "\n".join(split_lines(text)).strip().split("\n\n")
    if len(blocks) < 4 or PLACEHOLDER not in blocks[2].split():
        raise ValueError(
            f"{path}: not a DeepMind Q&A .question file (want blocks URL, context, question with "
            f"{PLACEHOLDER}, answer, entities, separated by blank lines)"
        )
    listed = [line.split(":", 1)[0].strip() for line in blocks[4].split("\n")] if len(blocks) > 4 else []
    return blocks[1].split(), blocks[2].split(), blocks[3].strip(), listed


SENTENCE_ENDS = {".", "!", "?"}


def top_sentences(context: list[str], query: list[str], k: int) -> list[str]:
    """The k sentences of a tokenized document that share the most distinct words with the query
    (ties: the earlier sentence), kept in document order; sentences end at ".", "!" or "?" tokens.

    An APPROXIMATION of Kiros' top4 passages for .question files (data.top_sentences): the script
    that made top4 is not public, so which 4 sentences it kept, and by what score, is unknown.
    """
    sentences, current = [], []
    for token in context:
        current.append(token)
        if token in SENTENCE_ENDS:
            sentences.append(current)
            current = []
    if current:
        sentences.append(current)
    words = set(query) - {PLACEHOLDER}
    ranked = sorted(range(len(sentences)), key=lambda i: (-len(words & set(sentences[i])), i))
    return [token for i in sorted(ranked[:k]) for token in sentences[i]]


def _read_split(folder: Path, limit: int | None, max_doc_len: int | None, k_sentences: int | None = None) -> list[tuple]:
    """(context tokens, query tokens, answer number, candidate numbers) per file, in name order."""
    files = sorted(folder.glob("*.question"))
    if not files:
        raise FileNotFoundError(f"data=cnn: no .question files in {folder}")
    raw = []
    for path in files[:limit]:
        context, query, answer, listed = parse_question(read_text(path), path)
        if k_sentences:
            context = top_sentences(context, query, k_sentences)
        if max_doc_len:
            context = context[:max_doc_len]
        entities = {n for n in map(entity_number, listed + context) if n is not None}
        number = entity_number(answer)
        if number is None:
            raise ValueError(f"{path}: answer {answer!r} is not an @entityN token")
        raw.append((context, query, number, sorted(entities | {number})))
    return raw


LAYOUTS = ("auto", "top4", "questions")
TOP4_FILES = {"train": "train4", "valid": "valid4", "test": "test4"}  # pkl_data_iterator.get_data_files("top4")
TOP4_PARTS = ("pass", "qs", "ans")


def cnn_layout(data_cfg: Mapping[str, Any]) -> str:
    """"top4" or "questions": data.layout, or (auto) the one found under data.root, top4 first."""
    layout = str(data_cfg.get("layout") or "auto")
    if layout not in LAYOUTS:
        raise ValueError(f"data.layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")
    if layout != "auto":
        return layout
    root = Path(str(data_cfg["root"])).expanduser()
    files = {**TOP4_FILES, **dict(data_cfg.get("files") or {})}
    return "top4" if (root / f"{files['train']}_pass.pkl").is_file() else "questions"


def load_cnn(data_cfg: Mapping[str, Any]) -> ReaderData:
    """data=cnn: the top4 pickles or the .question files under data.root (module docstring)."""
    if not data_cfg.get("root"):
        raise ValueError("data=cnn needs data.root: the folder that holds top4's dict.pkl and train4_*.pkl "
                         "or DeepMind Q&A's questions/{training,validation,test}")
    for key, low in (("limit", 1), ("max_doc_len", 1), ("vocab_size", 2), ("top_sentences", 1)):
        check_int(data_cfg, key, low, optional=True, name=f"data.{key}")
    if cnn_layout(data_cfg) == "top4":
        return load_top4(data_cfg)
    return load_questions(data_cfg)


def load_questions(data_cfg: Mapping[str, Any]) -> ReaderData:
    """Read root/questions/{training,validation,test}/*.question; vocabulary from training only.

    data.vocab_size keeps the most frequent training words (every @-token is always kept, and every
    @entityN up to the largest N of any split is in the vocabulary, so each answer class has its own
    output); data.top_sentences keeps that many sentences per document (`top_sentences`, an
    approximation of top4); data.max_doc_len cuts documents after that many tokens; data.limit
    reads only the first files of each split (sorted by name), for quick checks.
    """
    questions = Path(str(data_cfg["root"])).expanduser() / "questions"
    for name in CNN_SPLITS.values():
        if not (questions / name).is_dir():
            raise FileNotFoundError(
                f"data=cnn: {questions / name} not found; set data.root to the DeepMind Q&A CNN folder "
                "holding questions/training, questions/validation and questions/test, or to the folder of "
                f"top4.zip's pickles (dict.pkl, train4_pass.pkl, ...; the paper's data: {TOP4_URL})"
            )
    raw = {split: _read_split(questions / name, data_cfg.get("limit"), data_cfg.get("max_doc_len"),
                              data_cfg.get("top_sentences"))
           for split, name in CNN_SPLITS.items()}

    counts = Counter(token for context, query, _, _ in raw["train"] for token in context + query)
    ranked = sorted(counts, key=lambda w: (-counts[w], w))
    size = data_cfg.get("vocab_size")
    kept = [w for w in ranked if w.startswith("@")] + [w for w in ranked if not w.startswith("@")]
    keep = set(ranked if size is None else kept[: max(size - 2, 0)])
    vocab = [PAD, UNK] + [w for w in ranked if w in keep]
    n_entities = 1 + max(max(cands) for rows in raw.values() for *_, cands in rows)
    vocab += [e for e in (f"@entity{c}" for c in range(n_entities)) if e not in keep]
    ids = {w: i for i, w in enumerate(vocab)}

    def encode(tokens: list[str]) -> Tensor:
        return torch.tensor([ids.get(t, 1) for t in tokens], dtype=torch.int32)

    splits = {split: [Example(encode(c), encode(q), a, cands) for c, q, a, cands in rows]
              for split, rows in raw.items()}
    info = {"layout": "questions", "top_sentences": data_cfg.get("top_sentences")}
    return ReaderData(vocab, n_entities, splits, info=info)


# Real data: the top4 pickles ---------------------------------------------------------------------
class _PlainUnpickler(pickle.Unpickler):
    """Loads lists, dicts, ints and strings only: a pickle that names any class or function (which
    could run code) is refused. Python 2's str comes back decoded as latin-1 (see _text)."""

    def find_class(self, module: str, name: str):
        raise pickle.UnpicklingError(f"refusing to load {module}.{name}: top4 pickles hold only lists, dicts, "
                                     "ints and strings")


def _load_pickle(path: Path) -> Any:
    if not path.is_file():
        raise FileNotFoundError(f"data=cnn (top4): {path} not found; data.root must hold dict.pkl and "
                                f"{{train4,valid4}}_{{pass,qs,ans}}.pkl from top4.zip ({TOP4_URL})")
    try:
        with open(path, "rb") as f:
            return _PlainUnpickler(f, encoding="latin1").load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError) as e:
        raise ValueError(f"data=cnn (top4): {path} is not a readable top4 pickle ({type(e).__name__}: {e})") from e


def _text(word: Any) -> str:
    """A Python 2 str read as latin-1, back to the UTF-8 text it was (latin-1 if it was not UTF-8)."""
    if isinstance(word, bytes):
        word = word.decode("latin1")
    try:
        return str(word).encode("latin1").decode("utf-8")
    except (UnicodeEncodeError, UnicodeDecodeError):
        return str(word)


def load_top4(data_cfg: Mapping[str, Any]) -> ReaderData:
    """Kiros' top4 pickles as Cooijmans' pkl_data_iterator reads them (module docstring).

    Ids are kept as they are (0 = NIL doubles as padding, as prepare_data pads with 0); the vocabulary
    has max id + 1 entries (the authors' emb_sz = len(dict) + 1). Each sequence's last id (the EOS
    binarize_text_3parts.py appended) is dropped, as prepare_data does; the label is the answer's
    first id. Classes are vocabulary ids; candidates are the passage's entity ids. data.files renames
    the split prefixes (e.g. train8v2 for top8); data.limit reads the first N examples of each split;
    data.max_doc_len cuts passages.
    """
    root = Path(str(data_cfg["root"])).expanduser()
    files = {**TOP4_FILES, **dict(data_cfg.get("files") or {})}
    words = _load_pickle(root / str(data_cfg.get("dict") or "dict.pkl"))
    if not isinstance(words, dict) or not all(isinstance(i, int) for i in words.values()):
        raise ValueError(f"data=cnn (top4): {root / 'dict.pkl'} is not a word -> id dict")
    size = 1 + max(words.values())
    vocab = [f"<id{i}>" for i in range(size)]
    for word, i in words.items():
        vocab[i] = _text(word)
    vocab[0] = PAD
    eos = words.get("EOS", words.get(b"EOS"))
    limit, max_doc_len = data_cfg.get("limit"), data_cfg.get("max_doc_len")

    def strip(ids: list[int]) -> list[int]:
        return list(ids[:-1]) if ids and ids[-1] == eos else list(ids)

    def read(prefix: str) -> list[Example]:
        passages, questions, answers = (_load_pickle(root / f"{prefix}_{part}.pkl") for part in TOP4_PARTS)
        if not len(passages) == len(questions) == len(answers):
            raise ValueError(f"data=cnn (top4): {prefix}_pass/qs/ans.pkl hold {len(passages)}, {len(questions)}, "
                             f"{len(answers)} examples; they must be aligned")
        examples = []
        for doc, query, answer in list(zip(passages, questions, answers))[:limit]:
            doc = strip(doc)[:max_doc_len] if max_doc_len else strip(doc)
            label = int(answer[0]) if isinstance(answer, (list, tuple)) else int(answer)
            if not 0 <= label < size or any(not 0 <= int(i) < size for i in doc):
                raise ValueError(f"data=cnn (top4): {prefix}: an id outside dict.pkl's 0..{size - 1}")
            candidates = sorted({int(i) for i in doc if "@entity" in vocab[int(i)]} | {label})
            examples.append(Example(torch.tensor(doc, dtype=torch.int32), torch.tensor(strip(query), dtype=torch.int32),
                                    label, candidates))
        return examples

    splits = {"train": read(files["train"]), "valid": read(files["valid"])}
    has_test = (root / f"{files['test']}_pass.pkl").is_file()
    splits["test"] = read(files["test"]) if has_test else splits["valid"]
    info = {"layout": "top4", "test_split": files["test"] if has_test else f"{files['valid']} (no test files)"}
    return ReaderData(vocab, size, splits, answer_ids=list(range(size)), info=info)


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


def check_paper_passages(cfg: Any) -> None:
    """scale=paper trains on the authors' top4 passages (rmsnorm README.md:145). The rule that cut them
    from the CNN documents is in none of the authors' repositories, so without the top4 pickles a paper
    run must say what it trains on instead: data.whole_documents=true (whole documents: longer steps,
    Table 6's time and Figure 5's error not the paper's) or data.top_sentences=k (our approximation)."""
    data = cfg.get("data") or {}
    if (cfg.get("scale") or {}).get("name") != "paper" or data.get("name") != "cnn" or cnn_layout(data) == "top4":
        return
    if data.get("top_sentences") is None and not data.get("whole_documents"):
        raise ValueError(f"scale=paper reader: no top4 pickles ({data['files']['train']}_pass.pkl) under {data['root']}, "
                         f"and the rule that made them from the .question files is not public; put top4.zip's files ({TOP4_URL}) "
                         "there, or choose explicitly: data.whole_documents=true (whole documents) or "
                         "data.top_sentences=4 (an approximation of top4)")


def load_reader_data(cfg: Any) -> ReaderData:
    name = cfg.data.name
    if name == "cnn":
        return load_cnn(cfg.data)
    if name == "synthetic":
        return synthetic_reader(cfg.task.synthetic)
    raise ValueError(f"task=reader reads data=synthetic or data=cnn, not data={name}")
