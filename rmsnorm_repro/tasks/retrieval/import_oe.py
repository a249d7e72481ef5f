"""Score the authors' trained order-embedding model with this suite's test evaluation:

    python -m rmsnorm_repro.tasks.retrieval.import_oe --model data/oe/order.npz --data-root data/coco

reads `order.npz` and `order.pkl` (bzhangGo/rmsnorm README.md:175-178, the model behind the paper's
RMSNorm row of Table 7), the COCO test split as `data=coco` reads it (coco.zip's `test.txt` and
`images/10crop/test.npy` first: the features their projection was trained on; else `test_caps.txt` and
`test_ims.npy`: data.py coco_files), and prints R@1 / R@5 / R@10 / mean rank both ways, 5 folds of 1000
images averaged, beside the paper's row. It writes them, with the files it read (names inside the data
folder, the features' sha256) and the tie-optimistic bounds (metrics.py), to
`<data root>/authors_order_scores.json` (--out elsewhere), where Table 7's page shows them beside runs
that read that folder.

The files are ivendrov/order-embedding's (OE) saved model:
- `order.pkl`: OE `train.py:32-75`'s `curr_model` pickled by Python 2's cPickle (protocol 0): {'options':
  the trainer's keyword options plus n_words, 'worddict': an OrderedDict word -> id, `vocab.py:7-27`:
  0 is <eos>, 1 <unk>, the words from 2}. Read with a restricted unpickler: dicts, lists, strings,
  numbers and that one OrderedDict, nothing else.
- `order.npz`: `numpy.savez(**unzip(tparams))` (`train.py:178`), one float32 array per parameter, named
  by `model.py:13-29` (prefix `encoder`, `ff_image`) and the GRU layer's `param_init_*`. Read with
  allow_pickle=False.

Their parameters -> OrderEmbedding (their matrices multiply from the right, x W; ours from the left, W x):
  Wemb (n_words, dim_word)            embed.weight: our id = theirs + 1 for words, <unk> 1, <eos> 2, row 0 padding
  encoder_W (dim_word, 2 dim), _Wx    input_proj.weight = [W, Wx]^T: rows reset, update (their r, u), candidate
  encoder_b (2 dim), _bx (dim)        input_proj.bias = [b, bx] (added before the input norms, as theirs)
  encoder_U (dim, 2 dim), _Ux         state_proj.weight = [U, Ux]^T (no bias)
  encoder_s1..s4                      the gains of N1 (input gates), N2 (input candidate), N3 (state gates),
                                      N4 (state candidate): rmsnorm layers.py:315-330, NormGRUCell's N1..N4
  encoder_b1..b4 (lngru only)         the LayerNorm offsets at the same sites (layers.py:210-223)
  ff_image_W (dim_image, dim), _b     image_proj.weight = W^T, bias = b (OE layers.py:37-41, activ='linear')

Which GRU the norms are: the pickle's options['encoder'] names OE's layer: gru (norm=none), rlngru
(norm=rmsnorm, their `rln`) or lngru (norm=layernorm, their `ln`). The README (:180-181) says their
saved RMSNorm model is read under the name `lngru` with the rlngru functions, so an `lngru` model
with gains and no offsets is read as rlngru; one with offsets too is refused unless --encoder says
which it is (--encoder rlngru: the offsets are left unread, as OE's load_params leaves them). The
norms' settings are the retrieval recipe's (configs/norm + configs/task_norm/retrieval).
"""
from __future__ import annotations

import argparse
import csv
import hashlib
import json
import math
import pickle
import sys
import zipfile
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import OmegaConf

from ...atomic import atomic_write_text, cannot_write
from ...errors import ConfigError
from ...norms import build_normalization
from ...paths import configs_dir, paper_dir
from ...record import OPTIMISTIC
from .data import EOS, PAD, UNK, Split, caption_encoder, coco_files, read_coco_split, shown_files
from .model import OrderEmbedding
from .task import score_split

# OE's layer -> (our norm, the letters of its per-site parameters: gain s, offset b -> our weight, bias)
ENCODERS = {"gru": ("none", {}), "rlngru": ("rmsnorm", {"s": "weight"}),
            "lngru": ("layernorm", {"s": "weight", "b": "bias"})}
