"""DelayedScalingFP8Linear quantises a sequence of calls as TE's DelayedScaling does.

The reference below is written from TE 2.3's delayed_scaling.cu (kernel_bulk) and the cast
kernel's amax fold, in numpy float32, independently of mmaemu.integrations.delayed_scaling."""
import numpy as np
import pytest
import torch

import mmaemu
from mmaemu.integrations.delayed_scaling import DelayedScalingFP8Linear, DelayedScalingState
from mmaemu.testing import assert_bitwise_equal

F32 = np.float32


class ReferenceDelayedScaling:
    """One tensor's scale and amax history, as TE keeps them."""

    def __init__(self, length, algo="max", margin=0):
        self.hist = np.zeros(length, dtype=F32)
        self.scale = F32(1.0)
        self.algo = algo
        self.scaled_max = F32(448.0) * F32(2.0) ** F32(-margin)

    def cast(self, x):
        a = np.abs(x.astype(F32))
        self.hist[0] = max(self.hist[0], F32(np.nanmax(np.where(np.isnan(a), 0, a), initial=0)))
        return self.scale

    def update(self):
        L, last = len(self.hist), self.hist[0]
        amax = F32(0)
        if last != 0:
            old = self.hist.copy()
            for i in range(L):
                a = old[i + 1] if i < L - 1 else last
                amax = max(amax, a)
                self.hist[i] = a if i > 0 else 0
        if self.algo == "most_recent":
            amax = last
        if np.isfinite(amax) and amax > 0:
            with np.errstate(over="ignore"):
                s = F32(self.scaled_max / amax)
            self.scale = F32(np.finfo(F32).max) if np.isinf(s) else s


def calls(n, k, seed=0):
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        x = torch.randn(16, k, generator=g) * (2.0 ** ((i * 7) % 11 - 5))
        if i == 3:
            x = torch.zeros(16, k)                 # amax 0: no roll, scale kept
        if i == 5:
            x[0, 0] = float("nan")                 # NaN ignored by the amax
        if i == 6:
            x = torch.full((16, k), 2.0 ** -130)   # tiny amax: 448 / amax is inf -> FLT_MAX
        out.append(x.to(torch.bfloat16))
    return out


@pytest.mark.parametrize("length,algo", [(16, "max"), (4, "max"), (3, "most_recent"), (1, "max")])
def test_sequence_matches_reference(length, algo):
    g = torch.Generator().manual_seed(1)
    w = (torch.randn(48, 32, generator=g) / 8).to(torch.bfloat16)
    layer = DelayedScalingFP8Linear(w, DelayedScalingState(length, algo), "hopper-te", splitk=1)
    ref_x, ref_w = ReferenceDelayedScaling(length, algo), ReferenceDelayedScaling(length, algo)
    scales = []
    for x in calls(20, 32):
        sx, sw = ref_x.cast(x.float().numpy()), ref_w.cast(w.float().numpy())
        assert float(layer.state.scale[0]) == float(sx) and float(layer.state.scale[1]) == float(sw)
        with torch.enable_grad():
            y = layer(x)
        ref_x.update()
        ref_w.update()
        np.testing.assert_array_equal(layer.state.amax_history[:, 0].numpy(), ref_x.hist)
        sx_t, sw_t = torch.tensor(float(sx)), torch.tensor(float(sw))
        xq = torch.clamp(x.float() * sx_t, -448, 448).to(torch.float8_e4m3fn)
        wq = torch.clamp(w.float() * sw_t, -448, 448).to(torch.float8_e4m3fn)
        expected = mmaemu.scaled_mm(xq, wq.t(), 1 / sx_t, 1 / sw_t, out_dtype=torch.bfloat16,
                                    use_fast_accum=True, profile="hopper-te", splitk=1)
        assert_bitwise_equal(y, expected)
        scales.append(float(sx))
    assert len(set(scales)) > 3                    # the scales did move from call to call
    if algo == "most_recent" or length == 1:
        assert float(np.finfo(F32).max) in scales


def test_no_update_without_grad_mode():
    w = torch.ones(16, 16, dtype=torch.bfloat16)
    layer = DelayedScalingFP8Linear(w, DelayedScalingState(16), splitk=1)
    with torch.inference_mode():
        for x in calls(3, 16):
            layer(x)
    assert layer.state.scale.tolist() == [1.0, 1.0]
    # Row 0 kept the largest amax of the three calls (TE's atomicMax fold).
    assert float(layer.state.amax_history[0, 0]) == max(float(x.float().abs().max())
                                                        for x in calls(3, 16))


def test_checkpoint_history_length_is_adjusted_and_bad_states_refused():
    h = torch.arange(1, 31, dtype=torch.float32).reshape(10, 3)
    st = DelayedScalingState(4, scale=torch.tensor([2.0, 3.0, 1.0]), amax_history=h)
    assert st.amax_history.tolist() == h[:4, :2].tolist()
    st = DelayedScalingState(12, scale=torch.tensor([2.0, 3.0, 1.0]), amax_history=h)
    assert st.amax_history[10:].abs().sum() == 0 and st.amax_history.shape == (12, 2)
    with pytest.raises(ValueError):
        DelayedScalingState(16, algo="mean")
    with pytest.raises(ValueError):
        DelayedScalingState(0)
    with pytest.raises(ValueError):
        DelayedScalingState(16, scale=torch.tensor([0.0, 1.0]))
    layer = DelayedScalingFP8Linear(torch.ones(16, 16), splitk=1)
    with pytest.raises(mmaemu.UnsupportedFeatureError):
        layer(torch.ones(2, 16, requires_grad=True))


def test_shared_buffer_updates_every_member_at_each_exit():
    """TE keeps one amax buffer per recipe: a grad-mode exit of one layer also updates a layer
    that ran under no_grad since its last update, and a layer joins at its first call."""
    g = torch.Generator().manual_seed(2)
    ws = [(torch.randn(16, 32, generator=g) / 4).to(torch.bfloat16) for _ in range(3)]
    group = []
    layers = [DelayedScalingFP8Linear(w, DelayedScalingState(4), group=group, splitk=1)
              for w in ws]
    refs = [(ReferenceDelayedScaling(4), ReferenceDelayedScaling(4)) for _ in ws]
    joined = []
    xs = calls(12, 32, seed=3)
    # (layer, grad mode): no_grad calls of 0 and 1, then grad-mode calls; layer 2 joins late.
    schedule = [(0, False), (1, False), (0, True), (1, True), (0, False), (1, True),
                (2, True), (0, True), (1, False), (2, True), (0, True), (1, True)]
    for (i, grad), x in zip(schedule, xs):
        rx, rw = refs[i]
        if i not in joined:
            joined.append(i)
        sx, sw = rx.cast(x.float().numpy()), rw.cast(ws[i].float().numpy())
        assert layers[i].state.scale.tolist() == [float(sx), float(sw)]
        with torch.set_grad_enabled(grad):
            layers[i](x)
        if grad:
            for j in joined:
                refs[j][0].update()
                refs[j][1].update()
        for j in joined:
            np.testing.assert_array_equal(layers[j].state.amax_history[:, 0].numpy(),
                                          refs[j][0].hist)
    assert [st is l.state for st, l in zip(group, layers)] == [True, True, True]
