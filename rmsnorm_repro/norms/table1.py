"""Table 1 of the paper, computed: which transformations leave a normalized layer's output unchanged.

    python -m rmsnorm_repro.norms.table1        # or: make table1

For each method we build one layer through the norm factory, h = norm(W x) (WeightNorm:
h = g (v.x) / ||v|| + b; BatchNorm with the statistics of the batch), draw random parameters and
data in float64, apply one of the six transformations of the paper, and measure the relative change
of the output ||h' - h|| / ||h|| over the whole batch. A cell is "yes" (invariant) when the change is
below INVARIANT_BELOW and "no" when it is above CHANGED_ABOVE; a change in between is reported as
"?" and counts as a disagreement, so no cell is decided by a loose threshold.

eps = 1e-12 in every norm (BatchNorm refuses 0 in training): eps only guards against a zero
statistic, and the invariances hold up to O(eps / statistic), far below INVARIANT_BELOW.
The paper's cells come from results/paper/table1.csv. The table goes to results/tables/table1.md
and to stdout; the exit status is 1 when any cell disagrees with the paper.
"""
from __future__ import annotations

import argparse
import csv
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
from torch import Tensor, nn
from torch.nn.utils import parametrize

from ..atomic import atomic_write_text, cannot_write
from . import Normalization, build_normalization
from ..paths import paper_dir, repo_dir

PAPER_CSV = paper_dir() / "table1.csv"
# the committed page in a checkout (make table1 refreshes it); ./results/tables/ from an installed wheel
OUT_MD = (repo_dir() or Path.cwd()) / "results" / "tables" / "table1.md"

N_CASES, N_IN, N_OUT = 16, 24, 32
DELTA = 3.0  # every re-scaling multiplies by this factor
EPS = 1e-12  # every norm's eps: BatchNorm refuses 0 in training, and 1e-12 moves no cell
INVARIANT_BELOW = 1e-9  # float64 round-off is ~1e-16; anything this small is an exact invariance
CHANGED_ABOVE = 1e-2  # a non-invariance must move the output by at least 1%

# Table 1's rows: the method's name in the paper -> (norm name, factory options).
METHODS: dict[str, tuple[str, dict]] = {
    "BatchNorm": ("batchnorm", {"eps": EPS}),
    "WeightNorm": ("weightnorm", {}),
    "LayerNorm": ("layernorm", {"eps": EPS}),
    "RMSNorm": ("rmsnorm", {"eps": EPS}),
    "pRMSNorm": ("prmsnorm", {"p": 0.0625, "eps": EPS}),  # k = ceil(32 * 6.25%) = 2 of 32 units
}


class NormalizedLayer(nn.Module):
    """h = norm(W x) for a batch of cases x of shape (N, n_in), built only through the factory.

    W comes from norms.linear and the norm from norms.act. A layer whose activation norm is the
    identity keeps the linear layer's bias (WeightNorm: h = g (v.x) / ||v|| + b); a normalized layer
    has no bias before its norm (a = W x as in the paper) and its offset is the norm's own.
    """

    def __init__(self, norms: Normalization, n_in: int, n_out: int):
        super().__init__()
        self.norm = norms.act(n_out)
        self.linear = norms.linear(n_in, n_out, bias=isinstance(self.norm, nn.Identity))

    def weight_matrix(self) -> Tensor:
        """The matrix the transformations act on: W, or V under WeightNorm (w_i = g_i v_i / ||v_i||)."""
        if parametrize.is_parametrized(self.linear, "weight"):
            return self.linear.parametrizations.weight.original1  # weight_norm: original0 = g, original1 = v
        return self.linear.weight

    def forward(self, x: Tensor) -> Tensor:
        return self.norm(self.linear(x))


# The six transformations. Each maps (W of shape (n_out, n_in), x of shape (N, n_in), generator)
# to a new (W, x). Row i of W is unit i's weight vector w_i; row n of x is case n.
def weight_matrix_rescaling(w: Tensor, x: Tensor, gen: torch.Generator) -> tuple[Tensor, Tensor]:
    """W -> delta W: every summed input of every case is multiplied by delta."""
    return DELTA * w, x


