"""optim.clip_mode: the three gradient clipping rules of the authors' toolkits, in runner/step.py."""
import pytest
import torch
from omegaconf import OmegaConf

from rmsnorm_repro.errors import ConfigError
from rmsnorm_repro.runner.config import check_config
from rmsnorm_repro.runner.step import clip_gradients, train_step
from runner_fixtures.helpers import tiny


def params_with_grads(*grads: list[float]) -> list[torch.nn.Parameter]:
    params = []
    for g in grads:
        p = torch.nn.Parameter(torch.zeros(len(g)))
        p.grad = torch.tensor(g)
        params.append(p)
    return params


def test_global_is_torchs_clip_grad_norm():
    a, b = params_with_grads([3.0, 4.0], [0.0, 12.0]), params_with_grads([3.0, 4.0], [0.0, 12.0])
    clip_gradients(a, 2.0, "global")
    torch.nn.utils.clip_grad_norm_(b, 2.0)
    for x, y in zip(a, b):
        torch.testing.assert_close(x.grad, y.grad)
    assert abs(torch.cat([p.grad for p in a]).norm().item() - 2.0) < 1e-5


def test_per_tensor_is_ivendrovs_maxnorm():
    """Each gradient on its own: norm 5 -> 2, norm 12 -> 2, norm 1 stays (order-embedding utils.maxnorm)."""
    params = params_with_grads([3.0, 4.0], [0.0, 12.0], [0.6, 0.8])
    clip_gradients(params, 2.0, "per_tensor")
    torch.testing.assert_close(params[0].grad, torch.tensor([1.2, 1.6]))
    torch.testing.assert_close(params[1].grad, torch.tensor([0.0, 2.0]))
    torch.testing.assert_close(params[2].grad, torch.tensor([0.6, 0.8]))


def test_global_sqrt_is_cooijmans_rule():
    """attentive_reader.py: g2 = global norm; if g2 > clip**2: g * clip / sqrt(g2 + 1e-8)."""
    big = params_with_grads([300.0, 400.0])  # global norm 500 > 10**2 -> scaled to 10 * sqrt(500)
    clip_gradients(big, 10.0, "global_sqrt")
    assert big[0].grad.norm().item() == pytest.approx(10.0 * 500.0 ** 0.5, rel=1e-5)
    mid = params_with_grads([30.0, 40.0])  # norm 50: above `global`'s 10, below 10**2 -> untouched
    clip_gradients(mid, 10.0, "global_sqrt")
    torch.testing.assert_close(mid[0].grad, torch.tensor([30.0, 40.0]))
    with pytest.raises(ValueError, match="clip_mode"):
        clip_gradients(mid, 10.0, "local")


def test_train_step_clips_each_tensor_under_per_tensor(tmp_path):
    from rmsnorm_repro.norms import build_normalization
    from runner_fixtures.tiny_task import TinyTask

    cfg = tiny(tmp_path, "optim.clip=1e-3", "+optim.clip_mode=per_tensor")
    task = TinyTask(cfg, build_normalization("none"), torch.device("cpu"))
    torch.manual_seed(0)
    model = task.build_model()
    params = [p for p in model.parameters() if p.requires_grad]
    seen = {}

    class Spy(torch.optim.SGD):
        def step(self, closure=None):
            seen["norms"] = [p.grad.norm().item() for p in params if p.grad is not None]
            return super().step(closure)

    train_step(task, model, Spy(params, lr=0.0), task.train_batch(0), params, clip=cfg.optim.clip,
               clip_mode=cfg.optim.clip_mode)
    assert len(seen["norms"]) > 1 and all(n == pytest.approx(1e-3, rel=1e-4) for n in seen["norms"])


@pytest.mark.parametrize("mode, ok", [("global", True), ("per_tensor", True), ("global_sqrt", True), (None, True),
                                      ("perTensor", False), (3, False)])
def test_check_config_accepts_only_known_modes(tmp_path, mode, ok):
    cfg = tiny(tmp_path)
    OmegaConf.set_struct(cfg, False)
    cfg.optim.clip_mode = mode
    if ok:
        check_config(cfg)
    else:
        with pytest.raises(ConfigError, match="optim.clip_mode"):
            check_config(cfg)
