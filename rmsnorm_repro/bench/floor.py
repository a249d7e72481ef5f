"""Floor table: each part of the small recipes' training step beside its matrix products alone.

`python -m rmsnorm_repro.bench floor` (make speed-floor). For the bidirectional GRU encoder layer, the
conditional GRU decoder with attention (all target steps), one Transformer encoder and one decoder
block, and a whole training step of each small recipe (embeddings, output projection, label-smoothed
loss, backward, clipping and Adam included), it times forward + backward of the real module, as the
recipe builds it (scale=small sizes, each norm), beside the same shapes' matrix products alone.

The matrix products are not written down by hand: a dispatch mode records every GEMM the module's
forward and backward run (aten mm, addmm, bmm, baddbmm, and the fused attention kernel, counted as the
four batched products its backward needs and the two of its forward), with their operands' layouts,
and the floor replays exactly those products on preallocated tensors. Its time is what the part would
take if everything but its matrix products cost nothing, at torch's GEMM speed on this CPU: no
implementation of the part can beat it. Beside the suite's modules: torch's nn.GRU and
nn.TransformerEncoderLayer / DecoderLayer (post-norm, LayerNorm) at the same sizes, with their own floors.

Each round times every row's module and then its floor, rows in turn, at 1 and then 2 threads; the
table gives medians over rounds with interquartile ranges, the ratio module / floor as the median of
the per-round ratios (adjacent timings: load that changes between rounds cancels), and at 1 thread the
non-GEMM operators that take the most of the module's time (torch.profiler, self time): what stands
between the part and its floor.
"""
from __future__ import annotations

import re
import statistics
import time
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Callable

import torch
from torch import Tensor, nn
from torch.utils._python_dispatch import TorchDispatchMode

aten = torch.ops.aten
SDPA_FWD = ("_scaled_dot_product_flash_attention_for_cpu",)
SDPA_BWD = ("_scaled_dot_product_flash_attention_for_cpu_backward",)
GEMM_PROFILE_NAMES = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm",
                      *(f"aten::{n}" for n in SDPA_FWD + SDPA_BWD)}
NORMS = ("none", "layernorm", "rmsnorm", "prmsnorm")
# --tiny: both recipes shrunk to a few units (a check of the bench itself in seconds, as the tests run it)
TINY = {"rnnsearch": ["task.model.emb=8", "task.model.hidden=16", "train.batch_size=4"],
        "transformer": ["task.model.d_model=16", "task.model.ffn_dim=32", "task.model.heads=2", "task.model.encoder_layers=1",
                        "task.model.decoder_layers=1", "train.batch_tokens=64"]}
# Goals (issue: module / floor at 1 thread): the rmsnorm GRU layer, the Transformer blocks, a whole step.
GOALS = {"GRU encoder layer": 1.15, "Transformer encoder block": 1.1, "Transformer decoder block": 1.1,
         "RNNSearch training step": 1.3, "Transformer training step": 1.3}


@dataclass(frozen=True)
class Gemm:
    """One matrix product: `batch` products of (m x k) @ (k x n); ta / tb: operand stored transposed."""
    batch: int
    m: int
    k: int
    n: int
    ta: bool = False
    tb: bool = False

    @property
    def flops(self) -> int:
        return 2 * self.batch * self.m * self.k * self.n


def _transposed(t: Tensor) -> bool:
    """Whether a matrix operand (its last two dims) is laid out column-major, as `x.t()` of a contiguous x."""
    return t.dim() >= 2 and t.stride(-1) != 1 and t.stride(-2) == 1


class GemmRecorder(TorchDispatchMode):
    """Records the matrix products run under it, forward and backward (CPU autograd runs in this thread)."""

    def __init__(self):
        super().__init__()
        self.gemms: list[Gemm] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        packet = func.overloadpacket
        if packet in (aten.mm, aten.addmm):
            a, b = args[-2], args[-1]
            self.gemms.append(Gemm(1, a.shape[0], a.shape[1], b.shape[1], _transposed(a), _transposed(b)))
        elif packet in (aten.bmm, aten.baddbmm):
            a, b = args[-2], args[-1]
            self.gemms.append(Gemm(a.shape[0], a.shape[1], a.shape[2], b.shape[2], _transposed(a), _transposed(b)))
        elif packet.__name__ in SDPA_FWD:  # q [B, H, L, E], k [B, H, S, E], v [B, H, S, Ev]
            q, k, v = args[:3]
            bh, L, E, S, Ev = q.shape[0] * q.shape[1], q.shape[2], q.shape[3], k.shape[2], v.shape[3]
            self.gemms += [Gemm(bh, L, E, S, tb=True), Gemm(bh, L, S, Ev)]  # scores = q k^T, out = p v
        elif packet.__name__ in SDPA_BWD:  # (grad_out, q, k, v, ...): dV = p^T dO, dP = dO v^T, dQ = dS k, dK = dS^T q
            _, q, k, v = args[:4]
            bh, L, E, S, Ev = q.shape[0] * q.shape[1], q.shape[2], q.shape[3], k.shape[2], v.shape[3]
            self.gemms += [Gemm(bh, S, L, Ev, ta=True), Gemm(bh, L, Ev, S, tb=True), Gemm(bh, L, S, E),
                           Gemm(bh, S, L, E, ta=True)]
        return func(*args, **kwargs)