def weight_matrix_recentering(w: Tensor, x: Tensor, gen: torch.Generator) -> tuple[Tensor, Tensor]:
    """W -> W + 1 gamma^T: the same vector gamma is added to every unit's weight vector.

    Every summed input of case x then shifts by the same amount gamma.x (different per case). This
    is the paper's W + gamma 1^T with W stored as (inputs x units), one column per unit, and the
    LayerNorm paper's W + 1 gamma^T. Read with rows as units it would add gamma_i * sum(x) to unit i,
    a per-unit shift that LayerNorm is not invariant to, which contradicts the paper's own cell.
    """
    gamma = torch.randn(w.shape[1], generator=gen, dtype=w.dtype)
    return w + gamma, x


def weight_vector_rescaling(w: Tensor, x: Tensor, gen: torch.Generator) -> tuple[Tensor, Tensor]:
    """w_0 -> delta w_0: one unit's weight vector is re-scaled, the others stay."""
    w = w.clone()
    w[0] *= DELTA
    return w, x


def dataset_rescaling(w: Tensor, x: Tensor, gen: torch.Generator) -> tuple[Tensor, Tensor]:
    """x -> delta x for every case."""
    return w, DELTA * x


def dataset_recentering(w: Tensor, x: Tensor, gen: torch.Generator) -> tuple[Tensor, Tensor]:
    """x -> x + c, the same vector c added to every case: unit i's summed input shifts by w_i.c in every case."""
    return w, x + torch.randn(x.shape[1], generator=gen, dtype=x.dtype)


def single_case_rescaling(w: Tensor, x: Tensor, gen: torch.Generator) -> tuple[Tensor, Tensor]:
    """x_0 -> delta x_0: one training case is re-scaled, the others stay."""
    x = x.clone()
    x[0] *= DELTA
    return w, x


@dataclass(frozen=True)
class Transformation:
    key: str  # column of results/paper/table1.csv
    title: str  # the paper's column header
    apply: Callable[[Tensor, Tensor, torch.Generator], tuple[Tensor, Tensor]]


TRANSFORMATIONS = (
    Transformation("weight_matrix_rescaling", "Weight matrix re-scaling", weight_matrix_rescaling),
    Transformation("weight_matrix_recentering", "Weight matrix re-centering", weight_matrix_recentering),
    Transformation("weight_vector_rescaling", "Weight vector re-scaling", weight_vector_rescaling),
    Transformation("dataset_rescaling", "Dataset re-scaling", dataset_rescaling),
    Transformation("dataset_recentering", "Dataset re-centering", dataset_recentering),
    Transformation("single_case_rescaling", "Single training case re-scaling", single_case_rescaling),
)


def relative_change(method: str, transformation: Transformation, seed: int = 0) -> float:
    """||h' - h|| / ||h|| for one cell: the layer of `method` before and after `transformation`."""
    name, options = METHODS[method]
    gen = torch.Generator().manual_seed(seed)
    layer = NormalizedLayer(build_normalization(name, options), N_IN, N_OUT).double().train()
    with torch.no_grad():
        # Random gains and biases too, so that the affine parts of the norms take part.
        for param in layer.parameters():
            param.copy_(torch.randn(param.shape, generator=gen, dtype=torch.float64))
        x = torch.randn(N_CASES, N_IN, generator=gen, dtype=torch.float64)
        h = layer(x)
        w = layer.weight_matrix()
        new_w, new_x = transformation.apply(w.clone(), x, gen)
        w.copy_(new_w)
        h_new = layer(new_x)
    return float((h_new - h).norm() / h.norm())


def verdict(change: float) -> str:
    """'yes' (invariant), 'no' (clearly changed) or '?' (neither: counts as a disagreement)."""
    if change < INVARIANT_BELOW:
        return "yes"
    return "no" if change > CHANGED_ABOVE else "?"


