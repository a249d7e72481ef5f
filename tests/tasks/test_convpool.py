"""task=convpool: ConvPool-CNN-C with every supported norm, its synthetic and CIFAR-10 data, its configs."""
from __future__ import annotations

import hashlib
import json
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from torch import nn
from torch.nn.utils import parametrize
from torchvision.datasets import CIFAR10

from rmsnorm_repro.norms import ChannelNorm, build_normalization
from rmsnorm_repro.tasks import get_task_class
from rmsnorm_repro.tasks.convpool import ConvPoolCNNC, ConvPoolTask
from rmsnorm_repro.tasks.convpool import data as D

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
NORMS = ConvPoolTask.supported_norms


def compose_cfg(*overrides: str):
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        return compose("train", overrides=["task=convpool", *overrides])


def tiny_cfg(tmp_path: Path, *overrides: str):
    """A narrow net on a small synthetic set: fast enough to train inside a test."""
    return compose_cfg(
        "task.model.width_mult=0.05", "task.synthetic.train_size=512", "task.synthetic.test_size=200",
        "task.train_error_size=200", "train.batch_size=32", f"paths.cache_dir={tmp_path / 'cache'}", *overrides,
    )


def make_task(cfg) -> ConvPoolTask:
    norms = build_normalization(cfg.norm.name, cfg.norm, ConvPoolTask.supported_norms, "convpool")
    return ConvPoolTask(cfg, norms, torch.device("cpu"))


# Model ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("norm", NORMS)
def test_every_supported_norm_gives_logits_in_train_and_eval(norm):
    torch.manual_seed(0)
    model = ConvPoolCNNC(build_normalization(norm, {"p": 0.125}), widths=(8, 12))
    x = torch.randn(4, 3, 32, 32)
    for train in (True, False):
        model.train(train)
        out = model(x)
        assert out.shape == (4, 10) and torch.isfinite(out).all()
    # the layer list: 9 convs (3x3 pad 1 x6, 3x3 valid, 1x1 x2), 2 pools, one dense layer
    convs = [m for m in model.modules() if isinstance(m, nn.Conv2d)]
    assert [(c.kernel_size, c.padding) for c in convs] == [((3, 3), (1, 1))] * 6 + [((3, 3), (0, 0)), ((1, 1), (0, 0)), ((1, 1), (0, 0))]
    assert [c.out_channels for c in convs] == [8] * 3 + [12] * 6
    assert sum(isinstance(m, nn.MaxPool2d) for m in model.modules()) == 2


def test_the_factory_places_the_norm_after_every_conv_with_the_configured_axes():
    model = ConvPoolCNNC(build_normalization("rmsnorm", {"conv_axes": "chw"}), widths=(8, 12))
    norms = [m for m in model.modules() if isinstance(m, ChannelNorm)]
    assert len(norms) == 9 and all(n.axes == "chw" for n in norms)
    layers = list(model.features)
    assert all(isinstance(layers[layers.index(n) - 1], nn.Conv2d) for n in norms)
    assert len([m for m in model.modules() if isinstance(m, nn.BatchNorm2d)]) == 0
    bn = ConvPoolCNNC(build_normalization("batchnorm"), widths=(8, 12))
    assert len([m for m in bn.modules() if isinstance(m, nn.BatchNorm2d)]) == 9


def test_weightnorm_reparameterizes_every_conv_and_the_dense_layer():
    model = ConvPoolCNNC(build_normalization("weightnorm"), widths=(8, 12))
    layers = [m for m in model.modules() if isinstance(m, (nn.Conv2d, nn.Linear))]
    assert len(layers) == 10 and all(parametrize.is_parametrized(m, "weight") for m in layers)
    for layer in layers:  # w = g v / ||v||: each output unit's weight norm is its g
        g = layer.parametrizations.weight.original0.flatten()
        assert torch.allclose(layer.weight.flatten(1).norm(dim=1), g.abs(), rtol=1e-5)
        assert layer.weight.flatten(1).norm(dim=1).std() > 0  # He init went through the parametrization


