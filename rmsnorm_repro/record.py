"""The run record: what names a run, what may change when it resumes, and what its summary holds.

Every part of the suite that writes, resumes or reads a run asks here: the runner (the resume guard,
checkpoints, summary.json), the Hydra config (its run and sweep folder names, through the resolvers
paths.py registers), the reports and the wandb logger (which way a metric is better, which summaries they can
read). README "Runs, resume and sweeps" states the same contract for users.

    identity(cfg)                  # {"task", "norm", "p", "seed", "data", "scale"}: who a run is
    changes(saved, new)            # Changes: what a resume with config `new` alters in run `saved`
    metric_goal("valid_bleu")      # "max"; metric_goal("error") "min"
    check_summary(summary, path)   # a summary.json of any version this suite can read, or one line why not
    read_summary(path)             # summary.json checked (RecordError naming it); strict=False: {} when unreadable
    read_metrics(path)             # metrics.jsonl's records, lines cut off by a kill skipped
    read_config(path)              # config.yaml as a dict ({} when absent), RecordError when damaged
    read_lines(path)               # outputs/<split>.txt's translations (None when absent)
    decode_utf8(raw, path, advice) # strict UTF-8; an error names the file, line and column
"""
from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable

from .redact import is_secret_key

# summary.json and the checkpoints carry this; summaries without it were written before it existed
# (version 1: the same keys) and are read as such. Raise it when a key changes meaning.
RECORD_VERSION = 2

# Which way a metric is better -----------------------------------------------------------------
# lower is better for these (and names built on them: valid_loss, train_error); higher for the rest
# (bleu, accuracy, R@K, rsum)
LOWER_IS_BETTER = ("loss", "error", "medr", "meanr", "ppl", "perplexity")
OPTIMISTIC = "_optimistic"  # a metric's bound with ties counted for the model (retrieval): it goes the metric's way


def metric_goal(name: str) -> str:
    """"min" or "max": which end of a metric's history is its best (valid/bleu: max, test_error: min)."""
    leaf = name.rsplit("/", 1)[-1].removesuffix(OPTIMISTIC)
    low = any(leaf == w or leaf.endswith("_" + w) or leaf.startswith(w + "_") for w in LOWER_IS_BETTER)
    return "min" if low else "max"


def better(value: float, best: float, goal: str) -> bool:
    return value > best if goal == "max" else value < best


def selection(train: Any, task_metric: tuple[str, str]) -> tuple[str, str] | None:
    """(metric, mode) whose best validation value picks the tested weights (train.select_metric,
    train.select_mode; null: the task's own), or None: `last`, the last weights."""
    metric, mode = train.get("select_metric"), train.get("select_mode")
    if metric == "last":
        return None
    if metric is None:
        metric, default_mode = task_metric
    else:
        default_mode = metric_goal(metric)  # ranks (medr: min, r1: max) as every metric
    return str(metric), mode or default_mode


# Who a run is -----------------------------------------------------------------------------------
def identity(config: dict[str, Any]) -> dict[str, Any]:
    """The run's identity from its resolved config (a plain dict or a DictConfig)."""
    return {"task": config["task"]["name"], "norm": config["norm"]["name"], "p": float(config["norm"]["p"]),
            "seed": int(config["seed"]), "data": config["data"]["name"], "scale": config["scale"]["name"]}


def describe(ident: dict[str, Any]) -> str:
    """"rnnsearch layernorm p=1 seed 1 (synthetic-mini)"."""
    return (f"{ident.get('task')} {ident.get('norm')} p={ident.get('p'):g} seed {ident.get('seed')} "
            f"({ident.get('data')}-{ident.get('scale')})" if isinstance(ident.get("p"), (int, float)) else str(ident))