def record(fn: Callable[[], None]) -> list[Gemm]:
    """The matrix products of one call of fn (after a warm-up call, so lazy setup is not counted)."""
    fn()
    with GemmRecorder() as rec:
        fn()
    return rec.gemms


def _operand(rows: int, cols: int, batch: int, transposed: bool) -> Tensor:
    shape = (cols, rows) if transposed else (rows, cols)
    t = torch.randn(batch, *shape) if batch > 1 else torch.randn(*shape)
    return t.transpose(-1, -2) if transposed else t


def replay(gemms: list[Gemm]) -> Callable[[], None]:
    """A call that runs the same products, with the same operand layouts, into preallocated outputs.

    Products of one shape and layout share their operands (a GRU's T state products, as its weight is
    shared in the module): memory stays that of the distinct shapes, and warm operands only lower the floor."""
    operands: dict[Gemm, tuple] = {}
    for g in dict.fromkeys(gemms):
        a, b = _operand(g.m, g.k, g.batch, g.ta), _operand(g.k, g.n, g.batch, g.tb)
        out = torch.empty(g.batch, g.m, g.n) if g.batch > 1 else torch.empty(g.m, g.n)
        operands[g] = (torch.bmm if g.batch > 1 else torch.mm, a, b, out)
    calls = [operands[g] for g in gemms]

    def run() -> None:
        for f, a, b, out in calls:
            f(a, b, out=out)
    return run


@dataclass
class Row:
    """One thing timed: a part, who implements it (the suite's module under a norm, or torch's), its call."""
    part: str
    impl: str
    norm: str
    call: Callable[[], None]
    gemms: list[Gemm] | None = None
    floor: Callable[[], None] | None = None

    def prepare(self) -> None:
        self.gemms = record(self.call)
        self.floor = replay(self.gemms)


# The parts ----------------------------------------------------------------------------------------
def fwd_bwd(module: nn.Module, forward: Callable[[], Tensor | tuple[Tensor, ...]]) -> Callable[[], None]:
    """forward() -> output(s); one call: gradients cleared, forward, backward of fixed random upstream gradients."""
    upstream: list[Tensor] = []

    def call() -> None:
        module.zero_grad(set_to_none=True)
        out = forward()
        out = out if isinstance(out, tuple) else (out,)
        if not upstream:
            upstream.extend(torch.randn_like(o) for o in out)
        torch.autograd.backward(out, upstream)
    return call


def _leaf(*shape: int) -> Tensor:
    return torch.randn(*shape, requires_grad=True)


def rnnsearch_parts(model, norm: str, batch: int, src_len: int, tgt_len: int) -> list[Row]:
    """The bidirectional encoder GRU and the conditional GRU decoder (all target steps, attention and its
    keys included, recurrent dropout as in training) of an RNNSearch."""
    E, H = model.src_emb.embedding_dim, model.hidden_size
    x, ctx, emb = _leaf(batch, src_len, E), _leaf(batch, src_len, 2 * H), _leaf(batch, tgt_len, E)
    src_mask = torch.ones(batch, src_len, dtype=torch.bool)
    h0 = torch.randn(batch, H)

    def decoder() -> tuple[Tensor, Tensor]:
        state = {"ctx": ctx, "keys": model.attention.keys(ctx), "src_mask": src_mask, "h": h0}
        states, contexts, _ = model.decoder_states(state, emb)
        return states, contexts  # both feed the output layer
    return [Row("GRU encoder layer", "suite NormGRU", norm, fwd_bwd(model.encoder, lambda: model.encoder(x, src_mask)[0])),
            Row("conditional GRU decoder", "suite cGRU + attention", norm, fwd_bwd(model, decoder))]