def compute(seed: int = 0) -> dict[str, dict[str, float]]:
    """The measured relative change of every cell: {method: {transformation key: change}}."""
    return {m: {t.key: relative_change(m, t, seed) for t in TRANSFORMATIONS} for m in METHODS}


def read_paper(path: Path = PAPER_CSV) -> dict[str, dict[str, str]]:
    """The paper's cells, {method: {transformation key: 'yes' | 'no'}}, checked for completeness."""
    with open(path, newline="") as f:
        rows = {row["method"]: row for row in csv.DictReader(f)}
    for method in METHODS:
        for t in TRANSFORMATIONS:
            cell = rows.get(method, {}).get(t.key)
            if cell not in ("yes", "no"):
                raise ValueError(f"{path}: cell ({method}, {t.key}) is {cell!r}; it must be 'yes' or 'no'")
    return {m: {t.key: rows[m][t.key] for t in TRANSFORMATIONS} for m in METHODS}


ROUND_OFF = 1e-12  # changes below this are float64 round-off, whose last digits vary by machine and BLAS


def fmt_change(change: float) -> str:
    """A relative change as written in the table: round-off as "< 1e-12", so regenerating the
    committed page does not rewrite its last digits; anything larger with two significant digits."""
    return f"< {ROUND_OFF:.0e}" if change < ROUND_OFF else f"{change:.1e}"


def render(changes: dict[str, dict[str, float]], paper: dict[str, dict[str, str]], seed: int) -> tuple[str, int]:
    """The Markdown report and the number of cells that match the paper."""
    matches, rows = 0, []
    for method in METHODS:
        cells = []
        for t in TRANSFORMATIONS:
            ours, theirs, change = verdict(changes[method][t.key]), paper[method][t.key], changes[method][t.key]
            matches += ours == theirs
            cells.append(f"{ours} / {theirs} ({fmt_change(change)})" + ("" if ours == theirs else " **MISMATCH**"))
        rows.append(f"| {method} | " + " | ".join(cells) + " |")
    total = len(METHODS) * len(TRANSFORMATIONS)
    lines = [
        "# Table 1: invariance properties, computed",
        "",
        f"Layer h = norm(W x) on {N_CASES} cases, {N_IN} inputs, {N_OUT} units; float64, eps = {EPS:.0e}, "
        f"delta = {DELTA}, random parameters and data (seed {seed}). pRMSNorm: p = "
        f"{METHODS['pRMSNorm'][1]['p']}. Each cell: ours / paper (relative change ||h' - h|| / ||h||); "
        f"ours is yes below {INVARIANT_BELOW:.0e}, no above {CHANGED_ABOVE:.0e}, ? in between.",
        "",
        "| method | " + " | ".join(t.title for t in TRANSFORMATIONS) + " |",
        "|---" * (len(TRANSFORMATIONS) + 1) + "|",
        *rows,
        "",
        "Transformations (rmsnorm_repro/norms/table1.py):",
        "",
        *(f"- {t.title}: {t.apply.__doc__.splitlines()[0]}" for t in TRANSFORMATIONS),
        "",
        f"{matches}/{total} cells match the paper",
    ]
    return "\n".join(lines) + "\n", matches


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT_MD, help="Markdown output (default: %(default)s)")
    parser.add_argument("--paper", type=Path, default=PAPER_CSV, help="the paper's cells (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="draw of parameters and data (default: %(default)s)")
    args = parser.parse_args(argv)
    text, matches = render(compute(args.seed), read_paper(args.paper), args.seed)
    try:
        atomic_write_text(args.out, text)
    except OSError as err:
        print(text, end="")
        print(f"error: {cannot_write(err, 'choose a file you can write with --out')}", file=sys.stderr)
        return 2
    print(text, end="")
    return 0 if matches == len(METHODS) * len(TRANSFORMATIONS) else 1


if __name__ == "__main__":
    sys.exit(main())