# What names a run -------------------------------------------------------------------------------
# A single run's folder is <runs_dir>/<task>/<data>-<scale>/<norm>-p<p>-s<seed>[,key=value...]; a
# sweep's job folder is its overrides, key=value joined by ",". Left out of both: what the path
# already says (task, data, scale), the step budget (it may grow on resume), where files go, how a
# run is logged or launched. In a sweep, a key that takes several values names the job folder anyway.
NAME_EXCLUDED = ("task", "data", "scale", "launcher", "logger", "experiment", "train.steps", "train.max_minutes",
                 "allocator", "paths.runs_dir", "paths.data_dir", "paths.cache_dir", "logger.mode",
                 "logger.project", "logger.entity", "logger.group", "logger.tags")
IN_RUN_NAME = ("norm", "norm.p", "seed")  # a single run's name has them already
MAX_NAME = 200  # bytes; file systems allow 255 per path component
# the keys a multirun's command line sweeps, set by the entry point for its job processes (which
# may be other processes: joblib workers, SLURM jobs), "," separated
SWEPT_ENV = "RMSNORM_SWEPT_KEYS"


def _key(line: str) -> str:
    return str(line).split("=", 1)[0].lstrip("+~")


def _named(overrides: Iterable[str] | None, excluded: set[str]) -> list[str]:
    """The override lines that name a folder: not excluded, and never a secret-looking key."""
    return [str(line) for line in overrides or () if _key(line) not in excluded and not is_secret_key(_key(line))]


def _folder_name(kept: list[str]) -> str:
    """key=value lines as one path component: sorted, "," joined, no '/' or blanks, and cut to
    MAX_NAME bytes with a hash of the whole at the end when longer."""
    name = re.sub(r"\s", "_", ",".join(sorted(kept)).replace("/", "_"))
    if len(name.encode()) > MAX_NAME:
        digest = hashlib.sha1(name.encode()).hexdigest()[:10]
        name = name.encode()[: MAX_NAME - 12].decode(errors="ignore") + f"-{digest}"  # 199 bytes: room for the ","
    return name


def run_suffix(overrides: Iterable[str] | None, exclude_keys: Iterable[str] | None) -> str:
    """",optim.lr=0.0001" for a single run's command-line overrides, "" for none: the overrides a sweep
    would name a job after, minus the norm, p and seed the name already has and secret-looking keys."""
    kept = _named(overrides, {*(exclude_keys or ()), *IN_RUN_NAME})
    return "," + _folder_name(kept) if kept else ""


def multirun_swept_keys(sweeper_params: dict[str, Any] | None = None) -> set[str]:
    """Keys that take several values in this multirun: on its command line (SWEPT_ENV) or in the
    preset's hydra.sweeper.params."""
    swept = {k for k in os.environ.get(SWEPT_ENV, "").split(",") if k}
    for key, value in (sweeper_params or {}).items():
        if value is not None and ("," in str(value) or re.match(r"\s*(range|choice|glob)\(", str(value))):
            swept.add(str(key))
    return swept


def job_dirname(overrides: Iterable[str] | None, exclude_keys: Iterable[str] | None,
                sweeper_params: dict[str, Any] | None = None) -> str:
    """A sweep job's folder: its overrides minus exclude_keys, except the keys the sweep varies,
    which always name it (so a sweep over train.steps or task never puts two jobs in one folder)."""
    return _folder_name(_named(overrides, set(exclude_keys or ()) - multirun_swept_keys(sweeper_params))) or "default"