def test_batchnorm_uses_batch_statistics_in_training_and_running_averages_in_eval():
    torch.manual_seed(0)
    model = ConvPoolCNNC(build_normalization("batchnorm"), widths=(8, 12), input_noise=0.0, dropout=0.0)
    x = torch.randn(8, 3, 32, 32) * 2 + 1
    bn = next(m for m in model.modules() if isinstance(m, nn.BatchNorm2d))
    model.train()
    assert not torch.allclose(model(x)[:1], model(x[:1].repeat(2, 1, 1, 1))[:1], atol=1e-4)  # depends on the batch
    assert bn.running_mean.abs().sum() > 0  # updated by the training passes
    model.eval()
    before = bn.running_mean.clone()
    assert torch.allclose(model(x)[:1], model(x[:1]), atol=1e-5)  # each example alone: running statistics
    assert torch.equal(bn.running_mean, before)


def test_input_noise_and_dropout_act_only_in_training():
    torch.manual_seed(0)
    model = ConvPoolCNNC(build_normalization("none"), widths=(8, 12))
    x = torch.randn(2, 3, 32, 32)
    model.eval()
    assert torch.equal(model(x), model(x))
    model.train()
    assert not torch.equal(model(x), model(x))


# Synthetic data and the task interface ------------------------------------------------------------
def test_batches_are_a_pure_function_of_seed_and_step_and_shard_by_rank(tmp_path):
    a, b = make_task(tiny_cfg(tmp_path)), make_task(tiny_cfg(tmp_path))
    other_seed = make_task(tiny_cfg(tmp_path, "seed=2"))
    assert torch.equal(a.train_x, other_seed.train_x)  # the data set itself is fixed
    for step in (3, 40, 7):  # out of order, across epochs (16 steps per epoch here)
        xa, ya = a.train_batch(step)
        xb, yb = b.train_batch(step)
        assert torch.equal(xa, xb) and torch.equal(ya, yb)
        assert not torch.equal(xa, other_seed.train_batch(step)[0])
        halves = [a.train_batch(step, rank, 2) for rank in (0, 1)]
        assert torch.equal(torch.cat([h[0] for h in halves]), xa) and len(halves[0][1]) == 16
    # one epoch visits every training image exactly once
    seen = torch.cat([a.train_batch(s)[0] for s in range(a.steps_per_epoch)])
    assert len(torch.unique(seen.flatten(1), dim=0)) == len(a.train_x) == len(seen)
    with pytest.raises(ValueError, match="divisible"):
        a.train_batch(0, 0, 3)


def test_synthetic_images_are_learnable_but_not_trivially(tmp_path):
    torch.manual_seed(0)
    task = make_task(tiny_cfg(tmp_path, "norm=batchnorm"))
    model = task.build_model()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)

    def evaluate() -> dict[str, float]:
        model.eval()
        metrics = task.evaluate(model, "valid")
        model.train()
        return metrics

    first = None
    for step in range(40):
        loss, n = task.loss(model, task.train_batch(step))
        assert n == 32
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step == 4:
            first = evaluate()
    last = evaluate()
    assert first["error"] > 60  # a few steps are not enough
    assert last["error"] < first["error"] - 15, (first, last)
    assert last["train_error"] < first["train_error"] - 15
    assert abs(last["error"] + last["accuracy"] - 100) < 1e-9
    assert set(task.evaluate(model, "test")) == {"error", "accuracy", "train_error"}  # train_batch_error: off at mini