def transformer_parts(model, norm: str, batch: int, src_len: int, tgt_len: int) -> list[Row]:
    """One encoder block and one decoder block (self-attention causal, cross-attention's keys and values
    from the encoder output included) of a Transformer."""
    d = model.d
    x, mem, y = _leaf(batch, src_len, d), _leaf(batch, src_len, d), _leaf(batch, tgt_len, d)
    pad = torch.ones(batch, 1, 1, src_len, dtype=torch.bool)
    causal = torch.ones(tgt_len, tgt_len, dtype=torch.bool).tril()[None, None]
    enc, dec = model.encoder[0], model.decoder[0]
    return [Row("Transformer encoder block", "suite Block", norm, fwd_bwd(enc, lambda: enc(x, pad)[0])),
            Row("Transformer decoder block", "suite Block", norm,
                fwd_bwd(dec, lambda: dec(y, causal, cross=dec.cross_attn.keys_values(mem), cross_mask=pad)[0]))]


def torch_parts(rnn_cfg: dict, tf_cfg: dict, batch: dict, lengths: dict) -> list[Row]:
    """torch's own modules where they compute the same part: nn.GRU (bidirectional), and post-norm
    nn.TransformerEncoderLayer / DecoderLayer with LayerNorm, ReLU and the recipe's dropout."""
    E, H = rnn_cfg["emb"], rnn_cfg["hidden"]
    gru = nn.GRU(E, H, batch_first=True, bidirectional=True)
    x = _leaf(batch["rnnsearch"], lengths["rnnsearch"], E)
    d, heads, ffn, drop = tf_cfg["d_model"], tf_cfg["heads"], tf_cfg["ffn_dim"], tf_cfg["dropout"]
    enc = nn.TransformerEncoderLayer(d, heads, ffn, drop, batch_first=True)
    dec = nn.TransformerDecoderLayer(d, heads, ffn, drop, batch_first=True)
    b, t = batch["transformer"], lengths["transformer"]
    xs, mem, y = _leaf(b, t, d), _leaf(b, t, d), _leaf(b, t, d)
    causal = nn.Transformer.generate_square_subsequent_mask(t)
    return [Row("GRU encoder layer", "torch nn.GRU", "none", fwd_bwd(gru, lambda: gru(x)[0])),
            Row("Transformer encoder block", "torch nn.TransformerEncoderLayer", "layernorm", fwd_bwd(enc, lambda: enc(xs))),
            Row("Transformer decoder block", "torch nn.TransformerDecoderLayer", "layernorm",
                fwd_bwd(dec, lambda: dec(y, mem, tgt_mask=causal, tgt_is_causal=True)))]


def step_row(task: str, norm: str, overrides: list[str]) -> tuple[Row, object]:
    """A whole training step of the small recipe on one fixed batch (runner.step.train_step); and its
    StepRun, whose model the parts' rows time."""
    from ..runner.step import train_step
    from .steps import StepRun

    run = StepRun(task, norm, 1.0, overrides=overrides, scale="small")
    batch = run.task.train_batch(0)
    clip_mode = run.cfg.optim.get("clip_mode") or "global"

    def call() -> None:
        train_step(run.task, run.model, run.optimizer, batch, run.params, run.cfg.optim.clip, clip_mode)
    name = {"rnnsearch": "RNNSearch", "transformer": "Transformer"}[task]
    return Row(f"{name} training step", f"suite {name}, small recipe", norm, call), run


# Timing -------------------------------------------------------------------------------------------
def _ms(call: Callable[[], None], clock: Callable[[], float]) -> float:
    call()  # settle: the allocator after the previous row's sizes
    start = clock()
    call()
    return (clock() - start) * 1e3


def clock_for(threads: int) -> tuple[str, Callable[[], float]]:
    """At 1 thread this thread's CPU time, which other processes on a shared machine do not inflate; with
    more threads, wall time (the other threads' work is not this thread's CPU time)."""
    return ("thread CPU", time.thread_time) if threads == 1 else ("wall", time.perf_counter)


def _quartiles(values: list[float]) -> tuple[float, float, float]:
    if len(values) == 1:
        return values[0], values[0], values[0]
    q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q2, q3