def command_line_sweeps(args: Iterable[str]) -> list[str]:
    """The keys a multirun's command-line overrides sweep (`norm=a,b`, `seed=range(3)`)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    overrides = OverridesParser.create().parse_overrides([a for a in args if not a.startswith("-")])
    return sorted({o.key_or_group for o in overrides if o.is_sweep_override() and not o.key_or_group.startswith("hydra")})


# How the record names a data folder -------------------------------------------------------------
def shown_folder(root: str | os.PathLike, data_dir: str | os.PathLike | None = None) -> str:
    """A data folder as summary.json's data_info and the reports name it: relative to paths.data_dir
    ("<data_dir>/m30k") or to the working directory (the checkout), else its last two parts
    (".../data/multi30k"); never a path of the machine it ran on."""
    folder = Path(os.path.expanduser(str(root))).resolve()
    for base, prefix in ((data_dir, "<data_dir>/"), (Path.cwd(), "")):
        if base is None:
            continue
        try:
            return prefix + folder.relative_to(Path(os.path.expanduser(str(base))).resolve()).as_posix()
        except ValueError:
            continue
    return ".../" + "/".join(folder.parts[1:][-2:])


def printable(path: str | os.PathLike) -> str:
    """A path as text a UTF-8 file can hold: bytes of a folder name that are not UTF-8 as \\xff escapes."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def shown_source(source: str) -> str:
    """data_info's "kind:folder" with the folder as shown_folder names it (summaries written before it
    carried absolute paths); other sources ("synthetic", "hub:...") as they are."""
    kind, sep, where = source.partition(":")
    return f"{kind}:{shown_folder(where)}" if sep and os.path.isabs(where) else source


# What may change on resume ----------------------------------------------------------------------
BUDGET = ("train.steps", "train.max_minutes")  # a run may be extended (runner/optim.py checks the schedule)
# Keys that change no number of what is trained: where files go (data.root: where the data set named by
# data.name lies), how a run is logged, launched and checkpointed, the allocator, and the divergence guard
# (it ends a run already blowing up, and says so in its status: a run that completed trained the same
# steps under any train.max_loss). A resume may change them, and runs that differ only in them are one group.
HARMLESS = ("paths", "logger", "hydra", "allocator", "data.root", "train.log_every", "train.checkpoint_every",
            "train.max_loss")
EVAL_ONLY = ("task.decode",)  # how a trained model is scored: a finished run is re-evaluated
SELECTION = ("train.select_metric", "train.select_mode")  # which evaluated weights are tested
RECORD_ONLY = ("overrides",)  # config.yaml's note of the command line, not part of the config
ABSENT = "<absent>"


# Which keys group runs: runs are seeds of one group (report/aggregate, compare, claims, the pages and the
# campaigns) unless they differ in a key that changes what is trained. Not such a key: the seed (what a group
# averages over), HARMLESS, the device (cpu or cuda: the speed, which the environment records), the time
# budget (a run it cut short says so in its step count) and config.yaml's note of the command line.
NOT_A_GROUP = ("seed", "device", "train.max_minutes", *HARMLESS, *RECORD_ONLY)


def splits_groups(key: str) -> bool:
    """Whether runs differing in this config key (dotted) are in different groups."""
    return not _under(key, NOT_A_GROUP)


def flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    """A nested config as {"dotted.key": leaf value}."""
    if isinstance(node, dict):
        out: dict[str, Any] = {}
        for k, v in node.items():
            out.update(flatten(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: node}


def _under(key: str, roots: Iterable[str]) -> bool:
    return any(key == r or key.startswith(r + ".") for r in roots)


def resolved_device(name: Any) -> str:
    """`device=auto` as this machine resolves it (cuda where there is one, else cpu); others as they are."""
    if name == "auto":
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    return str(name)


@dataclass
class Changes:
    """The differences between a run's config and a resume's, by what they do to the run."""
    budget: list[str] = field(default_factory=list)
    harmless: list[str] = field(default_factory=list)  # incl. keys a newer suite added or dropped
    eval_only: list[str] = field(default_factory=list)
    selection: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)  # they alter what was trained

    def noted(self) -> list[str]:
        """Every accepted change, for the resume's log line."""
        return self.budget + self.harmless + self.eval_only + self.selection


def changes(saved: dict[str, Any], new: dict[str, Any]) -> Changes:
    """Sort every key whose value differs between two resolved configs."""
    a, b = flatten(saved), flatten(new)
    out = Changes()
    for key in sorted(set(a) | set(b)):
        old, now = a.get(key, ABSENT), b.get(key, ABSENT)
        if old == now or _under(key, RECORD_ONLY):
            continue
        line = f"{key}: {old!r} -> {now!r}"
        if _under(key, BUDGET):
            out.budget.append(line)
        elif _under(key, HARMLESS) or (key == "device" and resolved_device(old) == resolved_device(now)):
            out.harmless.append(line)
        elif old == ABSENT or now == ABSENT:
            # a key this version of the suite added (at its default) or dropped since the run started
            out.harmless.append(f"{line} (a key {'new in' if old == ABSENT else 'dropped from'} this version)")
        elif _under(key, EVAL_ONLY):
            out.eval_only.append(line)
        elif _under(key, SELECTION):
            out.selection.append(line)
        else:
            out.refused.append(line)
    return out


