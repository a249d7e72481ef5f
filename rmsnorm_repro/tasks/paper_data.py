"""The data each task trained on in the paper, where it comes from, and the rule that a paper-scale
run trains on it: `scale=paper` on generated data is refused unless the command asks for it
(`data=synthetic`), so no GPU-days go into a folder of generated text by default."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from omegaconf import DictConfig

PAPER_SCALE = "paper"
GENERATED = "synthetic"
TOP4_URL = "http://www.cs.toronto.edu/~rkiros/top4.zip"
NEMATUS_DATA_URL = "http://data.statmt.org/bzhang/neurips19_rmsnorm/"


@dataclass(frozen=True)
class DataSource:
    """A real data set as a user prepares it: the command (or files) that put it on disk, and the
    authors' published artefact for it, where they published one."""
    name: str               # the data=<name> option
    prepare: str            # how to get it onto disk once
    authors: str | None     # the authors' published copy (bzhangGo/rmsnorm README), if any
    size: str               # what it holds on disk
    first_preparation: str  # the work a first run does on it before training (measured where measured)


SOURCES = {
    "wmt14": DataSource(
        "wmt14", "`make data-wmt14` once where there is network (the hub's WMT14 En-De, BPE trained on first use)",
        None, "4.5M sentence pairs (the hub's wmt/wmt14 de-en saved under data/wmt14, plus its download cache)",
        "a 32k joint sentencepiece BPE (sampled from 2M sentences) and the tokenization of 4.5M pairs, cached "
        "under .cache/: 45 s and 8.2 min, 6.8 GB peak on 4.5M generated pairs (a shared 2-core Xeon at nice 19; "
        "scripts/measure_first_preparation.py), plus the download"),
    "wmt14_nematus": DataSource(
        "wmt14_nematus", f"the authors' preprocessed WMT data from {NEMATUS_DATA_URL} (BPE text and Nematus JSON "
        "dictionaries, wmt17_systems' file names) in data/wmt14_nematus (or data.root)",
        "their 'used/preprocessed dataset' of the RNNSearch runs (bzhangGo/rmsnorm README), read as it is",
        "not known here (the archive could not be read where this was written)",
        "no BPE to train: every pair's words looked up in the two dictionaries once, cached under .cache/: 3.9 min, "
        "4.8 GB peak on 4.5M generated pairs (225M words; a shared 2-core Xeon at nice 19; "
        "scripts/measure_first_preparation.py --nematus)"),
    "cnn": DataSource(
        "cnn", f"unzip {TOP4_URL} into data/cnn (or data.root)",
        "top4.zip (bzhangGo/rmsnorm README), the passages their attentive reader trained on",
        "top4's pickles (about 380,000 training questions)", "none: the pickles are read as they are"),
    "coco": DataSource(
        "coco", "unzip ivendrov/order-embedding's http://www.cs.toronto.edu/~vendrov/order/coco.zip and point data.root "
        "at its folder of {train,val,test}.txt and images/10crop/ (default data/coco)", None, "~1.9 GB of VGG19 features for 113,287 training images, plus dev and test",
        "none with the .npy features; from raw images scripts/extract_coco_features.py (VGG19, not measured)"),
    "cifar10": DataSource(
        "cifar10", "`make data-cifar10` once where there is network", None, "163 MB (cifar-10-batches-py)",
        "a ZCA whitening fit on the 50,000 training images, cached under .cache/convpool: not measured"),
}

# task -> the data its tables were trained on in the paper
PAPER_DATA = {"rnnsearch": "wmt14", "transformer": "wmt14", "reader": "cnn", "retrieval": "coco",
              "convpool": "cifar10"}
# task -> the option that reads the authors' own preprocessed copy of that data, where it is another option
# (the Transformer's preprocessing, zero's, is not public: docs/recipes.md)
AUTHORS_COPY = {"rnnsearch": "wmt14_nematus"}

_DATA_OVERRIDE = re.compile(r"^(\+\+|\+)?data=")


def chose_data(overrides: Sequence[str]) -> bool:
    """Whether the command (a run's or a sweep job's overrides) named its data set."""
    return any(_DATA_OVERRIDE.match(str(o)) for o in overrides)


def refusal(cfg: DictConfig, overrides: Sequence[str]) -> str | None:
    """One line refusing a paper-scale run on generated data the command did not ask for, else None."""
    task = cfg.task.name
    if cfg.scale.name != PAPER_SCALE or cfg.data.name != GENERATED or chose_data(overrides) or task not in PAPER_DATA:
        return None
    source = SOURCES[PAPER_DATA[task]]
    authors = f"; the authors' copy: {source.authors}" if source.authors else ""
    copy = SOURCES.get(AUTHORS_COPY.get(task, ""))
    or_copy = f", data={copy.name} for the authors' preprocessed copy (get it: {copy.prepare})" if copy else ""
    return (f"scale=paper trains on the paper's data: task={task} ran on data={source.name} (get it: "
            f"{source.prepare}{authors}); add data={source.name}{or_copy}, or data=synthetic to train the "
            "paper's sizes on generated data (a pipeline check, not a reproduction)")