def _operator(name: str) -> str:
    """A profiler key, short: 'aten::mul' -> 'mul', a backward node -> 'MulBackward0 (bwd)', a custom function by its name."""
    name = re.sub(r"torch::autograd::CppNode<\(anonymous namespace\)::(\w+)>", r"\1", name)
    if name.startswith("autograd::engine::evaluate_function: "):
        name = name.removeprefix("autograd::engine::evaluate_function: ") + " (bwd)"
    return name.removeprefix("aten::")


def non_gemm_share(call: Callable[[], None], top: int = 3) -> tuple[float, list[tuple[str, float]]]:
    """(share of self time in GEMMs, [(operator, share)] of the `top` non-GEMM operators) over one call."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        call()
    events = [e for e in prof.key_averages() if e.self_cpu_time_total > 0]
    total = sum(e.self_cpu_time_total for e in events) or 1.0
    gemm = sum(e.self_cpu_time_total for e in events if e.key in GEMM_PROFILE_NAMES)
    rest = sorted((e for e in events if e.key not in GEMM_PROFILE_NAMES), key=lambda e: -e.self_cpu_time_total)
    return gemm / total, [(_operator(e.key), e.self_cpu_time_total / total) for e in rest[:top]]


def measure(rows: list[Row], threads: tuple[int, ...], rounds: int, log=print) -> list[dict]:
    """Times every row's call and its floor, rows in turn, `rounds` rounds per thread count."""
    for row in rows:
        if row.floor is None:
            row.prepare()
    before = torch.get_num_threads()
    out = []
    try:
        for n in threads:
            torch.set_num_threads(n)
            clock_name, clock = clock_for(n)
            module_ms: dict[int, list[float]] = {i: [] for i in range(len(rows))}
            floor_ms: dict[int, list[float]] = {i: [] for i in range(len(rows))}
            for r in range(rounds):
                for i, row in enumerate(rows):
                    module_ms[i].append(_ms(row.call, clock))
                    floor_ms[i].append(_ms(row.floor, clock))
                log(f"  floor: {n} thread(s), round {r + 1}/{rounds} done")
            for i, row in enumerate(rows):
                ratios = [m / f for m, f in zip(module_ms[i], floor_ms[i])]
                flops = sum(g.flops for g in row.gemms)
                result = {
                    "part": row.part, "impl": row.impl, "norm": row.norm, "threads": n, "clock": clock_name, "rounds": rounds,
                    "module_ms": statistics.median(module_ms[i]), "module_iqr": _quartiles(module_ms[i])[::2],
                    "floor_ms": statistics.median(floor_ms[i]), "floor_iqr": _quartiles(floor_ms[i])[::2],
                    "ratio": statistics.median(ratios), "ratio_iqr": _quartiles(ratios)[::2],
                    "gemms": len(row.gemms), "gflop": flops / 1e9, "gemm_shapes": shape_counts(row.gemms),
                    "floor_gflops": flops / 1e6 / statistics.median(floor_ms[i]),
                    "module_times_ms": module_ms[i], "floor_times_ms": floor_ms[i],
                }
                if n == 1:
                    result["gemm_share"], result["top_other_ops"] = non_gemm_share(row.call)
                out.append(result)
    finally:
        torch.set_num_threads(before)
    return out


