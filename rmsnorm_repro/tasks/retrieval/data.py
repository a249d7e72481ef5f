"""Image-caption data: the order-embedding COCO files, or generated images and captions.

A split holds N images (feature vectors) and 5N captions, captions 5i .. 5i+4 describing image i: one
tokenized caption per line and an (N, 4096) array of VGG19 10-crop fc7 features, as ivendrov's
order-embedding `coco.zip` holds them (`{train,val,test}.txt`, `images/10crop/{train,val,test}.npy`,
read by their datasets.py:26-32) or as `{train,dev,test}_caps.txt` and `{train,dev,test}_ims.npy`
(scripts/extract_coco_features.py builds the .npy files).
"""
from __future__ import annotations

import logging
import random
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import torch
from torch import Tensor
from torch.nn.utils.rnn import pad_sequence

from ..base import check_int, read_lines

CAPTIONS_PER_IMAGE = 5
PAD, UNK, EOS = "<pad>", "<unk>", "<eos>"
COCO_SPLITS = {"train": "train", "valid": "dev", "test": "test"}
OE_SPLIT_NAMES = {"train": "train", "dev": "val", "test": "test"}  # ivendrov datasets.py:26 (coco.zip's names)
log = logging.getLogger(__name__)


@dataclass
class Split:
    captions: list[Tensor]  # 5N token-id tensors
    images: Tensor  # (N, feature_dim) float32


@dataclass
class RetrievalData:
    vocab: list[str]  # id -> word; 0 is padding
    splits: dict[str, Split]  # "train", "valid", "test"

    @property
    def feature_dim(self) -> int:
        return self.splits["train"].images.shape[1]


def pad_captions(captions: list[Tensor], device: torch.device) -> tuple[Tensor, Tensor]:
    """Token ids (B, T) and mask (B, T), True on real tokens."""
    tokens = pad_sequence(captions, batch_first=True).long().to(device)
    return tokens, tokens != 0


def specials(caption_eos: bool) -> list[str]:
    """The ids before the words: padding 0, unknown 1, and with task.caption_eos the end token 2."""
    return [PAD, UNK, EOS] if caption_eos else [PAD, UNK]


def caption_encoder(vocab: list[str], caption_eos: bool):
    """words -> token ids (unknown words: UNK). caption_eos: every caption ends with EOS (ivendrov's
    encoder reads word 0, `<eos>`, as one more step: datasource.py:59-67, tools.py:78-82) and an empty
    caption is EOS alone; else an empty caption is one UNK (the GRU needs a step)."""
    ids = {w: i for i, w in enumerate(vocab)}
    if caption_eos:
        return lambda words: torch.tensor([ids.get(w, 1) for w in words] + [ids[EOS]], dtype=torch.int32)
    return lambda words: torch.tensor([ids.get(w, 1) for w in words] or [1], dtype=torch.int32)


# Real data: COCO in the order-embedding layout ------------------------------------------------------
def coco_layouts(root: Path, name: str) -> tuple[tuple[Path, Path], tuple[Path, Path]]:
    """(coco.zip's, ours): split `name`'s (captions, features) as `{train,val,test}.txt` and
    `images/10crop/{train,val,test}.npy`, and as `{name}_caps.txt` and `{name}_ims.npy`."""
    theirs = root / f"{OE_SPLIT_NAMES[name]}.txt", root / "images" / "10crop" / f"{OE_SPLIT_NAMES[name]}.npy"
    return theirs, (root / f"{name}_caps.txt", root / f"{name}_ims.npy")


def coco_files(root: Path, name: str) -> tuple[Path, Path]:
    """(captions, features) of split `name` (train, dev, test): coco.zip's when its captions are there (the
    features the authors' models were trained on come first), else ours (coco_layouts)."""
    theirs, ours = coco_layouts(root, name)
    return theirs if theirs[0].is_file() else ours


def shown_files(root: Path, files: tuple[Path, ...]) -> tuple[str, ...]:
    """The files as paths inside the data folder (never this machine's folders)."""
    return tuple(path.relative_to(root).as_posix() for path in files)


def non_finite_rows(array: np.ndarray, chunk: int = 4096) -> int:
    """How many rows hold a NaN or an infinity, a chunk of rows at a time (113k x 4096 features at once
    would take a 460 MB mask)."""
    return sum(int((~np.isfinite(array[i:i + chunk])).any(1).sum()) for i in range(0, len(array), chunk))