# Keys this suite added after its first runs, each at the behaviour runs had before it: the value a run
# whose config.yaml predates the key trained with (a resume accepts its absence the same way)
ADDED_KEYS = {"train.compile": False, "train.precision": "fp32", "train.select_metric": None,
              "train.select_mode": None, "train.early_stop_patience": None, "train.max_loss": None, "optim.eps_inside": False,
              "allocator": "default", "task.caption_eos": False}
# where a summary.json holds a run's identity (identity()), by config key
SUMMARY_IDENTITY = {"task.name": "task", "norm.name": "norm", "norm.p": "p", "seed": "seed", "data.name": "data",
                    "scale.name": "scale"}


def filled_config(config: dict[str, Any], summary: dict[str, Any]) -> dict[str, Any]:
    """A run's config as it trained: config.yaml, with what it lacks taken from summary.json (the run's
    identity) or, for a config.yaml older than a key, ADDED_KEYS, so an older or damaged record reads as
    the run it is. A key neither knows (all of them when config.yaml is gone) stays absent; readers treat
    it as a resume does: it differs from nothing."""
    flat = flatten(config)
    if flat:
        for key, value in ADDED_KEYS.items():
            flat.setdefault(key, value)
    for key, name in SUMMARY_IDENTITY.items():
        if key not in flat and summary.get(name) is not None:
            flat[key] = summary[name]
    return unflatten(flat)


def unflatten(flat: dict[str, Any]) -> dict[str, Any]:
    """flatten's inverse. A key that holds a value and keys under it too (a config.yaml cut after a
    section's header, `train:`, has train: null) is a RecordError."""
    tree: dict[str, Any] = {}
    for key, value in flat.items():
        *parents, leaf = key.split(".")
        node = tree
        for depth, part in enumerate(parents):
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise RecordError(f"{'.'.join(parents[:depth + 1])} holds {_kind(node)} where the config has keys "
                                  f"under it ({key}): the file was cut short or edited; delete that run or rerun it")
        node[leaf] = value
    return tree


def fingerprint(config: dict[str, Any]) -> str:
    """A short hash of what a run trains: its config without the keys that may change on resume."""
    kept = {k: v for k, v in flatten(config).items()
            if not _under(k, BUDGET + HARMLESS + EVAL_ONLY + SELECTION + RECORD_ONLY) and k != "device"}
    return hashlib.sha1(json.dumps(kept, sort_keys=True, default=str).encode()).hexdigest()[:12]


# .lock: a training process holds an exclusive flock on it while it runs -----------------------------
LOCK_FILE = ".lock"


def lock_holder(run_dir: str | os.PathLike) -> int | None:
    """The pid training in run_dir now (holding its .lock), from /proc/locks (Linux): no lock is taken,
    so asking never refuses a run that starts meanwhile. None: nobody, or it cannot be told here."""
    try:
        inode = (Path(run_dir) / LOCK_FILE).stat().st_ino
        for line in Path("/proc/locks").read_text().splitlines():
            fields = line.split()
            if len(fields) > 5 and fields[1] == "FLOCK" and fields[5].rsplit(":", 1)[-1] == str(inode):
                return int(fields[4])
    except (OSError, ValueError):
        pass
    return None


def busy(run_dir: Any, holder: int | None, choose: str = "hydra.run.dir") -> str:
    """The one line refusing a second process on a run folder that a training process holds."""
    return (f"another process{f' (pid {holder})' if holder else ''} is running in {run_dir}: wait for it to end, "
            f"or choose another {choose}")


