"""Order-violation errors, the contrastive hinge loss, and Recall@K (ivendrov/order-embedding).

errors[c, i] = ||max(0, s_c - im_i)||^2 for caption c and image i: 0 when the caption lies below
the image in the order (captions are abstractions of images), larger the more it violates it.
Lower is better everywhere below.

Two retrieval directions, named as in the paper's Table 7:
- caption retrieval (`caption_*`): query an image, rank all captions; the rank is that of the
  image's best-ranked own caption (ivendrov's i2t).
- image retrieval (`image_*`): query a caption, rank all images; the rank is that of its image (t2i).
R@K is the percentage of queries ranked < K (0-based), medr = floor(median rank) + 1 and
meanr = mean rank + 1 (1-based, like ivendrov's code).

Ties: OE's evaluation.py:59-116 ranks with numpy.argsort (quicksort: the order among equal errors is
whatever that numpy's sort leaves, not reproducible across versions), so its number for a tied query
can be anything between two bounds, and both are reported. The headline keys count ties
PESSIMISTICALLY (a wrong candidate whose error equals the right one's ranks before it: a collapsed
model, every error equal, scores at the bottom, never above chance); the same keys with OPTIMISTIC
("caption_r1_optimistic", ... "rsum_optimistic") count them for the model. Without ties the two are
equal and are OE's number exactly.

Errors that are not finite (NaN, inf: from a diverged model, or a NaN in the features or an imported
projection) are refused with a ValueError: a NaN compares False with everything and would rank as a win.
"""
from __future__ import annotations

import torch
from torch import Tensor

from ...record import OPTIMISTIC
from .data import CAPTIONS_PER_IMAGE

CHUNK_ELEMENTS = 1 << 24  # bound on the (captions, images, dim) broadcast: 64 MiB of float32


