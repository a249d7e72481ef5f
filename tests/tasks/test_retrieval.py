"""task=retrieval: Recall@K against brute force (ties), loss, COCO loader on tiny files, feature
extractor's error path, masking, and tiny training through the runner."""
import json
import random
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from rmsnorm_repro.norms import build_normalization
from rmsnorm_repro.tasks.retrieval import metrics
from rmsnorm_repro.tasks.retrieval.data import load_coco, pad_captions
from rmsnorm_repro.tasks.retrieval.metrics import (
    contrastive_loss, fold_metrics, order_violation, ranks, recall_metrics,
)
from rmsnorm_repro.tasks.retrieval.task import RetrievalTask

# errors[caption, image] by hand: captions 0-4 show image 0, 5-9 image 1; many ties.
HAND = torch.tensor([[1, 1], [0, 2], [3, 1], [2, 2], [0, 0],
                     [1, 0], [1, 1], [0, 5], [2, 1], [4, 3]], dtype=torch.float32)


def brute_force_ranks(errors: torch.Tensor) -> tuple[list[int], list[int]]:
    """Sort every query's candidates, wrong ones first among equals (pessimistic), and read off the
    position of the first right one, not counting right ones before it (there are none)."""
    n_caps, n_ims = errors.shape
    e = errors.tolist()
    caption = []
    for i in range(n_ims):
        order = sorted(range(n_caps), key=lambda c: (e[c][i], c // 5 == i))
        caption.append(next(pos for pos, c in enumerate(order) if c // 5 == i))
    image = []
    for c in range(n_caps):
        order = sorted(range(n_ims), key=lambda i: (e[c][i], i == c // 5))
        image.append(order.index(c // 5))
    return caption, image


def test_recall_on_a_hand_made_matrix_with_ties():
    m = recall_metrics(HAND)
    # image retrieval ranks [1,0,1,1,1, 0,1,1,0,0]; caption retrieval: each image has a wrong caption at 0
    assert m["image_r1"] == pytest.approx(40.0) and m["image_r5"] == 100.0
    assert m["image_medr"] == 2.0 and m["image_meanr"] == pytest.approx(1.6)
    assert m["caption_r1"] == 0.0 and m["caption_r5"] == 100.0
    assert m["caption_medr"] == 2.0 and m["caption_meanr"] == 2.0
    assert [r.tolist() for r in ranks(HAND)] == [list(x) for x in brute_force_ranks(HAND)]


def test_ranks_match_brute_force_on_random_tied_matrices():
    rng = random.Random(0)
    for _ in range(20):
        n_ims = rng.randint(1, 12)
        errors = torch.tensor([[float(rng.randint(0, 3)) for _ in range(n_ims)] for _ in range(5 * n_ims)])
        caption, image = ranks(errors)
        assert (caption.tolist(), image.tolist()) == brute_force_ranks(errors)


def test_a_collapsed_model_scores_worst_not_best():
    m = recall_metrics(torch.zeros(50, 10))  # every error equal
    assert m["image_r1"] == 0.0 and m["image_meanr"] == 10.0 and m["caption_meanr"] == 46.0


def brute_force_optimistic(errors: torch.Tensor) -> tuple[list[int], list[int]]:
    """As brute_force_ranks with the right candidates first among equals."""
    n_caps, n_ims = errors.shape
    e = errors.tolist()
    caption = [next(pos for pos, c in enumerate(sorted(range(n_caps), key=lambda c: (e[c][i], c // 5 != i)))
                    if c // 5 == i) for i in range(n_ims)]
    image = [sorted(range(n_ims), key=lambda i: (e[c][i], i != c // 5)).index(c // 5) for c in range(n_caps)]
    return caption, image


def test_ties_are_reported_both_ways_and_oe_argsort_lies_between():
    """OE's evaluation.py:59-116 ranks with numpy.argsort: any order among equal errors. Its ranks, whatever
    order its sort leaves, lie between the pessimistic and the optimistic ones; without ties all three agree."""
    rng = random.Random(3)
    for trial in range(30):
        n_ims = rng.randint(1, 9)
        errors = torch.tensor([[float(rng.randint(0, 2)) for _ in range(n_ims)] for _ in range(5 * n_ims)])
        pessimistic, optimistic = ranks(errors), ranks(errors, optimistic=True)
        assert tuple(r.tolist() for r in optimistic) == brute_force_optimistic(errors)
        e = errors.numpy()
        for kind in ("quicksort", "stable", "shuffled"):
            order = (lambda d: np.argsort(d, kind=kind)) if kind != "shuffled" else (
                lambda d: (p := np.random.default_rng(trial).permutation(len(d)))[np.argsort(d[p], kind="stable")])
            t2i = [int(np.where(order(e[i]) == i // 5)[0][0]) for i in range(e.shape[0])]
            i2t = [int(np.where(order(e[:, i]) // 5 == i)[0][0]) for i in range(e.shape[1])]
            for theirs, lo, hi in ((i2t, optimistic[0], pessimistic[0]), (t2i, optimistic[1], pessimistic[1])):
                assert all(a <= b <= c for a, b, c in zip(lo.tolist(), theirs, hi.tolist()))
    distinct = torch.randperm(50, generator=torch.Generator().manual_seed(0)).float().reshape(10, 5)[:, :2]
    m = recall_metrics(distinct)
    assert all(m[key] == m[key + "_optimistic"] for key in list(m) if not key.endswith("_optimistic"))


def test_a_collapsed_model_scores_worst_pessimistically_and_best_optimistically():
    m = fold_metrics(torch.zeros(100, 3), torch.zeros(20, 3), 1)  # every error equal
    assert m["rsum"] == 0.0 and m["image_meanr"] == 20.0
    assert m["rsum_optimistic"] == 600.0 and m["image_meanr_optimistic"] == 1.0


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_nan_and_inf_never_rank(bad):
    """One NaN error compared false with everything and ranked as a win: R@1 100 (audit f15a5c5, case 4)."""
    errors = torch.rand(10, 2, generator=torch.Generator().manual_seed(1))
    errors[0, 1] = bad
    with pytest.raises(ValueError, match="1 of 10 captions' order-violation errors hold NaN or inf"):
        recall_metrics(errors)
    caps, ims = torch.rand(10, 3), torch.rand(2, 3)
    ims[1, 2] = bad
    with pytest.raises(ValueError, match="1 of 2 image embeddings hold NaN or inf"):
        fold_metrics(caps, ims, 1)
    ims[1, 2], caps[4, 0], caps[7, 1] = 0.5, bad, bad
    with pytest.raises(ValueError, match="2 of 10 caption embeddings hold NaN or inf"):
        fold_metrics(caps, ims, 1)


def test_order_violation_and_loss_match_their_definitions():
    g = torch.Generator().manual_seed(0)
    s, im = torch.rand(6, 4, generator=g), torch.rand(6, 4, generator=g)
    errors = order_violation(s, im)
    naive = torch.tensor([[float(((s[c] - im[i]).clamp_min(0) ** 2).sum()) for i in range(6)] for c in range(6)])
    torch.testing.assert_close(errors, naive)
    margin, expected = 0.05, 0.0
    for a in range(6):
        for b in range(6):
            if a != b:  # caption b against image a's own caption; image b against caption a's own image
                expected += max(0.0, margin - float(errors[b, a]) + float(errors[a, a]))
                expected += max(0.0, margin - float(errors[a, b]) + float(errors[a, a]))
    assert float(contrastive_loss(errors, margin)) == pytest.approx(expected, rel=1e-5)


def test_order_violation_without_autograd_equals_the_differentiable_one_across_chunks(monkeypatch):
    monkeypatch.setattr(metrics, "CHUNK_ELEMENTS", 7 * 4 * 5)  # 7 captions a chunk: 23 captions = 4 chunks
    g = torch.Generator().manual_seed(2)
    s, im = torch.rand(23, 5, generator=g, requires_grad=True), torch.rand(4, 5, generator=g)
    differentiable = order_violation(s, im)
    assert differentiable.requires_grad
    with torch.no_grad():
        assert torch.equal(order_violation(s, im), differentiable.detach())


def test_an_evaluation_allocates_one_work_buffer_however_many_chunks(monkeypatch):
    """A paper-size fold (5000 captions x 1000 images x 1024) is ~300 chunks of 64 MiB: a fresh broadcast
    per chunk fragmented the tuned heap to ~20 GB (docs/performance.md). Here 64 chunks of 256 KiB."""
    monkeypatch.setattr(metrics, "CHUNK_ELEMENTS", 1 << 16)
    s, im = torch.rand(4096, 64), torch.rand(64, 64)
    chunk_bytes = (1 << 16) * 4
    with torch.no_grad(), torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                                 profile_memory=True) as prof:
        order_violation(s, im)
    big = [e.self_cpu_memory_usage for e in prof.events() if e.self_cpu_memory_usage >= chunk_bytes]  # allocations
    assert sorted(big) == [chunk_bytes, 4096 * 64 * 4], big  # the work buffer and the (4096, 64) errors


def test_folds_average_per_fold_metrics():
    g = torch.Generator().manual_seed(1)
    caps, ims = torch.rand(40, 3, generator=g), torch.rand(8, 3, generator=g)
    two = fold_metrics(caps, ims, 2)
    halves = [recall_metrics(order_violation(caps[:20], ims[:4])), recall_metrics(order_violation(caps[20:], ims[4:]))]
    for key in halves[0]:
        assert two[key] == pytest.approx((halves[0][key] + halves[1][key]) / 2)
    assert two["rsum"] == pytest.approx(sum(two[f"{s}_r{k}"] for s in ("caption", "image") for k in (1, 5, 10)))
    with pytest.raises(ValueError, match="equal folds"):
        fold_metrics(caps[:35], ims[:7], 2)


def write_coco(root, n_images=(3, 2, 2), dim=6):
    for (name, n) in zip(("train", "dev", "test"), n_images):
        lines = [f"A {'dog' if i % 2 else 'cat'} on {name} grass number {c}" for i in range(n) for c in range(5)]
        (root / f"{name}_caps.txt").write_text("\n".join(lines) + "\n")
        np.save(root / f"{name}_ims.npy", np.random.default_rng(0).random((n, dim)).astype(np.float32))


def test_coco_loader_real_layout_and_errors(tmp_path):
    write_coco(tmp_path)
    data = load_coco({"root": str(tmp_path), "max_len": 4})
    train, test = data.splits["train"], data.splits["test"]
    assert len(train.captions) == 15 and train.images.shape == (3, 6) and data.feature_dim == 6
    assert [data.vocab[i] for i in train.captions[0].tolist()] == ["a", "cat", "on", "train"]  # lowercased, cut
    assert "test" not in data.vocab and data.vocab[test.captions[0][3]] == "<unk>"  # vocabulary from training
    np.save(tmp_path / "dev_ims.npy", np.zeros((3, 6), dtype=np.float32))  # 10 captions, 3 images
    with pytest.raises(ValueError, match="5 consecutive captions per image"):
        load_coco({"root": str(tmp_path)})
    with pytest.raises(FileNotFoundError, match="extract_coco_features"):
        load_coco({"root": str(tmp_path / "missing")})


def test_coco_zip_layout_reads_as_the_caps_ims_layout(tmp_path):
    """ivendrov's coco.zip: {train,val,test}.txt and images/10crop/{train,val,test}.npy (datasets.py:26-32)."""
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    ours.mkdir()
    write_coco(ours)
    (theirs / "images" / "10crop").mkdir(parents=True)
    for name, oe_name in (("train", "train"), ("dev", "val"), ("test", "test")):
        (theirs / f"{oe_name}.txt").write_bytes((ours / f"{name}_caps.txt").read_bytes())
        (theirs / "images" / "10crop" / f"{oe_name}.npy").write_bytes((ours / f"{name}_ims.npy").read_bytes())
    a, b = load_coco({"root": str(ours)}), load_coco({"root": str(theirs)})
    assert a.vocab == b.vocab
    for split in ("train", "valid", "test"):
        assert all(torch.equal(x, y) for x, y in zip(a.splits[split].captions, b.splits[split].captions))
        assert torch.equal(a.splits[split].images, b.splits[split].images)
    (theirs / "images" / "10crop" / "val.npy").unlink()
    with pytest.raises(FileNotFoundError, match=r"images/10crop/val.npy not found; set data.root to the folder of ivendrov's coco.zip"):
        load_coco({"root": str(theirs)})


def test_feature_extractor_without_cached_weights_says_where_to_put_them(tmp_path, monkeypatch):
    import importlib.util

    from PIL import Image

    spec = importlib.util.spec_from_file_location("extract", "scripts/extract_coco_features.py")
    extract = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(extract)
    Image.new("RGB", (300, 260), (200, 30, 30)).save(tmp_path / "a.jpg")
    (tmp_path / "list.txt").write_text(f"{tmp_path / 'a.jpg'}\n")
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    with pytest.raises(SystemExit, match="VGG19 weights not found at .*vgg19-dcbb9e9d.pth"):
        extract.main(["--images", str(tmp_path / "list.txt"), "--out", str(tmp_path / "x_ims.npy")])
    # the 10-crop averaging itself, with a tiny stand-in for VGG19's fc7 network
    net = torch.nn.Sequential(torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten())
    feats = extract.image_features(net, [tmp_path / "a.jpg"] * 3, torch.device("cpu"), batch_size=2)
    assert feats.shape == (3, 3) and feats.dtype == np.float32 and np.allclose(feats, feats[0])
    assert feats[0, 0] > 1.0 > feats[0, 1]  # a red image, ImageNet-normalized
    unit = extract.l2_normalize_rows(np.array([[3.0, 4.0], [0.0, 0.0]], dtype=np.float32))
    assert np.allclose(unit, [[0.6, 0.8], [0.0, 0.0]]) and unit.dtype == np.float32  # ivendrov: unit L2 rows


def tiny_cfg(**sizes):
    synthetic = dict(seed=3, objects=12, objects_per_image=3, min_named=2, feature_dim=32, noise=0.3,
                     train_images=400, valid_images=40, test_images=40, **sizes)
    return OmegaConf.create({
        "seed": 1, "data": {"name": "synthetic", "root": None}, "train": {"batch_size": 32},
        "task": {"name": "retrieval", "model": {"word_dim": 16, "dim": 32}, "margin": 0.05,
                 "eval_batch_size": 64, "synthetic": synthetic},
    })


def test_batches_are_pure_pairs_and_encoding_ignores_padding():
    task = RetrievalTask(tiny_cfg(), build_normalization("prmsnorm", {"p": 0.25}), torch.device("cpu"))
    a = task.train_batch(3)
    assert all(torch.equal(a[k], task.train_batch(3)[k]) for k in a)
    halves = [task.train_batch(3, r, 2) for r in (0, 1)]
    assert torch.equal(torch.cat([h["images"] for h in halves]), a["images"])
    model = task.build_model().eval()
    caps = task.data.splits["valid"].captions[:7]
    batch = model.encode_captions(*pad_captions(caps, torch.device("cpu")))
    for row, cap in enumerate(caps):
        alone = model.encode_captions(*pad_captions([cap], torch.device("cpu")))
        torch.testing.assert_close(alone[0], batch[row], atol=1e-6, rtol=1e-5)
    assert (batch >= 0).all() and torch.allclose(batch.norm(dim=-1), torch.ones(7))


def test_tiny_run_through_the_runner(tmp_path):
    """The real config files + the runner: metric names land in metrics.jsonl and summary.json."""
    from rmsnorm_repro.runner import run
    from runner_fixtures.helpers import compose_cfg

    cfg = compose_cfg([
        "task=retrieval", "norm=rmsnorm", f"paths.runs_dir={tmp_path}", "train.steps=60", "train.eval_every=30",
        "train.checkpoint_every=60", "train.batch_size=32", "task.model.word_dim=16", "task.model.dim=32",
        "task.synthetic.feature_dim=32", "task.synthetic.objects=12", "task.synthetic.train_images=400",
        "task.synthetic.valid_images=40", "task.synthetic.test_images=40",
    ])
    summary = run(cfg, tmp_path / "run")
    assert summary["status"] == "completed" and summary["step_ms_median"] > 0
    evals = [r for r in map(json.loads, (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()) if "rsum" in r]
    assert [r["step"] for r in evals] == [30, 60]
    names = {f"{s}_{k}" for s in ("caption", "image") for k in ("r1", "r5", "r10", "medr", "meanr")} | {"rsum"}
    assert names <= set(summary["final"]) and names <= set(evals[-1])
    # 40 images: R@1 by chance 2.5% both ways (rsum ~80); 60 steps of ivendrov's recipe (one caption
    # per image per epoch, per-tensor clipping, U(-0.1, 0.1) init) give image R@1 ~8%, rsum ~230
    assert evals[-1]["image_r1"] > 5 and evals[-1]["rsum"] > 180
    assert summary["best"]["rsum"] >= evals[-1]["rsum"] - 1e-9


def test_an_epoch_visits_every_image_once_with_one_of_its_captions():
    """task.sampling=images (ivendrov's datasource.py): 400 images, batch 32 -> 12.5 steps per epoch;
    the first 12 steps hold 384 distinct images, each caption one of its own image's five."""
    task = RetrievalTask(tiny_cfg(), build_normalization("none"), torch.device("cpu"))
    train = task.data.splits["train"]
    images, captions = [], []
    for step in range(12):
        batch = task.train_batch(step)
        rows = [int(torch.nonzero((train.images == im).all(1))[0]) for im in batch["images"]]
        images += rows
        for row, (tokens, mask) in enumerate(zip(batch["tokens"], batch["mask"])):
            own = [c.tolist() for c in train.captions[5 * rows[row]: 5 * rows[row] + 5]]
            captions.append(own.index(tokens[mask].tolist()))
    assert len(set(images)) == 384
    assert len(set(captions)) == 5  # random among the five
    cfg = tiny_cfg()
    cfg.task.sampling = "captions"
    by_caption = RetrievalTask(cfg, build_normalization("none"), torch.device("cpu"))
    assert not torch.equal(by_caption.train_batch(0)["tokens"], task.train_batch(0)["tokens"])
    cfg.task.sampling = "words"
    with pytest.raises(ValueError, match="task.sampling"):
        RetrievalTask(cfg, build_normalization("none"), torch.device("cpu"))


def test_init_follows_ivendrov():
    """Word embedding and GRU input matrices U(-0.1, 0.1), square state blocks orthogonal, image map
    Xavier-uniform, biases 0 (ivendrov utils.py norm_weight(scale=0.1), xavier_weight)."""
    from rmsnorm_repro.tasks.retrieval.model import OrderEmbedding

    torch.manual_seed(0)
    model = OrderEmbedding(500, 256, build_normalization("rmsnorm"), word_dim=300, dim=64)
    emb = model.embed.weight.detach()[1:]
    assert emb.abs().max() <= 0.1 and abs(emb.std().item() - 0.1 / 3 ** 0.5) < 0.002
    cell = model.encoder.cells[0]
    w = cell.input_proj.weight.detach()
    assert w.abs().max() <= 0.1 and abs(w.std().item() - 0.1 / 3 ** 0.5) < 0.002
    u = cell.state_proj.weight.detach()[:64]
    torch.testing.assert_close(u @ u.T, torch.eye(64), atol=1e-5, rtol=0)
    bound = (6 / (256 + 64)) ** 0.5
    assert model.image_proj.weight.abs().max() <= bound and torch.all(model.image_proj.bias == 0)


def test_the_data_docs_coco_image_count_is_the_one_the_recipes_steps_are_100_epochs_of():
    """ivendrov's driver.py: 100 epochs of one caption per training image, the last partial batch dropped."""
    data_docs = (Path(__file__).resolve().parents[2] / "docs" / "data.md").read_text(encoding="utf-8")
    row = next(line for line in data_docs.splitlines() if line.startswith("| COCO order-embedding features"))
    images = int(re.search(r"for ([\d,]+) training images", row).group(1).replace(",", ""))
    recipe = OmegaConf.load(Path(__file__).resolve().parents[2] / "configs" / "task" / "retrieval.yaml")
    assert images // recipe.train.batch_size * 100 == recipe.train.steps