# summary.json -------------------------------------------------------------------------------------
# summary.json's keys (README "Runs, resume and sweeps" lists them all): the shapes of those the
# report checks (null is always allowed), and the scalars a logger shows
SUMMARY_OBJECTS = ("final", "best", "env")
SUMMARY_NUMBERS = ("steps", "p", "seed", "s_per_1k_steps", "step_ms_median", "step_ms_mean", "step_ms_q1", "step_ms_q3")
SUMMARY_SCALARS = ("status", "steps", "step_ms_median", "step_ms_mean", "s_per_1k_steps", "s_per_1k_steps_ci95",
                   "selected_step", "selection", "diverged_at", "interrupted_by", "stopped_by", "wall_s",
                   "examples_per_s", "tokens_per_s")
ENDED_FORMAT = "%Y-%m-%dT%H:%M:%SZ"  # summary.json's ended_utc: when the run wrote it (UTC)


def ended_utc(summary: dict[str, Any]) -> datetime | None:
    """When the run wrote its summary, or None where it does not say (runs before ended_utc, or a value
    this format does not read)."""
    try:
        return datetime.strptime(summary["ended_utc"], ENDED_FORMAT).replace(tzinfo=timezone.utc)
    except (KeyError, TypeError, ValueError):
        return None


class RecordError(ValueError):
    """A run file this suite cannot read: one line, naming the file and what to do."""


def check_summary(summary: Any, path: Any) -> dict[str, Any]:
    """A summary.json's content as this version reads it, or RecordError naming `path`."""
    if not isinstance(summary, dict):
        raise RecordError(f"{path} holds {_kind(summary)}, not a JSON object; delete that run or rerun it")
    version = summary.get("record_version", 1)
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise RecordError(f"{path}: record_version is {json.dumps(version)}, not a version number; "
                          "delete that run or rerun it")
    if version > RECORD_VERSION:
        raise RecordError(f"{path} was written by a newer rmsnorm_repro (record version {version}; this one "
                          f"reads up to {RECORD_VERSION}): upgrade rmsnorm_repro to read it")
    for key in SUMMARY_OBJECTS:
        if summary.get(key) is not None and not isinstance(summary[key], dict):
            raise RecordError(f'{path}: "{key}" is {_kind(summary[key])}, not an object; delete that run or rerun it')
    for key in SUMMARY_NUMBERS:
        if summary.get(key) is not None and not is_number(summary[key]):
            raise RecordError(f'{path}: "{key}" is {_kind(summary[key])}, not a number; delete that run or rerun it')
    ci = summary.get("s_per_1k_steps_ci95")
    if ci is not None and not (isinstance(ci, list) and len(ci) == 2 and all(is_number(v) for v in ci)):
        raise RecordError(f'{path}: "s_per_1k_steps_ci95" is {json.dumps(ci)}, not [low, high]; '
                          "delete that run or rerun it")
    return summary


# Reading the run's files ------------------------------------------------------------------------
# Every reader of a run (the runner's resume, the reports, the notebook) reads through these.
def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    return {dict: "an object", list: "a list", str: "a string"}.get(type(value), "a number" if is_number(value) else
                                                                   type(value).__name__)


