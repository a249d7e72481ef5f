"""The norm factory: what each norm name hands a model, and the errors for bad requests."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from torch import nn
from torch.nn.utils import parametrize

from rmsnorm_repro.norms import (
    NORM_NAMES, ChannelNorm, FeatureBatchNorm, L2Norm, LayerNorm, RMSNorm, StepBatchNorm, build_normalization,
)
from rmsnorm_repro.norms.base import SharedStepNorm

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
ALL = ("none", "layernorm", "rmsnorm", "prmsnorm", "l2norm", "weightnorm", "batchnorm")


def test_every_paper_norm_is_registered():
    assert set(NORM_NAMES) == set(ALL)


def test_unknown_norm_is_a_clear_error():
    with pytest.raises(ValueError, match=r"unknown norm 'groupnorm'; choose one of: .*rmsnorm.*prmsnorm"):
        build_normalization("groupnorm")


def test_unsupported_norm_names_the_task_and_what_it_supports():
    with pytest.raises(ValueError, match=r"norm=batchnorm is not supported by transformer; supported: none, rmsnorm"):
        build_normalization("batchnorm", supported=("none", "rmsnorm"), task="transformer")
    assert build_normalization("rmsnorm", supported=("none", "rmsnorm"), task="transformer").name == "rmsnorm"


@pytest.mark.parametrize(
    "name,kind",
    [("none", nn.Identity), ("weightnorm", nn.Identity), ("layernorm", LayerNorm), ("rmsnorm", RMSNorm),
     ("prmsnorm", RMSNorm), ("l2norm", L2Norm), ("batchnorm", FeatureBatchNorm)],
)
def test_act_gives_the_named_norm_over_the_feature_size(name, kind):
    norm = build_normalization(name).act(12)
    assert type(norm) is kind
    x = torch.randn(3, 4, 12)
    assert norm(x).shape == x.shape
    assert all(p.shape == (12,) for p in norm.parameters())


@pytest.mark.parametrize(
    "name,kind",
    [("none", nn.Identity), ("weightnorm", nn.Identity), ("layernorm", ChannelNorm), ("rmsnorm", ChannelNorm),
     ("prmsnorm", ChannelNorm), ("batchnorm", nn.BatchNorm2d)],
)
def test_channels_gives_a_per_channel_norm_for_conv_maps(name, kind):
    norm = build_normalization(name).channels(5)
    assert type(norm) is kind
    assert all(p.shape == (5,) for p in norm.parameters())
    x = torch.randn(2, 5, 3, 4)
    assert norm(x).shape == x.shape


def test_options_reach_the_modules():
    rms = build_normalization("prmsnorm", {"name": "prmsnorm", "p": 0.0625, "eps": 1e-5, "eps_inside": True, "bias": True}).act(40)
    assert (rms.p, rms.k, rms.eps, rms.eps_inside, rms.bias is not None) == (0.0625, 3, 1e-5, True, True)
    ln = build_normalization("layernorm", {"eps": 1e-6, "bias": False}).act(8)
    assert (ln.eps, ln.bias) == (1e-6, None)
    bn = build_normalization("batchnorm", {"eps": 1e-3, "momentum": 0.5}).act(8)
    assert (bn.eps, bn.momentum) == (1e-3, 0.5)
    assert build_normalization("rmsnorm", {"conv_axes": "chw"}).channels(3).axes == "chw"
    described = build_normalization("rmsnorm", {"name": "rmsnorm", "p": 0.5}).describe()
    assert {"name": "rmsnorm", "p": 0.5}.items() <= described.items()  # what a run's summary records


def test_out_of_range_p_in_the_config_fails_when_the_factory_is_built():
    with pytest.raises(ValueError, match=r"\(0, 1\]"):
        build_normalization("prmsnorm", {"p": 0.0})


@pytest.mark.parametrize("name", ALL)
def test_layers_are_weight_normalized_only_under_weightnorm(name):
    norms = build_normalization(name)
    linear = norms.linear(6, 4, bias=False)
    conv = norms.conv2d(3, 8, 3, padding=1, stride=2)
    assert isinstance(linear, nn.Linear) and isinstance(conv, nn.Conv2d)
    assert linear.bias is None and conv.padding == (1, 1) and conv.stride == (2, 2)
    assert conv(torch.randn(1, 3, 8, 8)).shape == (1, 8, 4, 4)
    weight_normed = name == "weightnorm"
    assert parametrize.is_parametrized(linear, "weight") == weight_normed
    assert parametrize.is_parametrized(conv, "weight") == weight_normed
    if weight_normed:  # one gain per output unit, a direction v of the full weight shape
        assert linear.parametrizations.weight.original0.shape == (4, 1)
        assert conv.parametrizations.weight.original0.shape == (8, 1, 1, 1)
        assert conv.parametrizations.weight.original1.shape == (8, 3, 3, 3)


@pytest.mark.parametrize("name", [n for n in ALL if n != "batchnorm"])
def test_step_norm_shares_one_norm_over_time(name):
    norms = build_normalization(name)
    step = norms.step_norm(6, max_steps=4)
    assert isinstance(step, SharedStepNorm)
    x = torch.randn(5, 6)
    assert torch.equal(step(x, 0), step(x, 3)) and torch.equal(step(x, 0), step.norm(x))
    sequence = torch.randn(3, 5, 6)
    assert torch.equal(step.forward_sequence(sequence), step.norm(sequence))


def test_batchnorm_step_norm_is_recurrent_batchnorm():
    step = build_normalization("batchnorm", {"step_gain_init": 0.1}).step_norm(6, max_steps=4)
    assert isinstance(step, StepBatchNorm) and len(step.stats) == 4
    assert torch.equal(step.weight, torch.full((6,), 0.1))


@pytest.mark.parametrize("name", ALL)
def test_each_norm_config_builds_its_factory(name):
    """configs/norm/<name>.yaml composes and the factory accepts every key it sets."""
    with initialize_config_dir(config_dir=str(CONFIGS), version_base=None):
        cfg = compose(overrides=[f"+norm={name}"]).norm
    assert cfg.name == name
    norms = build_normalization(cfg.name, cfg)
    assert norms.name == name
    assert norms.act(32)(torch.randn(2, 32)).shape == (2, 32)
    assert norms.channels(4)(torch.randn(2, 4, 3, 3)).shape == (2, 4, 3, 3)
    if name == "prmsnorm":
        assert norms.act(32).k == 2  # the config's default p = 6.25%
