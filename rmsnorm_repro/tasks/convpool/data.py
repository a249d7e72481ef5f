"""Images for the ConvPool-CNN-C task: real CIFAR-10 (ZCA-whitened, as Salimans & Kingma) or synthetic.

Both give float tensors x (N, 3, 32, 32) and int64 labels y (N,), held in memory: CIFAR-10 is 600 MB
as float32, small next to the time a run takes, and indexing a tensor is the cheapest batcher there is.
"""
from __future__ import annotations

import hashlib
import math
import os
from pathlib import Path

import numpy as np
import torch
from torch import Tensor
from ...atomic import cached

# ---------------------------------------------------------------------------------------------------
# CIFAR-10


def load_cifar10(root: str | os.PathLike, download: bool = False) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(train_x, train_y, test_x, test_y) from `<root>/cifar-10-batches-py/`, images as uint8 (N, 3, 32, 32).

    Goes through torchvision.datasets.CIFAR10, which checks every file's md5, so a truncated or foreign
    file is refused like a missing one.
    """
    from torchvision.datasets import CIFAR10

    try:
        train = CIFAR10(str(root), train=True, download=download)
        test = CIFAR10(str(root), train=False, download=False)
    except RuntimeError as e:  # torchvision's "Dataset not found or corrupted"
        raise FileNotFoundError(
            f"CIFAR-10 not found under {Path(root) / CIFAR10.base_folder} (or a file fails its checksum); "
            "run `make data-cifar10` or pass data.download=true where there is network"
        ) from e
    except OSError as e:  # data.download=true without network: urllib's URLError, a refused or reset connection
        if not download:
            raise
        reason = " ".join(str(getattr(e, "reason", None) or e).split())
        raise FileNotFoundError(
            f"data.download=true: downloading CIFAR-10 into {root} failed ({type(e).__name__}: {reason}); "
            "this needs network: run `make data-cifar10` where there is network, or copy cifar-10-batches-py/ "
            "under data.root"
        ) from e

    def arrays(ds) -> tuple[Tensor, Tensor]:
        # torchvision keeps HWC uint8; the model wants CHW
        x = torch.from_numpy(np.ascontiguousarray(ds.data.transpose(0, 3, 1, 2)))
        return x, torch.tensor(ds.targets, dtype=torch.int64)

    return (*arrays(train), *arrays(test))


def scale_pixels(x: Tensor) -> Tensor:
    """uint8 pixels to about [-1, 1]: (x - 127.5) / 128, the scaling of Salimans' CIFAR script."""
    return (x.to(torch.float32) - 127.5) / 128.0