# CIFAR-10 -----------------------------------------------------------------------------------------
def write_fake_cifar10(root: Path, per_batch: int = 12) -> tuple[np.ndarray, np.ndarray]:
    """cifar-10-batches-py in the real pickle layout (rows of 3072 uint8: R plane, G plane, B plane)."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    rows, labels = [], []
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        data = rng.integers(0, 256, (per_batch, 3072), dtype=np.uint8)
        y = [int(v) for v in rng.integers(0, 10, per_batch)]
        entry = {"batch_label": name, "labels": y, "data": data, "filenames": [f"{name}_{i}.png" for i in range(per_batch)]}
        (folder / name).write_bytes(pickle.dumps(entry))
        rows.append(data)
        labels.append(y)
    meta = {"num_cases_per_batch": per_batch, "label_names": ["airplane", "automobile", "bird", "cat", "deer",
                                                              "dog", "frog", "horse", "ship", "truck"], "num_vis": 3072}
    (folder / "batches.meta").write_bytes(pickle.dumps(meta))
    return np.concatenate(rows), np.concatenate(labels)


@pytest.fixture
def fake_cifar10(tmp_path, monkeypatch):
    """A tiny CIFAR-10 copy, with torchvision's expected md5s patched to those of the fake files.

    The loader runs unchanged (torchvision still checks every file); only the checksums it expects
    are the fake files' instead of the real ones.
    """
    rows, labels = write_fake_cifar10(tmp_path / "cifar")
    folder = tmp_path / "cifar" / "cifar-10-batches-py"

    def md5(name: str) -> str:
        return hashlib.md5((folder / name).read_bytes()).hexdigest()

    monkeypatch.setattr(CIFAR10, "train_list", [[f"data_batch_{i}", md5(f"data_batch_{i}")] for i in range(1, 6)])
    monkeypatch.setattr(CIFAR10, "test_list", [["test_batch", md5("test_batch")]])
    monkeypatch.setattr(CIFAR10, "meta", {**CIFAR10.meta, "md5": md5("batches.meta")})
    return tmp_path / "cifar", rows, labels


def test_cifar10_loader_reads_the_real_format(fake_cifar10):
    root, rows, labels = fake_cifar10
    train_x, train_y, test_x, test_y = D.load_cifar10(root)
    assert train_x.shape == (60, 3, 32, 32) and train_x.dtype == torch.uint8 and test_x.shape == (12, 3, 32, 32)
    assert torch.equal(train_x.flatten(1), torch.from_numpy(rows[:60]))  # channel planes kept in order
    assert torch.equal(test_x.flatten(1), torch.from_numpy(rows[60:]))
    assert train_y.tolist() == labels[:60].tolist() and test_y.tolist() == labels[60:].tolist()


def test_cifar10_task_whitens_with_a_cached_zca(fake_cifar10, tmp_path, monkeypatch):
    root, rows, _ = fake_cifar10
    cfg = tiny_cfg(tmp_path, "data=cifar10", f"data.root={root}", "train.batch_size=10")
    task = make_task(cfg)
    cached = list((tmp_path / "cache" / "convpool").glob("zca-*.pt"))
    assert len(cached) == 1
    mean, w = D.fit_zca(D.scale_pixels(torch.from_numpy(rows[:60])), float(cfg.data.zca_eps))
    expected = (D.scale_pixels(torch.from_numpy(rows[60:])) - mean) @ w
    assert torch.allclose(task.test_x.flatten(1), expected, rtol=1e-4, atol=1e-2)
    assert task.train_batch(5)[0].shape == (10, 3, 32, 32)

    # a second task loads the cached whitening instead of fitting again
    monkeypatch.setattr(D, "fit_zca", lambda *a: pytest.fail("ZCA refitted despite the cache"))
    assert torch.equal(make_task(cfg).test_x, task.test_x)


def test_missing_cifar10_is_one_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"CIFAR-10 not found under .*make data-cifar10.*data.download=true"):
        D.load_cifar10(tmp_path)
    (tmp_path / "cifar-10-batches-py").mkdir()
    (tmp_path / "cifar-10-batches-py" / "data_batch_1").write_bytes(b"not a pickle")
    with pytest.raises(FileNotFoundError, match="checksum"):
        D.load_cifar10(tmp_path)


def test_fit_zca_whitens_and_agrees_between_its_two_routes():
    torch.manual_seed(0)
    mixing = torch.randn(6, 6)
    x = torch.randn(4000, 6) @ mixing + 3.0
    mean, w = D.fit_zca(x, eps=1e-8)
    white = (x - mean) @ w
    assert torch.allclose(torch.cov(white.T, correction=0), torch.eye(6), atol=1e-3)
    assert torch.allclose(w, w.T, atol=1e-4)  # ZCA, not just any whitening: the symmetric one

    few = x[:4].double()  # fewer rows than dimensions: the SVD route, checked against eigh of the covariance
    _, w_svd = D.fit_zca(few, eps=0.1)
    xc = few - few.mean(0)
    evals, evecs = torch.linalg.eigh(xc.T @ xc / 4)
    w_ref = (evecs * torch.rsqrt(evals.clamp_min(0) + 0.1)) @ evecs.T
    assert torch.allclose(w_svd.double(), w_ref, atol=1e-4)


# Configs and the runner ---------------------------------------------------------------------------
@pytest.mark.parametrize("norm, lr, p", [("none", 3e-4, 1.0), ("rmsnorm", 3e-3, 1.0), ("prmsnorm", 3e-3, 0.125),
                                         ("batchnorm", 3e-3, 1.0)])
def test_paper_scale_settings(norm, lr, p):
    cfg = compose_cfg(f"norm={norm}", "scale=paper")
    assert (cfg.optim.lr, cfg.norm.p) == (lr, p)
    assert (cfg.train.steps, cfg.train.batch_size, cfg.train.eval_every) == (100_000, 100, 500)
    assert cfg.optim.schedule.name == "linear_decay" and cfg.optim.schedule.beta1_after_decay == 0.5
    assert cfg.task.model.widths == [96, 192] and cfg.task.model.width_mult == 1.0 and cfg.task.model.dropout == 0.5
    assert get_task_class(cfg.task.name) is ConvPoolTask


def test_a_command_line_p_wins_over_the_task_default():
    assert compose_cfg("norm=prmsnorm", "norm.p=0.25").norm.p == 0.25


def test_unsupported_norm_and_data_are_refused(tmp_path):
    with pytest.raises(ValueError, match="not supported"):
        build_normalization("l2norm", {}, ConvPoolTask.supported_norms, "convpool")
    with pytest.raises(ValueError, match="data=multi30k is not supported by task=convpool"):
        make_task(tiny_cfg(tmp_path, "data.name=multi30k"))


def test_a_short_run_through_the_runner_writes_test_error(tmp_path):
    from rmsnorm_repro.runner import run

    cfg = tiny_cfg(tmp_path, "norm=prmsnorm", "train.steps=4", "train.eval_every=2", "train.log_every=2",
                   "train.checkpoint_every=2")
    summary = run(cfg, tmp_path / "run")
    assert summary["status"] == "completed" and summary["p"] == 0.125
    assert {"error", "accuracy", "train_error"} <= set(summary["final"])
    lines = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in lines] == [2, 4] and all("step_ms" in r for r in lines)
    assert "error" in lines[0]


# The authors' normalizer wrapper ----------------------------------------------------------------
@pytest.mark.parametrize("norm, conv_bias, logit_norm", [
    ("none", True, nn.Identity), ("weightnorm", True, nn.Identity), ("rmsnorm", False, "RMSNorm"),
    ("prmsnorm", False, "RMSNorm"), ("layernorm", False, "LayerNorm"), ("batchnorm", False, "FeatureBatchNorm"),
])
def test_the_normalizer_wraps_every_layer_and_takes_its_bias(norm, conv_bias, logit_norm):
    """Salimans' train.py wraps all ten layers (dense 10 included) in the normalizer, whose wrapper
    (the authors' rms_norm, Salimans' batch_norm / weight_norm / no_norm) deletes the layer's bias
    and adds its own after the norm: a conv or the dense layer keeps a bias only without a norm offset."""
    cfg = compose_cfg(f"norm={norm}", "scale=paper")
    norms = build_normalization(cfg.norm.name, cfg.norm)
    model = ConvPoolCNNC(norms, widths=(8, 12))
    convs = [m for m in model.modules() if isinstance(m, nn.Conv2d)]
    assert len(convs) == 9 and all((c.bias is not None) == conv_bias for c in convs)
    assert (model.classifier.bias is not None) == conv_bias
    name = logit_norm if isinstance(logit_norm, str) else logit_norm.__name__
    assert type(model.logit_norm).__name__ == name
    if norm in ("rmsnorm", "prmsnorm"):  # the authors' RMSNormLayer: offset b, eps 1e-6 inside the root
        assert model.logit_norm.bias is not None and model.logit_norm.eps == 1e-6 and model.logit_norm.eps_inside
        assert model.logit_norm.k == (2 if norm == "prmsnorm" else 10)  # ceil(10 * 0.125) = 2 logits
        channel = next(m for m in model.modules() if isinstance(m, ChannelNorm))
        assert channel.bias is not None
    if norm == "batchnorm":
        assert model.logit_norm.eps == 1e-6  # Salimans' BatchNormLayer


def test_rmsnorm_on_the_logits_fixes_their_scale():
    """RMS over the 10 class scores: gain 1 and offset 0 give logits of RMS 1 whatever the input scale."""
    torch.manual_seed(0)
    model = ConvPoolCNNC(build_normalization("rmsnorm", {"bias": True, "eps": 1e-6, "eps_inside": True}),
                         widths=(8, 12)).eval()
    x = torch.randn(3, 3, 32, 32)
    logits = model(x)
    torch.testing.assert_close(logits.pow(2).mean(1), torch.ones(3), atol=1e-3, rtol=0)
    plain = ConvPoolCNNC(build_normalization("rmsnorm"), widths=(8, 12), norm_logits=False)
    assert isinstance(plain.logit_norm, nn.Identity) and plain.classifier.bias is not None


def test_norm_logits_is_the_paper_default_and_an_option():
    assert compose_cfg("scale=paper").task.model.norm_logits is True
    assert compose_cfg("scale=mini").task.model.norm_logits is True


# The authors' initialization and Table 9 protocol (fidelity audit N6) -------------------------------
def lasagne_glorot_bound(shape) -> float:
    """Lasagne GlorotUniform, gain 1 (Lasagne 5d3c63c lasagne/init.py:160-177, Uniform :88-89): std = sqrt(2 / ((n1 + n2) * rf))
    with n1, n2 = shape[:2] and rf the product of the rest; Uniform(std) has bound std * sqrt(3)."""
    n1, n2, rf = shape[0], shape[1], int(np.prod(shape[2:])) if len(shape) > 2 else 1
    return float(np.sqrt(2.0 / ((n1 + n2) * rf)) * np.sqrt(3.0))


@pytest.mark.parametrize("norm, init", [("rmsnorm", "glorot_uniform"), ("prmsnorm", "glorot_uniform"),
                                        ("layernorm", "glorot_uniform"), ("batchnorm", "normal"), ("none", "he")])
def test_paper_scale_initializes_each_norm_as_the_authors_layers(norm, init):
    cfg = compose_cfg("scale=paper", f"norm={norm}")
    assert cfg.task.model.init == init
    torch.manual_seed(0)
    model = make_task_model(cfg)
    for layer in [m for m in model.modules() if isinstance(m, (nn.Conv2d, nn.Linear))]:
        w = layer.weight.detach().double()
        if init == "glorot_uniform":  # the wrapped Lasagne layer's default, never reset by RMSNormLayer
            bound = lasagne_glorot_bound(tuple(w.shape))
            assert w.abs().max() <= bound and w.abs().max() > 0.95 * bound
            assert w.std().item() == pytest.approx(bound / np.sqrt(3.0), rel=0.05)
        elif init == "normal":  # Salimans' BatchNormLayer: incoming.W <- Normal(0.05) (weight_norm nn.py:111)
            assert w.std().item() == pytest.approx(0.05, rel=0.05)
    assert compose_cfg("scale=mini", f"norm={norm}").task.model.init == "he"  # mini's committed recipe


def make_task_model(cfg) -> nn.Module:
    m = cfg.task.model
    norms = build_normalization(cfg.norm.name, cfg.norm, ConvPoolTask.supported_norms, "convpool")
    return ConvPoolCNNC(norms, tuple(m.widths), int(m.num_classes), norm_logits=bool(m.norm_logits),
                        init=str(m.init), init_std=float(m.init_std))


def test_train_batch_error_is_the_mean_error_of_the_training_batches(tmp_path):
    """weight_norm train.py:103,137-141: train_err = mean over the epoch's batches of each batch's error,
    computed in the training pass (noise and dropout on)."""
    cfg = tiny_cfg(tmp_path)
    cfg.task.train_batch_error = True  # on at paper scale
    task = make_task(cfg)
    torch.manual_seed(0)
    model = task.build_model().train()
    errors = []
    for step in range(3):
        x, y = task.train_batch(step)
        torch.manual_seed(step)
        task.loss(model, (x, y))
        torch.manual_seed(step)  # the same noise and dropout masks again: the batch's own training-pass error
        errors.append((model(x).argmax(1) != y).double().mean().item())
    model.eval()
    out = task.evaluate(model, "valid")
    assert out["train_batch_error"] == pytest.approx(100 * np.mean(errors))
    assert "train_error" in out  # the eval-mode measurement stays, as a second column
    assert task.evaluate(model, "test")["train_batch_error"] == out["train_batch_error"]  # the last interval's