def read_coco_split(root: Path, name: str, lowercase: bool = True) -> tuple[list[list[str]], np.ndarray]:
    """(captions as word lists, lowercased unless told not to, image features) of one split; checks the
    5-per-image layout.

    One caption per line, lines split at "\\n" only (as ivendrov's reader): a stray "\\r" or U+2028
    inside a caption is whitespace, an empty line is an empty caption (it keeps its place, so the
    captions after it stay with their images); only empty lines at the end of the file are dropped.
    """
    caps_path, ims_path = coco_files(root, name)
    ours = coco_layouts(root, name)[1]
    if (caps_path, ims_path) != ours and any(path.is_file() for path in ours):
        log.info(f"data=coco: both coco.zip's {', '.join(shown_files(root, (caps_path, ims_path)))} and "
                 f"{', '.join(shown_files(root, ours))} in the data folder: coco.zip's are read (move the others "
                 "to a folder of their own to use them)")
    for path in (caps_path, ims_path):
        if not path.is_file():
            raise FileNotFoundError(
                f"data=coco: {path} not found; set data.root to the folder of ivendrov's coco.zip ({{train,val,test}}.txt, "
                "images/10crop/{train,val,test}.npy) or one with {train,dev,test}_caps.txt and {train,dev,test}_ims.npy "
                "(build the .npy files with scripts/extract_coco_features.py)"
            )
    lines = read_lines(caps_path)
    while lines and not lines[-1].strip():
        lines.pop()
    if not lines:
        raise ValueError(f"data=coco: {caps_path} is empty: want {CAPTIONS_PER_IMAGE} captions per image, one per line")
    captions = [(line.lower() if lowercase else line).split() for line in lines]
    try:
        images = np.load(ims_path, allow_pickle=False)
    except (ValueError, EOFError, OSError) as e:  # truncated, empty, pickled or not an .npy at all
        raise ValueError(f"data=coco: {ims_path} is not a readable .npy array ({type(e).__name__}: {' '.join(str(e).split())}); "
                         "rebuild it with scripts/extract_coco_features.py") from e
    if images.ndim != 2 or images.dtype.kind not in "fiu" or len(captions) != CAPTIONS_PER_IMAGE * images.shape[0]:
        raise ValueError(
            f"data=coco: {caps_path.name} has {len(captions)} captions but {ims_path.name} has shape "
            f"{images.shape}; want {CAPTIONS_PER_IMAGE} consecutive captions per image row"
        )
    bad = non_finite_rows(images)
    if bad:  # a NaN feature would rank as a win in every comparison it enters
        raise ValueError(f"data=coco: {ims_path.name} holds NaN or inf in {bad} of {images.shape[0]} image rows: "
                         "rebuild it with scripts/extract_coco_features.py")
    return captions, images


def load_coco(data_cfg: Mapping[str, Any], caption_eos: bool = False) -> RetrievalData:
    """All three splits; vocabulary from training captions (data.vocab_size most frequent, null: all);
    data.max_len cuts captions after that many words (before the EOS that caption_eos appends)."""
    if not data_cfg.get("root"):
        raise ValueError("data=coco needs data.root: the folder of ivendrov's coco.zip, or one with "
                         "{train,dev,test}_caps.txt and _ims.npy")
    head = specials(caption_eos)
    check_int(data_cfg, "max_len", 1, optional=True, name="data.max_len")
    check_int(data_cfg, "vocab_size", len(head), optional=True, name="data.vocab_size")
    root = Path(str(data_cfg["root"])).expanduser()
    raw = {split: read_coco_split(root, name) for split, name in COCO_SPLITS.items()}
    dims = {coco_files(root, name)[1].name: raw[split][1].shape[1] for split, name in COCO_SPLITS.items()}
    if len(set(dims.values())) > 1:
        raise ValueError(f"data=coco: the image features differ in size between splits ({dims}); "
                         "build all three with the same scripts/extract_coco_features.py settings")
    max_len = data_cfg.get("max_len")
    counts = Counter(w for caption in raw["train"][0] for w in caption)
    ranked = sorted(counts, key=lambda w: (-counts[w], w))
    size = data_cfg.get("vocab_size")
    vocab = head + (ranked if size is None else ranked[: max(int(size) - len(head), 0)])
    encode = caption_encoder(vocab, caption_eos)
    splits = {
        split: Split([encode(c[:max_len]) for c in captions], torch.from_numpy(np.asarray(images, dtype=np.float32)))
        for split, (captions, images) in raw.items()
    }
    return RetrievalData(vocab, splits)


# Generated data -----------------------------------------------------------------------------------
def synthetic_retrieval(sizes: Mapping[str, Any], caption_eos: bool = False) -> RetrievalData:
    """Images and captions from one latent structure: each image shows a few objects.

    An image's features are the sum of its objects' fixed random prototypes plus noise; each of its
    five captions names a random subset of those objects in random order ("a obj3 near a obj7"),
    so matching a caption to its image means recovering the object set from both sides. Fixed by
    task.synthetic.seed.
    """
    n_obj, per_image = int(sizes["objects"]), int(sizes["objects_per_image"])
    min_named, dim, noise = int(sizes["min_named"]), int(sizes["feature_dim"]), float(sizes["noise"])
    if not 1 <= min_named <= per_image <= n_obj:
        raise ValueError("task.synthetic: need 1 <= min_named <= objects_per_image <= objects")
    connectors = ["and", "with", "near", "on", "beside"]
    vocab = specials(caption_eos) + ["a"] + connectors + [f"obj{i}" for i in range(n_obj)]
    encode = caption_encoder(vocab, caption_eos)
    generator = torch.Generator().manual_seed(int(sizes["seed"]))
    prototypes = torch.randn(n_obj, dim, generator=generator)

    splits = {}
    for split in ("train", "valid", "test"):
        rng = random.Random(f"retrieval-{sizes['seed']}-{split}")
        n_images = int(sizes[f"{split}_images"])
        objects = [rng.sample(range(n_obj), per_image) for _ in range(n_images)]
        presence = torch.zeros(n_images, n_obj)
        for row, objs in enumerate(objects):
            presence[row, objs] = 1.0
        images = presence @ prototypes + noise * torch.randn(n_images, dim, generator=generator)
        captions = []
        for objs in objects:
            for _ in range(CAPTIONS_PER_IMAGE):
                named = rng.sample(objs, rng.randint(min_named, per_image))
                words = ["a", f"obj{named[0]}"]
                for o in named[1:]:
                    words += [rng.choice(connectors), "a", f"obj{o}"]
                captions.append(encode(words))
        splits[split] = Split(captions, images)
    return RetrievalData(vocab, splits)


def load_retrieval_data(cfg: Any) -> RetrievalData:
    name, caption_eos = cfg.data.name, bool(cfg.task.get("caption_eos", False))
    if name == "coco":
        return load_coco(cfg.data, caption_eos)
    if name == "synthetic":
        return synthetic_retrieval(cfg.task.synthetic, caption_eos)
    raise ValueError(f"task=retrieval reads data=synthetic or data=coco, not data={name}")
