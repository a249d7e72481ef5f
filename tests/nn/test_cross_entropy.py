"""The fused CPU cross-entropy (nn/cross_entropy.py, cross_entropy_cpu.cpp) against F.cross_entropy."""
import pytest
import torch
import torch.nn.functional as F

from rmsnorm_repro.nn import cross_entropy

TOLERANCE = {torch.float64: {"rtol": 1e-12, "atol": 1e-12}, torch.float32: {"rtol": 1e-5, "atol": 1e-6}}


@pytest.fixture(autouse=True)
def kernel():
    if cross_entropy.load() is None:
        pytest.skip("no C++ toolchain here: the loss is F.cross_entropy")
    yield
    cross_entropy.fused = True


def _both(logits, target, ignore, smoothing):
    results = []
    for fused in (True, False):
        cross_entropy.fused = fused
        x = logits.clone().requires_grad_()
        loss = cross_entropy.smoothed_cross_entropy(x, target, ignore, smoothing)
        (loss * 0.7).backward()
        results.append((loss, x.grad, loss.grad_fn.name()))
    return results


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
@pytest.mark.parametrize("vocab", [7, 1001])  # shorter than a vector, and a vector multiple plus a tail
def test_fused_loss_and_gradient_equal_torchs(dtype, smoothing, vocab):
    gen = torch.Generator().manual_seed(vocab)
    logits = 4 * torch.randn(23, vocab, generator=gen, dtype=dtype)
    target = torch.randint(1, vocab, (23,), generator=gen)
    target[::4] = 0  # padding rows: no loss, zero gradient
    (loss, grad, name), (ref_loss, ref_grad, ref_name) = _both(logits, target, 0, smoothing)
    assert "SmoothedCrossEntropy" in name and "SmoothedCrossEntropy" not in ref_name
    assert loss.shape == ref_loss.shape == () and loss.dtype is dtype
    torch.testing.assert_close(loss, ref_loss, **TOLERANCE[dtype])
    torch.testing.assert_close(grad, ref_grad, **TOLERANCE[dtype])
    assert grad[::4].abs().max() == 0


def test_non_finite_logits_give_a_non_finite_loss_as_torchs_does():
    logits = torch.randn(4, 40)
    logits[2, 5] = float("nan")
    (loss, _, _), (ref_loss, _, _) = _both(logits, torch.tensor([1, 2, 3, 4]), 0, 0.1)
    assert loss.isnan() and ref_loss.isnan()


def test_an_out_of_range_target_is_an_error():
    with pytest.raises(RuntimeError, match="out of bounds"):
        cross_entropy.smoothed_cross_entropy(torch.randn(3, 10), torch.tensor([1, 10, 2]), 0, 0.1)


def test_elsewhere_it_is_torchs_own():
    logits, target = torch.randn(5, 9).bfloat16(), torch.tensor([1, 2, 0, 4, 5])
    loss = cross_entropy.smoothed_cross_entropy(logits, target, 0, 0.1)
    assert loss.dtype is torch.bfloat16  # F.cross_entropy ran: the kernel takes float32/float64 only
    assert torch.equal(loss, F.cross_entropy(logits, target, ignore_index=0, label_smoothing=0.1, reduction="sum"))