def fit_zca(x: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    """ZCA whitening fitted on rows of x (N, D): returns (mean (D,), W (D, D)) with whitened = (x - mean) @ W.

    W = U diag(1 / sqrt(lambda + eps)) U^T over the eigenpairs of the covariance (eps regularizes the
    small eigenvalues; Salimans' nn.ZCA uses 1e-5 on pixels scaled to [-1, 1]). Computed in float64.
    Directions with no variance in the data (when N <= D) get 1 / sqrt(eps), their limit.
    """
    x = x.to(torch.float64)
    n, d = x.shape
    mean = x.mean(0)
    xc = x - mean
    if n > d:  # real data: eigh of the D x D covariance is cheaper than an SVD of the N x D matrix
        evals, evecs = torch.linalg.eigh(xc.T @ xc / n)
        evals = evals.clamp_min(0.0)
    else:  # few rows (tests, subsets): a thin SVD gives the non-zero eigenpairs at a fraction of the cost
        _, s, vh = torch.linalg.svd(xc, full_matrices=False)
        evals, evecs = s.pow(2) / n, vh.T
    w = (evecs * torch.rsqrt(evals + eps)) @ evecs.T
    w = w + (torch.eye(d, dtype=x.dtype, device=x.device) - evecs @ evecs.T) / math.sqrt(eps)
    return mean.to(torch.float32), w.to(torch.float32)


def zca_whitener(train_u8: Tensor, eps: float, cache_dir: str | os.PathLike | None) -> tuple[Tensor, Tensor]:
    """fit_zca on the scaled training images, cached under cache_dir keyed by a hash of the data and eps."""
    key = hashlib.sha256(train_u8.cpu().numpy().tobytes() + repr(float(eps)).encode()).hexdigest()[:16]
    path = Path(cache_dir) / "convpool" / f"zca-{key}.pt" if cache_dir is not None else None
    def fit() -> tuple[Tensor, Tensor]:
        return fit_zca(scale_pixels(train_u8).flatten(1), eps)

    if path is None:
        return fit()

    def read(p: Path) -> tuple[Tensor, Tensor]:
        saved = torch.load(p, map_location=train_u8.device, weights_only=True)
        return saved["mean"], saved["w"]

    def build(tmp: Path) -> None:
        mean, w = fit()
        torch.save({"mean": mean.cpu(), "w": w.cpu()}, tmp)

    return cached(path, read, build)


def whiten(x_u8: Tensor, mean: Tensor, w: Tensor, chunk: int = 10000) -> Tensor:
    """Scaled and ZCA-whitened float32 images, shape kept; in chunks to bound the temporary memory."""
    w, mean = w.to(x_u8.device), mean.to(x_u8.device)
    out = torch.empty(x_u8.shape, dtype=torch.float32, device=x_u8.device)
    for i in range(0, len(x_u8), chunk):
        rows = scale_pixels(x_u8[i : i + chunk]).flatten(1)
        out[i : i + chunk] = ((rows - mean) @ w).view(-1, *x_u8.shape[1:])
    return out


# ---------------------------------------------------------------------------------------------------
# Synthetic images


def synthetic_images(
    n: int, seed: int, num_classes: int = 10, noise: float = 0.3, distractors: int = 2, chunk: int = 4096
) -> tuple[Tensor, Tensor]:
    """n class-conditional 32x32 RGB images: one grey Gabor patch whose orientation and frequency give the class.

    Class c has orientation (c mod 5) * 36 degrees (jitter sd 8.6 degrees, so neighbours overlap a
    little: the error has a floor of a few percent) and one of two spatial frequencies (c // 5). The
    patch sits at a random place with a random size, phase and contrast, among `distractors` blobs of
    random colour and Gaussian pixel noise. A small CNN has to find the patch and read it: at
    scale=mini every norm's test error falls from ~90% within 200 steps, BatchNorm's fastest.
    """
    if num_classes > 10:
        raise ValueError(f"synthetic images have at most 10 classes, got num_classes={num_classes}")
    g = torch.Generator().manual_seed(int(seed))
    ys, xs = [], []
    for start in range(0, n, chunk):
        m = min(chunk, n - start)
        y = torch.randint(num_classes, (m,), generator=g)
        xs.append(_draw(y, g, noise, distractors))
        ys.append(y)
    return torch.cat(xs), torch.cat(ys)


def _draw(y: Tensor, g: torch.Generator, noise: float, distractors: int) -> Tensor:
    m = len(y)

    def uniform(lo: float, hi: float, *shape: int) -> Tensor:
        return lo + (hi - lo) * torch.rand(m, *shape, generator=g)

    grid = torch.arange(32, dtype=torch.float32)
    gy, gx = grid.view(1, 32, 1), grid.view(1, 1, 32)

    def colour() -> Tensor:  # a random unit RGB direction: colour is no cue to the class
        c = torch.randn(m, 3, generator=g)
        return (c / c.norm(dim=1, keepdim=True)).view(m, 3, 1, 1)

    # the class patch: a Gabor with class orientation and frequency
    theta = (y % 5).float() * (math.pi / 5) + 0.15 * torch.randn(m, generator=g)
    freq = torch.where(y < 5, 0.12, 0.24) * uniform(0.9, 1.1)
    cx, cy, sigma = uniform(6, 26), uniform(6, 26), uniform(2.5, 4.5)
    dx, dy = gx - cx.view(m, 1, 1), gy - cy.view(m, 1, 1)
    along = dx * torch.cos(theta).view(m, 1, 1) + dy * torch.sin(theta).view(m, 1, 1)
    envelope = torch.exp(-(dx**2 + dy**2) / (2 * sigma.view(m, 1, 1) ** 2))
    wave = torch.cos(2 * math.pi * freq.view(m, 1, 1) * along + uniform(0, 2 * math.pi).view(m, 1, 1))
    # grey, so that orientation filters need not be learned once per colour
    img = uniform(1.0, 2.0).view(m, 1, 1, 1) * (envelope * wave).unsqueeze(1).expand(m, 3, 32, 32)

    for _ in range(distractors):  # blobs: structure the net must learn to ignore
        bx, by, bs = uniform(0, 32), uniform(0, 32), uniform(1.5, 4.0)
        blob = torch.exp(-((gx - bx.view(m, 1, 1)) ** 2 + (gy - by.view(m, 1, 1)) ** 2) / (2 * bs.view(m, 1, 1) ** 2))
        img = img + uniform(0.5, 1.5).view(m, 1, 1, 1) * colour() * blob.unsqueeze(1)
    return img + noise * torch.randn(m, 3, 32, 32, generator=g)