def decode_utf8(raw: bytes, path: Any, advice: str) -> str:
    """raw as strict UTF-8 (a run's file, a data file), or one ValueError naming the file, the line and
    column of the first bad byte, and `advice` (what to do)."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line = raw.count(b"\n", 0, err.start) + 1
        column = err.start - raw.rfind(b"\n", 0, err.start)
        raise ValueError(f"{path}: line {line} is not valid UTF-8 (byte 0x{raw[err.start]:02x} at column {column}); "
                          f"{advice}") from None


RUN_FILE_ADVICE = "repair or delete that line, or delete the run"


def _read_run_text(path: Path) -> str:
    try:
        raw = Path(path).read_bytes()
    except OSError as err:
        raise RecordError(f"{path} cannot be read ({err.strerror or err}); check its permissions, "
                          "or delete that run") from None
    try:
        return decode_utf8(raw, path, RUN_FILE_ADVICE)
    except ValueError as err:
        raise RecordError(str(err)) from None


def read_summary(path: str | os.PathLike, strict: bool = True) -> dict[str, Any]:
    """A run's summary.json, checked by check_summary. strict (the reports): a missing, unreadable or
    damaged file is one RecordError naming it. Not strict (a resume): {} then, and the run goes on."""
    path = Path(path)
    try:
        text = _read_run_text(path)
        try:
            summary = json.loads(text)
        except json.JSONDecodeError as err:
            raise RecordError(f"{path} is not valid JSON ({err}); delete that run or rerun it") from None
        return check_summary(summary, path)
    except RecordError:
        if strict:
            raise
        return {}


def read_metrics(path: str | os.PathLike) -> list[dict[str, Any]]:
    """metrics.jsonl's records in order ([] when there is none). A line that does not parse (cut
    short by a kill) or is not a JSON object is skipped; bytes that are not UTF-8 are a RecordError
    naming the line."""
    path = Path(path)
    if not path.exists():
        return []
    records = []
    for line in _read_run_text(path).split("\n"):
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict):
            records.append(record)
    return records


def read_lines(path: str | os.PathLike) -> list[str] | None:
    """A run's text output (outputs/<split>.txt: one translation a line) as its lines, None when there is
    none; bytes that are not UTF-8 are a RecordError naming the line."""
    path = Path(path)
    return _read_run_text(path).split("\n")[:-1] if path.exists() else None


# config.yaml ends in this line and a hash of the text above it, so a file cut short (at `lr: 0.0` of
# `lr: 0.001` it is still valid YAML) is told from a whole one. A summary.json with CONFIG_SEALED true says
# its run's config.yaml has the line; files of older runs have none and are read as they are.
CONFIG_SEAL = "# the config above is complete: sha1 "
CONFIG_SEALED = "config_sealed"


def _sha1(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()[:16]


def sealed(text: str) -> str:
    """config.yaml's text with its seal line at the end."""
    return f"{text}{CONFIG_SEAL}{_sha1(text)}\n"


def unsealed(text: str, path: Any, seal_required: bool) -> str:
    """The text of a config.yaml above its seal line, or RecordError when the file is cut short or edited:
    the line's hash does not match, or it is missing where seal_required (its summary says it was written)."""
    body, _, last = text.rstrip("\n").rpartition("\n")
    if last.startswith(CONFIG_SEAL):
        if _sha1(body + "\n" if body else "") == last[len(CONFIG_SEAL):].strip():
            return body + "\n"
        raise RecordError(f"{path} was cut short or edited (its text does not match the hash on its last line); "
                          "delete that run or rerun it")
    if seal_required:
        raise RecordError(f"{path} was cut short (its last line, the hash its run wrote there, is missing); "
                          "delete that run or rerun it")
    return text


def read_config(path: str | os.PathLike, seal_required: bool = False) -> dict[str, Any]:
    """A run's config.yaml as a plain dict ({} when there is none), or one RecordError naming it (damaged,
    or cut short: see unsealed; seal_required for a run whose summary.json says CONFIG_SEALED)."""
    import yaml  # lazy: the runner's entry point reads configs through OmegaConf

    path = Path(path)
    if not path.exists():
        if seal_required:
            raise RecordError(f"{path} is missing, though its run wrote one; delete that run or rerun it")
        return {}
    try:
        config = yaml.safe_load(unsealed(_read_run_text(path), path, seal_required))
    except yaml.YAMLError as err:
        where = getattr(err, "problem_mark", None)
        at = f" at line {where.line + 1}" if where is not None else ""
        raise RecordError(f"{path} is not valid YAML{at}; delete that run or rerun it") from None
    if config is None:
        return {}
    if not isinstance(config, dict):
        raise RecordError(f"{path} holds {_kind(config)}, not a mapping; delete that run or rerun it")
    return config