NORM_SITES = ("norm_input_gates", "norm_input_cand", "norm_state_gates", "norm_state_cand")  # their 1, 2, 3, 4
OPTIONS = ("dim", "dim_word", "dim_image", "n_words", "encoder", "method", "abs")
# where the result goes by default, and where Table 7's page looks for it: the COCO folder runs read (data.root)
RESULT_FILE = "authors_order_scores.json"
METRICS = tuple(f"{side}_{k}" for side in ("caption", "image") for k in ("r1", "r5", "r10", "medr", "meanr"))


class _OEUnpickler(pickle.Unpickler):
    """Python 2's protocol 0-2 opcodes for dicts, lists, tuples, str, numbers; of classes, OrderedDict only."""

    def find_class(self, module: str, name: str):
        if (module, name) == ("collections", "OrderedDict"):
            return OrderedDict
        raise pickle.UnpicklingError(f"it names {module}.{name}; OE's model pickle holds dicts, lists, strings and numbers")


MAX_DEPTH = 32  # OE's model pickle nests 3 deep (a dict of a dict and an OrderedDict of strings and numbers)


def _text(value: Any, depth: int = 0, done: dict[int, Any] | None = None) -> Any:
    """Python 2 str (read as bytes) -> str, recursively; words that are not UTF-8 keep their bytes as surrogates.
    Each container is converted once (a pickle can hold one object many times: 40 levels of [x, x] would
    otherwise be 2^40 nodes) and at most MAX_DEPTH deep (ValueError)."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "surrogateescape")
    if not isinstance(value, (dict, list, tuple)):
        return value
    done = {} if done is None else done
    if id(value) in done:
        return done[id(value)]
    if depth >= MAX_DEPTH:
        raise ValueError(f"nested deeper than {MAX_DEPTH} levels")
    if isinstance(value, dict):
        converted = type(value)((_text(k, depth + 1, done), _text(v, depth + 1, done)) for k, v in value.items())
    else:
        converted = type(value)(_text(v, depth + 1, done) for v in value)
    done[id(value)] = converted
    return converted


def read_oe_pickle(path: Path) -> tuple[dict[str, Any], dict[str, int]]:
    """(options, worddict) of OE's `<model>.pkl`; ConfigError (one line) when it is not one."""
    try:
        with open(path, "rb") as f:
            model = _text(_OEUnpickler(f, encoding="bytes").load())
    except FileNotFoundError:
        raise ConfigError(f"{path} not found: give --model the path of order.npz, with order.pkl beside it") from None
    except (OSError, pickle.UnpicklingError, EOFError, TypeError, AttributeError, IndexError, RecursionError) as e:
        raise ConfigError(f"{path} is not OE's model pickle ({type(e).__name__}: {e})") from None
    except ValueError as e:
        raise ConfigError(f"{path} is not OE's model pickle: {e}") from None
    if not (isinstance(model, dict) and isinstance(model.get("options"), dict) and isinstance(model.get("worddict"), dict)):
        raise ConfigError(f"{path} is not OE's model pickle: want a dict with 'options' and 'worddict' (OE train.py:32-75)")
    options, worddict = model["options"], model["worddict"]
    missing = [key for key in OPTIONS if key not in options]
    if missing:
        raise ConfigError(f"{path}: options lack {', '.join(missing)} (OE driver.py and train.py:72 set them)")
    for key in ("dim", "dim_word", "dim_image", "n_words"):
        if not (isinstance(options[key], int) and not isinstance(options[key], bool) and options[key] > 0):
            raise ConfigError(f"{path}: options['{key}'] is {options[key]!r}; want a positive integer")
    return options, worddict


def oe_vocabulary(worddict: dict[str, int], n_words: int, where: Path) -> list[str]:
    """Our id -> word for their ids 0 .. n_words - 1: [PAD, UNK, EOS, their id 2, 3, ...]. Words with an
    id >= n_words are unknown, as OE tools.py:77 reads them."""
    integers = all(isinstance(i, int) and not isinstance(i, bool) for i in worddict.values())
    ids = sorted(worddict.values()) if integers else None
    if ids != list(range(2, len(worddict) + 2)) or not 2 <= n_words <= len(worddict) + 2:
        raise ConfigError(f"{where}: worddict ids are not 2 .. {len(worddict) + 1} with n_words <= {len(worddict) + 2} "
                          f"(got n_words={n_words}; OE vocab.py:25, train.py:72)")
    by_id = sorted((i, w) for w, i in worddict.items() if i < n_words)
    return [PAD, UNK, EOS] + [w for _, w in by_id]


