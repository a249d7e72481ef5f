"""NormLSTM: the cell math against torch's LSTM, padding invariance, BN-LSTM per-step statistics."""
import pytest
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from rmsnorm_repro.nn.lstm import NormLSTM, reverse_within_length
from rmsnorm_repro.norms import build_normalization

LENGTHS = [5, 2, 4]


def padded_batch(input_size: int = 3, extra: int = 0, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Sequences of LENGTHS with random values in the padding (which must not matter)."""
    g = torch.Generator().manual_seed(seed)
    T = max(LENGTHS) + extra
    x = torch.randn(len(LENGTHS), T, input_size, generator=g)
    mask = torch.arange(T).unsqueeze(0) < torch.tensor(LENGTHS).unsqueeze(1)
    return x, mask


def test_reverse_within_length_keeps_padding_in_place():
    x = torch.arange(8.0).view(4, 2)  # (T=4, B=2)
    out = reverse_within_length(x, torch.tensor([3, 1]))
    assert out[:, 0].tolist() == [4.0, 2.0, 0.0, 6.0]
    assert out[:, 1].tolist() == [1.0, 3.0, 5.0, 7.0]


@pytest.mark.parametrize("bidirectional", [False, True])
def test_no_norm_equals_torch_lstm(bidirectional):
    """norm=none is exactly torch.nn.LSTM (gate order i, f, g, o), padding handled like packing."""
    torch.manual_seed(0)
    lstm = NormLSTM(3, 4, build_normalization("none"), max_steps=8, bidirectional=bidirectional)
    ref = nn.LSTM(3, 4, batch_first=True, bidirectional=bidirectional)
    with torch.no_grad():
        for suffix, direction in [("", lstm.fwd), ("_reverse", lstm.bwd)][: 1 + bidirectional]:
            getattr(ref, f"weight_ih_l0{suffix}").copy_(direction.input_proj.weight)
            getattr(ref, f"weight_hh_l0{suffix}").copy_(direction.hidden_proj.weight)
            getattr(ref, f"bias_ih_l0{suffix}").copy_(direction.bias)
            getattr(ref, f"bias_hh_l0{suffix}").zero_()
    x, mask = padded_batch()
    out, last = lstm(x, mask)
    packed, (h_n, _) = ref(pack_padded_sequence(x, torch.tensor(LENGTHS), batch_first=True, enforce_sorted=False))
    ref_out, _ = pad_packed_sequence(packed, batch_first=True)
    torch.testing.assert_close(out, ref_out, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(last, torch.cat(list(h_n), dim=-1), atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("norm", ["none", "layernorm", "rmsnorm", "prmsnorm", "batchnorm"])
def test_padding_does_not_change_results(norm):
    """Each sequence alone (no padding) == the same sequence inside a longer padded batch.

    BatchNorm in eval mode: per-step running statistics line up because the backward direction
    reverses each sequence within its own length.
    """
    torch.manual_seed(0)
    lstm = NormLSTM(3, 8, build_normalization(norm, {"p": 0.25}), max_steps=12, bidirectional=True).eval()
    with torch.no_grad():  # non-trivial running statistics and gains
        for p in lstm.parameters():
            p.add_(0.1 * torch.randn_like(p))
        for m in lstm.modules():
            if isinstance(m, nn.BatchNorm1d):
                m.running_mean.normal_()
                m.running_var.uniform_(0.5, 2.0)
    x, mask = padded_batch(extra=3)
    out, last = lstm(x, mask)
    for b, n in enumerate(LENGTHS):
        alone_out, alone_last = lstm(x[b : b + 1, :n], None)
        torch.testing.assert_close(out[b, :n], alone_out[0], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(last[b], alone_last[0], atol=1e-5, rtol=1e-5)
        assert torch.all(out[b, n:] == 0)


def test_bn_lstm_keeps_statistics_per_time_step():
    """norm=batchnorm: each of the three norms has its own batch statistics for every step."""
    torch.manual_seed(0)
    lstm = NormLSTM(3, 4, build_normalization("batchnorm"), max_steps=10)
    x = torch.randn(16, 6, 3) + torch.linspace(0, 5, 6).view(1, 6, 1)  # inputs drift over time
    lstm.train()
    lstm(x, None)
    for norm in (lstm.fwd.norm_x, lstm.fwd.norm_h, lstm.fwd.norm_c):
        tracked = [int(s.num_batches_tracked) for s in norm.stats]
        assert tracked == [1] * 6 + [0] * 4  # steps 0-5 saw one batch; 6-9 never ran
    means = torch.stack([s.running_mean for s in lstm.fwd.norm_x.stats[:6]])
    assert (means[1:] - means[:-1]).abs().max() > 1e-3  # different statistics at different steps
    assert lstm.fwd.norm_h.weight.detach().eq(0.1).all()  # recurrent BN gain init (Cooijmans et al.)


@pytest.mark.parametrize("norm", ["none", "layernorm", "rmsnorm", "prmsnorm", "batchnorm"])
def test_gradients_are_finite_from_a_zero_state(norm):
    """h0 = 0 makes W_h h0 an all-zero row at step 0: no NaN may come out of its norm."""
    torch.manual_seed(0)
    lstm = NormLSTM(3, 4, build_normalization(norm), max_steps=8, bidirectional=True)
    x, mask = padded_batch()
    out, last = lstm(x, mask)
    (out.sum() + last.sum()).backward()
    assert all(torch.isfinite(p.grad).all() for p in lstm.parameters() if p.grad is not None)