# Whole table --------------------------------------------------------------------------------------
def small_sizes(overrides: dict[str, list[str]]) -> tuple[dict, dict, dict, dict]:
    """The small recipes' model configs, batches (sentences; the Transformer's from its token budget)
    and the typical sentence length the parts are timed at."""
    from omegaconf import OmegaConf

    from .steps import compose_config

    rnn, _ = compose_config("rnnsearch", "layernorm", 1.0, overrides["rnnsearch"], scale="small")
    tf, _ = compose_config("transformer", "layernorm", 1.0, overrides["transformer"], scale="small")
    length = 16  # Multi30k's mean BPE length (8k pieces) is ~15 source and ~17 target tokens
    batch = {"rnnsearch": int(rnn.train.batch_size), "transformer": max(1, int(tf.train.batch_tokens) // length)}
    return (OmegaConf.to_container(rnn.task.model, resolve=True), OmegaConf.to_container(tf.task.model, resolve=True),
            batch, {"rnnsearch": length, "transformer": length})


def build_rows(norms: tuple[str, ...], overrides: dict[str, list[str]], sizes: tuple[dict, dict, dict, dict],
               steps: bool = True) -> list[Row]:
    """Every row: the parts of both models under each norm, torch's modules, the whole steps (overrides:
    per task, on top of scale=small; sizes: small_sizes(overrides))."""
    rnn_cfg, tf_cfg, batch, lengths = sizes
    rows = []
    for task, parts_of in (("rnnsearch", rnnsearch_parts), ("transformer", transformer_parts)):
        for norm in norms:
            row, run = step_row(task, norm, overrides[task])
            rows += parts_of(run.model, norm, batch[task], lengths[task], lengths[task])
            if steps:
                rows.append(row)
    rows += torch_parts(rnn_cfg, tf_cfg, batch, lengths)
    order = list(dict.fromkeys(r.part for r in rows))  # each part's rows together, in the order first seen
    return sorted(rows, key=lambda r: order.index(r.part))


def markdown(rows: list[dict]) -> str:
    lines = ["| part | implementation | norm | threads (clock) | module ms [IQR] | GEMMs alone ms [IQR] | module / GEMMs [IQR] | "
             "GEMMs | GFLOP | GEMM GFLOP/s | GEMM share of module (profiler) | largest other operators (share) |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        ops = "; ".join(f"{name} {share:.0%}" for name, share in r.get("top_other_ops", [])) or "-"
        share = f"{r['gemm_share']:.0%}" if "gemm_share" in r else "-"
        lines.append(
            f"| {r['part']} | {r['impl']} | {r['norm']} | {r['threads']} ({r['clock']}) | {r['module_ms']:.1f} [{r['module_iqr'][0]:.1f}-"
            f"{r['module_iqr'][1]:.1f}] | {r['floor_ms']:.1f} [{r['floor_iqr'][0]:.1f}-{r['floor_iqr'][1]:.1f}] | "
            f"**{r['ratio']:.2f}** [{r['ratio_iqr'][0]:.2f}-{r['ratio_iqr'][1]:.2f}] | {r['gemms']} | {r['gflop']:.2f} | "
            f"{r['floor_gflops']:.0f} | {share} | {ops} |")
    return "\n".join(lines)


def target_lines(rows: list[dict]) -> list[str]:
    """The issue's goals at 1 thread: module / floor per part for RMSNorm, and RMSNorm never slower than LayerNorm."""
    from .kernels import verdict

    one = [r for r in rows if r["threads"] == 1]
    lines = []
    for r in one:
        goal = GOALS.get(r["part"])
        if goal and r["norm"] == "rmsnorm" and r["impl"].startswith("suite"):
            lines.append(f"{r['part']} (RMSNorm): {r['ratio']:.2f}x its GEMMs alone (goal <= {goal}: "
                         f"{verdict(r['ratio'] <= goal)})")
    for part in dict.fromkeys(r["part"] for r in rows):
        for n in sorted({r["threads"] for r in rows}):
            by = {r["norm"]: r for r in rows if r["part"] == part and r["threads"] == n and r["impl"].startswith("suite")}
            if "rmsnorm" in by and "layernorm" in by:
                rms, ln = by["rmsnorm"]["module_times_ms"], by["layernorm"]["module_times_ms"]
                paired = [a / b for a, b in zip(rms, ln)]
                q1, q2, q3 = _quartiles(paired)
                lines.append(f"{part}, {n} thread(s): RMSNorm / LayerNorm {q2:.2f} [IQR {q1:.2f}-{q3:.2f}] "
                             f"(RMSNorm never slower: {'holds' if q2 <= 1.0 else 'within noise' if q1 <= 1.0 else 'does not hold'})")
    return lines


def shape_counts(gemms: list[Gemm]) -> list[dict]:
    """The recorded products by shape and layout, with how many times each ran (for the JSON: enough to replay)."""
    return [{**asdict(g), "count": c} for g, c in Counter(gemms).items()]


def shown_command(argv: list[str]) -> str:
    """The command as the table states it: the data folder by its kind, never this machine's path to it."""
    shown = [("<Multi30k>" if prev == "--data-root" else "--data-root=<Multi30k>" if a.startswith("--data-root=") else a)
             for prev, a in zip([None, *argv], argv)]
    return " ".join(["python -m rmsnorm_repro.bench floor", *shown])


def main(argv: list[str] | None = None) -> int:
    import argparse
    import os
    import sys
    from pathlib import Path

    from .. import allocator
    from ..host import cpu_name
    from .tables import environment, write_table

    ap = argparse.ArgumentParser(prog="python -m rmsnorm_repro.bench floor", description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5, help="rounds per thread count (each times every row once)")
    ap.add_argument("--threads", default="1,2", help="comma list of torch thread counts")
    ap.add_argument("--norms", default=",".join(NORMS), help="comma list of norms for the suite's rows")
    ap.add_argument("--data-root", default="", help="a raw Multi30k folder: the whole steps then use its batches and "
                    "8k BPE vocabulary; without it, the small recipes on data=synthetic (a smaller vocabulary)")
    ap.add_argument("--no-steps", action="store_true", help="only the parts, not the whole training steps")
    ap.add_argument("--tiny", action="store_true", help="both recipes shrunk to a few units: checks the bench in seconds")
    ap.add_argument("--out", default="results/speed")
    ap.add_argument("--flush-denormal", action="store_true")
    args = ap.parse_args(argv)
    try:
        threads = tuple(int(t) for t in args.threads.split(",") if t)
    except ValueError:
        threads = ()
    norms = tuple(n for n in args.norms.split(",") if n)
    bad = ("--rounds must be at least 1" if args.rounds < 1 else
           f"--threads must be a comma list of positive integers, got {args.threads!r}" if not threads or min(threads) < 1 else
           f"--norms: choose from {', '.join(NORMS)}, got {args.norms!r}" if not norms or set(norms) - set(NORMS) else
           f"--data-root {args.data_root} is not a folder" if args.data_root and not Path(args.data_root).is_dir() else None)
    if bad:
        print(f"error: {bad}", file=sys.stderr, flush=True)
        return 2
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    allocator.apply("tuned")
    torch.set_flush_denormal(args.flush_denormal)
    data_overrides = ["data=multi30k", f"data.root={Path(args.data_root).resolve()}"] if args.data_root else ["data=synthetic"]
    overrides = {task: data_overrides + (TINY[task] if args.tiny else []) for task in TINY}
    torch.manual_seed(0)
    sizes = small_sizes(overrides)
    rows = build_rows(norms, overrides, sizes, steps=not args.no_steps)
    print(f"floor table: {len(rows)} rows, threads {threads}, {args.rounds} rounds, {cpu_name()}", flush=True)
    results = measure(rows, threads, args.rounds)
    data = "Multi30k (8k joint BPE)" if args.data_root else "data=synthetic (the small recipes on generated sentences)"
    rnn_cfg, tf_cfg, batch, lengths = sizes
    env = {**environment(args), "command": shown_command(argv if argv is not None else sys.argv[2:]),
           "threads": args.threads}
    notes = [
        f"CPU: {cpu_name()}; fp32; torch {torch.__version__}; the tuned allocator; threads as in each row",
        f"parts at the small recipes' sizes: RNNSearch emb {rnn_cfg['emb']}, hidden {rnn_cfg['hidden']}, batch "
        f"{batch['rnnsearch']} x {lengths['rnnsearch']} source and target tokens; Transformer d {tf_cfg['d_model']}, "
        f"ffn {tf_cfg['ffn_dim']}, {tf_cfg['heads']} heads, batch {batch['transformer']} x {lengths['transformer']} tokens "
        f"(its {batch['transformer'] * lengths['transformer']}-token budget); training mode, each recipe's dropout "
        f"(RNNSearch {rnn_cfg['dropout']}, Transformer {tf_cfg['dropout']})",
        f"whole steps: zero_grad, loss, backward, clip, Adam on one fixed batch of {data}",
        "GEMMs alone: the products the module's forward and backward ran (recorded, not assumed: aten mm, addmm, bmm, "
        "baddbmm; the fused attention kernel as its 2 forward and 4 backward batched products), replayed with their "
        "layouts into preallocated outputs (products of one shape share operands): the time no implementation of the part can beat at torch's GEMM speed",
        f"{args.rounds} rounds per thread count, every row's module and then its floor in turn; medians over rounds, "
        "[IQR]; module / GEMMs: median of the per-round ratios; times at 1 thread are the thread's CPU time (other "
        "processes on a shared machine do not inflate it), with more threads wall time",
        "GEMM share and other operators: torch.profiler self CPU time over one call at 1 thread (the profiler's own "
        "cost inflates the many small operators, so these shares say where, not how much)",
        "torch rows compute the same part with torch's modules (nn.GRU: cuDNN-style GRU, no norm; nn.Transformer*Layer: "
        "post-norm LayerNorm), at the same sizes; their floors are their own GEMMs",
    ]
    table = markdown(results) + "\n\nGoals:\n\n" + "\n".join(f"- {t}" for t in target_lines(results))
    stem = "floor-cpu" + ("-tiny" if args.tiny else "")
    write_table(Path(args.out), stem, env, results, table, notes)
    return 0