def encoder_kind(options: dict[str, Any], keys: set[str], chosen: str | None, where: Path) -> str:
    """OE's GRU layer the model was run with (module docstring)."""
    if chosen is not None:
        return chosen
    name, offsets = options["encoder"], any(f"encoder_b{i}" in keys for i in range(1, 5))
    if name not in ENCODERS:
        raise ConfigError(f"{where}: options['encoder'] is {name!r}; OE layers this import reads: {', '.join(ENCODERS)}")
    if name == "lngru" and offsets:
        raise ConfigError(f"{where}: an 'lngru' model with offsets encoder_b1..b4: LayerNorm (lngru) or the authors' "
                          "RMSNorm saved under that name (rmsnorm README.md:180-181)? say which with --encoder lngru|rlngru")
    return "rlngru" if name == "lngru" else name


def expected_shapes(options: dict[str, Any], kind: str) -> dict[str, tuple[int, ...]]:
    """Every array OE's init_params makes for this model (model.py:13-29, layers.py param_init_*)."""
    dim, word, image = int(options["dim"]), int(options["dim_word"]), int(options["dim_image"])
    shapes = {"Wemb": (int(options["n_words"]), word), "encoder_W": (word, 2 * dim), "encoder_b": (2 * dim,),
              "encoder_U": (dim, 2 * dim), "encoder_Wx": (word, dim), "encoder_Ux": (dim, dim), "encoder_bx": (dim,),
              "ff_image_W": (image, dim), "ff_image_b": (dim,)}
    for letter in ENCODERS[kind][1]:
        for i, size in enumerate((2 * dim, dim, 2 * dim, dim), 1):
            shapes[f"encoder_{letter}{i}"] = (size,)
    return shapes


