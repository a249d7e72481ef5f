"""formulas.rms_norm in float16: an all-zero row's input gradient (the GRU's U h0 with h0 = 0)."""
import pytest
import torch

from rmsnorm_repro.norms import formulas


@pytest.mark.parametrize("eps_inside", [False, True])
@pytest.mark.parametrize("k", [16, 4])
def test_float16_zero_row_gradient_is_finite_and_exact_elsewhere(eps_inside, k):
    """dy scaled as GradScaler scales it: the zero row's gradient (g dy / eps: inf in float16) saturates
    with its sign; every other row equals the float64 reference rounded to float16."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(5, 16, generator=g).half()
    x[2] = 0.0
    w = 1 + 0.5 * torch.randn(16, generator=g)
    dy = (torch.randn(5, 16, generator=g) * 1024).half()
    xi = x.clone().requires_grad_()
    (dx,) = torch.autograd.grad(formulas.rms_norm(xi, w, None, k, 1e-8, eps_inside), xi, dy)
    xr = x.double().requires_grad_()
    (want,) = torch.autograd.grad(formulas.rms_norm(xr, w.double(), None, k, 1e-8, eps_inside), xr, dy.double())
    assert dx.dtype == torch.float16 and dx.isfinite().all()
    assert (want[2].abs() > formulas.FLOAT16_MAX).all()  # what would have been inf
    assert torch.equal(dx[2].sign(), want[2].sign().half()) and (dx[2].abs() == formulas.FLOAT16_MAX).all()
    rows = [0, 1, 3, 4]
    torch.testing.assert_close(dx[rows], want[rows].half(), rtol=2e-3, atol=1e-3)


def test_only_float16_rows_with_an_all_zero_statistic_saturate():
    x = torch.zeros(2, 8, dtype=torch.float16)
    x[1, 0] = 1e-4  # tiny but nonzero: its overflow is GradScaler's to see
    xi = x.clone().requires_grad_()
    (dx,) = torch.autograd.grad(formulas.rms_norm(xi, None, None, 8, 1e-8, False), xi, torch.full((2, 8), 1e3).half())
    assert dx[0].isfinite().all() and not dx[1].isfinite().all()
