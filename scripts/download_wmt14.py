"""One-time download of WMT14 En-De for data=wmt14 (`make data-wmt14`; needs network).

Saves the datasets hub set "wmt/wmt14" config "de-en" (train 4.5M pairs, validation =
newstest2013, test = newstest2014 full, 3003 lines) with save_to_disk, plus from sacrebleu newstest2017
("wmt17", en-de) as newstest2017.{en,de} and the filtered 2737-line newstest2014 ("wmt14", en-de) as
newstest2014-filtered.{en,de}, all under --root (the default matches
data=wmt14 with data.root=null). Later runs load that copy offline.
"""
from __future__ import annotations

import argparse
import os

from rmsnorm_repro.tasks.translation.data import ensure_wmt14


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default="data/wmt14", help="where the saved set goes (data.root)")
    ap.add_argument("--hf-cache", default="data/hf", help="the datasets download cache")
    args = ap.parse_args()
    os.environ["HF_DATASETS_OFFLINE"] = os.environ["HF_HUB_OFFLINE"] = "0"  # this script exists to download
    import datasets

    root = ensure_wmt14(args.root, args.hf_cache)
    ds = datasets.load_from_disk(str(root))
    for split in ds:
        print(f"{split}: {len(ds[split])} pairs")
    with open(root / "newstest2017.en", encoding="utf-8") as f:
        print(f"newstest2017: {sum(1 for _ in f)} lines")
    print(f"saved under {root}")


if __name__ == "__main__":
    main()