def read_oe_npz(path: Path) -> dict[str, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as npz:
            return {key: npz[key] for key in npz.files}
    except FileNotFoundError:
        raise ConfigError(f"{path} not found: give --model the path of order.npz, with order.pkl beside it") from None
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
        raise ConfigError(f"{path} is not a readable .npz of arrays ({type(e).__name__}: {' '.join(str(e).split())})") from None


def check_arrays(arrays: dict[str, np.ndarray], shapes: dict[str, tuple[int, ...]], kind: str, where: Path,
                 ignored: set[str] = frozenset()) -> None:
    for key, shape in shapes.items():
        if key not in arrays:
            raise ConfigError(f"{where}: no {key} (want shape {shape} for OE's {kind} model)")
        if arrays[key].shape != shape or arrays[key].dtype.kind != "f":
            raise ConfigError(f"{where}: {key} has shape {arrays[key].shape} ({arrays[key].dtype}); want {shape}, floats")
        bad = int((~np.isfinite(arrays[key])).sum())
        if bad:  # a NaN would rank as a win in every comparison it enters
            raise ConfigError(f"{where}: {key} holds {bad} NaN or inf value{'s' if bad > 1 else ''}: "
                              "not a trained model's")
    extra = sorted(set(arrays) - set(shapes) - ignored)
    if extra:
        raise ConfigError(f"{where}: {', '.join(extra)} {'is' if len(extra) == 1 else 'are'} not a parameter of "
                          f"OE's {kind} model")


def recipe_norm(norm: str) -> dict[str, Any]:
    """configs/norm/<norm>.yaml with configs/task_norm/retrieval/<norm>.yaml over it: what `task=retrieval
    norm=<norm>` trains with (for rmsnorm: their rln, eps 1e-5 inside the root, no offset)."""
    cfg = OmegaConf.load(configs_dir() / "norm" / f"{norm}.yaml")
    over = configs_dir() / "task_norm" / "retrieval" / f"{norm}.yaml"
    if over.is_file():
        cfg = OmegaConf.merge(cfg, OmegaConf.load(over).get("norm") or {})
    return OmegaConf.to_container(cfg)


def oe_state_dict(arrays: dict[str, np.ndarray], kind: str) -> dict[str, torch.Tensor]:
    """Their arrays as OrderEmbedding's state dict (module docstring)."""
    cell = "encoder.cells.0."
    wemb = arrays["Wemb"]
    state = {
        "embed.weight": np.concatenate([np.zeros_like(wemb[:1]), wemb[1:2], wemb[:1], wemb[2:]]),
        cell + "input_proj.weight": np.concatenate([arrays["encoder_W"], arrays["encoder_Wx"]], 1).T,
        cell + "input_proj.bias": np.concatenate([arrays["encoder_b"], arrays["encoder_bx"]]),
        cell + "state_proj.weight": np.concatenate([arrays["encoder_U"], arrays["encoder_Ux"]], 1).T,
        "image_proj.weight": arrays["ff_image_W"].T,
        "image_proj.bias": arrays["ff_image_b"],
    }
    for i, site in enumerate(NORM_SITES, 1):
        for letter, ours in ENCODERS[kind][1].items():
            state[f"{cell}{site}.{ours}"] = arrays[f"encoder_{letter}{i}"]
    return {key: torch.from_numpy(np.ascontiguousarray(value, dtype=np.float32)) for key, value in state.items()}


def oe_prefix(model: Path) -> Path:
    """`order` for `order`, `order.npz` or `order.pkl`: the files' common stem, as OE's load_model takes it."""
    return model.with_suffix("") if model.suffix in (".npz", ".pkl") else model


def load_oe_model(model: Path, encoder: str | None = None) -> tuple[OrderEmbedding, list[str], str]:
    """(our model holding their weights, our vocabulary, their GRU layer) from `<model>.npz` and `<model>.pkl`."""
    model = oe_prefix(model)
    pkl_path, npz_path = model.with_name(model.name + ".pkl"), model.with_name(model.name + ".npz")
    options, worddict = read_oe_pickle(pkl_path)
    if options["method"] != "order" or options["abs"] is not True:
        raise ConfigError(f"{pkl_path}: method={options['method']!r}, abs={options['abs']!r}: not an order-embedding "
                          "model (OE driver.py:3-7: method 'order', abs True); the suite scores order violations only")
    vocab = oe_vocabulary(worddict, int(options["n_words"]), pkl_path)
    arrays = read_oe_npz(npz_path)
    kind = encoder_kind(options, set(arrays), encoder, pkl_path)
    # an 'lngru' pickle read with the rlngru functions (README.md:180-181): OE's load_params (utils.py:49-59)
    # loads only the layer's own parameters, so the offsets are left out as their code leaves them
    offsets = {f"encoder_b{i}" for i in range(1, 5)} if (kind, options["encoder"]) == ("rlngru", "lngru") else set()
    check_arrays(arrays, expected_shapes(options, kind), kind, npz_path, offsets)
    norm = ENCODERS[kind][0]
    norms = build_normalization(norm, recipe_norm(norm))
    ours = OrderEmbedding(len(vocab), int(options["dim_image"]), norms, int(options["dim_word"]), int(options["dim"]))
    ours.load_state_dict(oe_state_dict(arrays, kind))
    return ours.eval(), vocab, kind


def paper_row(norm: str) -> dict[str, str]:
    with open(paper_dir() / "table7.csv", newline="") as f:
        return next(row for row in csv.DictReader(f) if row["norm"] == norm)


def table(metrics: dict[str, float], paper: dict[str, str]) -> str:
    columns = ("r1", "r5", "r10", "meanr")
    lines = ["| | R@1 | R@5 | R@10 | mean rank |", "|---|---|---|---|---|"]
    for side in ("caption", "image"):
        lines.append(f"| {side} retrieval, paper ({paper['model']}) | "
                     + " | ".join(paper[f"{side}_{c}"] or "-" for c in columns) + " |")
        lines.append(f"| {side} retrieval, their model scored here | "
                     + " | ".join(f"{metrics[f'{side}_{c}']:.1f}" for c in columns) + " |")
    return "\n".join(lines)


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def score(model_path: Path, data_root: Path, encoder: str | None = None, caption_eos: bool = True,
          batch_size: int = 128, device: str = "cpu") -> dict[str, Any]:
    """Their model on the COCO test split: the result written by --out (file names, never folders)."""
    model_path = oe_prefix(model_path)
    model, vocab, kind = load_oe_model(model_path, encoder)
    try:
        words, images = read_coco_split(data_root, "test", lowercase=False)  # OE tools.py:62: s.split(), as written
    except (FileNotFoundError, ValueError) as e:
        raise ConfigError(str(e).replace("data=coco: ", "--data-root: ").replace("set data.root", "set --data-root")) from None
    if images.shape[1] != model.image_proj.in_features:
        raise ConfigError(f"--data-root: {coco_files(data_root, 'test')[1].name} has {images.shape[1]} features per "
                          f"image; the model maps {model.image_proj.in_features} (OE options['dim_image'])")
    encode = caption_encoder(vocab, caption_eos)
    split = Split([encode(w) for w in words], torch.from_numpy(np.asarray(images, dtype=np.float32)))
    try:
        metrics = score_split(model.to(device), split, batch_size, torch.device(device))
    except ValueError as e:  # embeddings that are not finite: nothing to rank
        raise ConfigError(f"their model on --data-root's test split: {e}") from None
    norm = ENCODERS[kind][0]
    captions_path, features_path = coco_files(data_root, "test")
    captions_name, features_name = shown_files(data_root, (captions_path, features_path))
    return {"model": model_path.name, "npz_sha256": sha256(model_path.with_name(model_path.name + ".npz")),
            "pkl_sha256": sha256(model_path.with_name(model_path.name + ".pkl")), "encoder": kind, "norm": norm,
            "caption_eos": caption_eos, "test_images": int(images.shape[0]), "captions": captions_name,
            "features": features_name, "features_sha256": sha256(features_path), "metrics": metrics,
            "paper": paper_row(norm)}


def read_result(path: Path) -> dict[str, Any]:
    """A result `score` wrote (Table 7's page reads it); ValueError (one line) when it is not one."""
    try:
        result = json.loads(Path(path).read_text(encoding="utf-8"))
        metrics = {key: float(result["metrics"][key]) for key in METRICS}
        if not all(math.isfinite(value) for value in metrics.values()):
            raise ValueError("a metric is NaN or inf")
        return {"model": str(result["model"]), "norm": str(result["norm"]), "encoder": str(result["encoder"]),
                "caption_eos": bool(result["caption_eos"]), "test_images": int(result["test_images"]),
                "metrics": metrics,
                "features": str(result.get("features", "not recorded (written before import_oe recorded it)"))}
    except (OSError, ValueError, TypeError, KeyError) as e:
        raise ValueError(f"{Path(path).name} is not import_oe's result ({type(e).__name__}: {e}); write it again with "
                         "python -m rmsnorm_repro.tasks.retrieval.import_oe") from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rmsnorm_repro.tasks.retrieval.import_oe",
                                     description="Score the authors' trained order-embedding model (order.npz, "
                                                 "order.pkl) with this suite's COCO test evaluation.")
    parser.add_argument("--model", type=Path, required=True,
                        help="order.npz's path (order.pkl beside it), with or without .npz")
    parser.add_argument("--data-root", type=Path, required=True,
                        help="the data=coco folder (ivendrov's coco.zip, or test_caps.txt and test_ims.npy)")
    parser.add_argument("--encoder", choices=tuple(ENCODERS), default=None,
                        help="OE's GRU layer the model ran with (default: from the pickle; module docstring)")
    parser.add_argument("--caption-eos", action=argparse.BooleanOptionalAction, default=True,
                        help="end each caption with <eos> as OE's encoder does (default); --no-caption-eos: as "
                             "task.caption_eos=false, to measure what that difference costs")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", type=Path, default=None,
                        help=f"where the result goes as JSON (default: DATA_ROOT/{RESULT_FILE}, where Table 7's page "
                             "finds it beside runs that read that folder)")
    args = parser.parse_args(argv)
    try:
        result = score(args.model, args.data_root, args.encoder, args.caption_eos, args.batch_size, args.device)
    except ConfigError as e:
        print(f"import_oe: {e}", file=sys.stderr)
        return 2
    out = args.out if args.out is not None else args.data_root / RESULT_FILE
    try:
        atomic_write_text(out, json.dumps(result, indent=2) + "\n")
    except OSError as e:
        print(f"import_oe: {cannot_write(e, 'choose a folder you can write to with --out')}", file=sys.stderr)
        return 2
    folds = "5 folds of 1000 images" if result["test_images"] == 5000 else f"one fold of {result['test_images']} images"
    eos = str(result["caption_eos"]).lower()
    print(f"{result['model']} (OE {result['encoder']} -> norm={result['norm']}, caption_eos={eos}), COCO test "
          f"({result['captions']}, {result['features']}), {folds}:\n"
          + table(result["metrics"], result["paper"]))
    metrics = result["metrics"]
    if metrics["rsum"] != metrics["rsum" + OPTIMISTIC]:  # OE's argsort ranks ties either way: its number lies between
        print(f"Ties among the errors: the numbers above count them against the model; counted for it, the R@K sum is "
              f"{metrics['rsum' + OPTIMISTIC]:.1f} instead of {metrics['rsum']:.1f} (both in {out.name})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
