"""Build `{split}_ims.npy` for data=coco from raw images with torchvision's VGG19.

    python scripts/extract_coco_features.py --images dev_images.txt --out data/coco/dev_ims.npy

`--images` lists one image path per line, in the order of the split's images (image i owns
captions 5i .. 5i+4 of `{split}_caps.txt`). Each image is resized to 256 (shorter side), cut into
10 crops of 224 (4 corners + centre, and their mirror images), and the fc7 activations (4096-d,
after its ReLU) of the crops are averaged, and each image's vector is then scaled to unit L2 norm:
the 10-crop VGG19 features the order-embedding paper used (ivendrov's extract_cnn_features.py: the
mean over the 10 crops, then `sklearn.preprocessing.normalize`; its README: "the VGG features were
scaled to unit norm prior to training"). `--no-normalize` keeps the raw means. The ImageNet weights
must already be in the local torch cache (there is no download here); the error says where to put
them. They are torchvision's VGG19, not the Caffe VGG19 ivendrov used: close, not identical features.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torch import Tensor, nn
from torchvision import transforms
from torchvision.models import VGG19_Weights, vgg19

WEIGHTS = VGG19_Weights.IMAGENET1K_V1
FC7 = 5  # vgg.classifier[:5] = fc6, relu6, dropout, fc7, relu7


def cached_weights_path() -> Path:
    return Path(torch.hub.get_dir()) / "checkpoints" / Path(WEIGHTS.url).name


def load_fc7_network() -> nn.Module:
    """VGG19 up to fc7 (after its ReLU), in eval mode; SystemExit with a clear message when the
    ImageNet weights are not in the local torch cache."""
    path = cached_weights_path()
    if not path.is_file():
        raise SystemExit(
            f"VGG19 weights not found at {path}; download {WEIGHTS.url} to that path "
            "(or set TORCH_HOME to a cache that holds checkpoints/vgg19-dcbb9e9d.pth) and rerun"
        )
    net = vgg19()
    net.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
    net.classifier = net.classifier[:FC7]
    return net.eval()


def ten_crop_transform() -> transforms.Compose:
    normalize = transforms.Normalize(WEIGHTS.transforms().mean, WEIGHTS.transforms().std)
    return transforms.Compose([
        transforms.Resize(256),
        transforms.TenCrop(224),
        transforms.Lambda(lambda crops: torch.stack([normalize(transforms.functional.to_tensor(c)) for c in crops])),
    ])


@torch.no_grad()
def image_features(net: nn.Module, paths: list[Path], device: torch.device, batch_size: int = 8) -> np.ndarray:
    """(len(paths), feature_dim) float32: the network's output averaged over each image's 10 crops."""
    transform = ten_crop_transform()
    rows: list[Tensor] = []
    for start in range(0, len(paths), batch_size):
        crops = torch.stack([transform(Image.open(p).convert("RGB")) for p in paths[start : start + batch_size]])
        out = net(crops.flatten(0, 1).to(device))  # (B * 10, D)
        rows.append(out.view(crops.shape[0], crops.shape[1], -1).mean(1).cpu())
    return torch.cat(rows).numpy().astype(np.float32)


def l2_normalize_rows(features: np.ndarray) -> np.ndarray:
    """Each row divided by its L2 norm (an all-zero row stays 0), like sklearn.preprocessing.normalize."""
    norms = np.linalg.norm(features, axis=1, keepdims=True)
    return (features / np.where(norms == 0, 1.0, norms)).astype(np.float32)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", required=True, type=Path, help="text file: one image path per line, in split order")
    parser.add_argument("--out", required=True, type=Path, help="output .npy, e.g. data/coco/train_ims.npy")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--batch-size", type=int, default=8, help="images per forward pass (10 crops each)")
    parser.add_argument("--no-normalize", action="store_true",
                        help="keep the raw 10-crop means (default: unit L2 norm per image, as ivendrov's features)")
    args = parser.parse_args(argv)
    paths = [Path(line.strip()) for line in args.images.read_text().splitlines() if line.strip()]
    missing = [p for p in paths if not p.is_file()]
    if missing:
        raise SystemExit(f"{len(missing)} listed images not found, first: {missing[0]}")
    net = load_fc7_network().to(args.device)
    features = image_features(net, paths, torch.device(args.device), args.batch_size)
    if not args.no_normalize:
        features = l2_normalize_rows(features)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    np.save(args.out, features)
    print(f"wrote {args.out}: {features.shape[0]} images x {features.shape[1]} features", file=sys.stderr)


if __name__ == "__main__":
    main()