def order_violation(s: Tensor, im: Tensor) -> Tensor:
    """(C, D) captions, (I, D) images -> (C, I) errors, in caption chunks to bound memory.

    Without autograd (evaluation: 5000 x 1000 pairs a fold, ~300 chunks) every chunk is computed in one
    work buffer, in place: a fresh 64 MiB broadcast per chunk, freed between small result tensors,
    fragments a heap that never returns memory (rmsnorm_repro.allocator's tuned mode) and grew a
    paper-scale test evaluation to ~20 GB. The values are the same either way."""
    rows = max(1, min(len(s), CHUNK_ELEMENTS // max(1, im.shape[0] * im.shape[1])))
    if torch.is_grad_enabled() and (s.requires_grad or im.requires_grad):
        return torch.cat([(c.unsqueeze(1) - im.unsqueeze(0)).clamp_min(0).pow(2).sum(-1) for c in s.split(rows)])
    out = s.new_empty(s.shape[0], im.shape[0])
    work = s.new_empty(rows, im.shape[0], im.shape[1])
    for start in range(0, s.shape[0], rows):
        chunk = s[start:start + rows]
        diff = torch.sub(chunk.unsqueeze(1), im.unsqueeze(0), out=work[:len(chunk)])
        torch.sum(diff.clamp_min_(0).pow_(2), -1, out=out[start:start + len(chunk)])
    return out


def contrastive_loss(errors: Tensor, margin: float) -> Tensor:
    """Hinge over all in-batch negatives in both directions, summed (ivendrov's loss).

    errors (B, B) of caption b against image b'; the diagonal holds the matching pairs.
    """
    positive = errors.diagonal()
    wrong_caption = (margin - errors + positive.unsqueeze(0)).clamp_min(0)  # per image (column): other captions
    wrong_image = (margin - errors + positive.unsqueeze(1)).clamp_min(0)  # per caption (row): other images
    off_diagonal = ~torch.eye(errors.shape[0], dtype=torch.bool, device=errors.device)
    return ((wrong_caption + wrong_image) * off_diagonal).sum()


def refuse_non_finite(values: Tensor, what: str) -> None:
    """ValueError naming how many rows of `values` hold a NaN or an infinity (none: nothing)."""
    bad = ~torch.isfinite(values)
    if bool(bad.any()):
        rows = int(bad.reshape(len(values), -1).any(1).sum())
        raise ValueError(f"{rows} of {len(values)} {what} hold NaN or inf: no rank can be read from them "
                         "(a NaN compares false with everything and would rank as a win)")


def ranks(errors: Tensor, per_image: int = CAPTIONS_PER_IMAGE, optimistic: bool = False) -> tuple[Tensor, Tensor]:
    """0-based ranks, ties counted against the model (pessimistic) or for it (optimistic): (caption
    retrieval, one per image; image retrieval, one per caption). ValueError on a non-finite error."""
    n_caps, n_ims = errors.shape
    if n_caps != per_image * n_ims:
        raise ValueError(f"want {per_image} captions per image, got {n_caps} captions for {n_ims} images")
    refuse_non_finite(errors, "captions' order-violation errors")
    before = torch.lt if optimistic else torch.le  # a wrong candidate this close ranks before the right one
    owner = torch.arange(n_caps, device=errors.device) // per_image
    own = owner.unsqueeze(1) == torch.arange(n_ims, device=errors.device).unsqueeze(0)  # (C, I)
    # image retrieval: wrong images at most as bad as the caption's own image (not counting its own)
    positive = errors.gather(1, owner.unsqueeze(1))
    image_ranks = (before(errors, positive) & ~own).sum(1)
    # caption retrieval: wrong captions at most as bad as the image's best own caption
    best_own = errors.masked_fill(~own, float("inf")).min(0).values
    caption_ranks = (before(errors, best_own.unsqueeze(0)) & ~own).sum(0)
    return caption_ranks, image_ranks


def summarize(rank: Tensor, prefix: str) -> dict[str, float]:
    rank = rank.double()
    metrics = {f"{prefix}_r{k}": 100.0 * float((rank < k).double().mean()) for k in (1, 5, 10)}
    metrics[f"{prefix}_medr"] = float(torch.quantile(rank, 0.5).floor()) + 1.0  # numpy's median, then floor
    metrics[f"{prefix}_meanr"] = float(rank.mean()) + 1.0
    return metrics


def recall_metrics(errors: Tensor) -> dict[str, float]:
    """The metrics both ways with ties counted against the model, and the same keys + OPTIMISTIC for it."""
    metrics = {}
    for suffix, optimistic in (("", False), (OPTIMISTIC, True)):
        caption_ranks, image_ranks = ranks(errors, optimistic=optimistic)
        for key, value in {**summarize(caption_ranks, "caption"), **summarize(image_ranks, "image")}.items():
            metrics[key + suffix] = value
    return metrics


def fold_metrics(captions: Tensor, images: Tensor, n_folds: int) -> dict[str, float]:
    """Metrics averaged over n_folds equal folds of images (with their captions), plus rsum.

    The paper's protocol: a 5000-image test set in 5 folds of 1000 images / 5000 captions.
    """
    refuse_non_finite(captions, "caption embeddings")
    refuse_non_finite(images, "image embeddings")
    n_ims = images.shape[0]
    if n_ims % n_folds:
        raise ValueError(f"{n_ims} images do not split into {n_folds} equal folds")
    size = n_ims // n_folds
    folds = [
        recall_metrics(order_violation(captions[f * size * CAPTIONS_PER_IMAGE : (f + 1) * size * CAPTIONS_PER_IMAGE],
                                       images[f * size : (f + 1) * size]))
        for f in range(n_folds)
    ]
    metrics = {key: sum(fold[key] for fold in folds) / n_folds for key in folds[0]}
    for suffix in ("", OPTIMISTIC):
        metrics["rsum" + suffix] = sum(metrics[f"{side}_r{k}{suffix}"]
                                       for side in ("caption", "image") for k in (1, 5, 10))
    return metrics
