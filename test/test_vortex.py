"""The real Evo 2 model code (PyPI vtx = vortex, evo2 for its configs) with emulated FP8
projections on the CPU. Skipped when vtx or evo2 is not installed (CI installs them)."""
import importlib.util
import os
import pathlib
import runpy
import subprocess
import sys

import pytest
import torch

import mmaemu
from mmaemu.integrations.delayed_scaling import DelayedScalingFP8Linear
from mmaemu.nn import EmulatedFP8Linear, quantize_e4m3, swap_fp8_linears
from mmaemu.testing import assert_bitwise_equal

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("vortex") is None or importlib.util.find_spec("evo2") is None,
    reason="optional dependency: pip install --no-deps vtx evo2 (see docs/evo2.md)")

ROOT = pathlib.Path(__file__).resolve().parents[1]
# the example's model size, read from the example itself (not a module on any path)
TINY = runpy.run_path(str(ROOT / "examples" / "evo2_tiny.py"))["TINY"]


@pytest.fixture(autouse=True)
def _cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)        # vortex.logging opens activations_debug.log in the cwd


def tiny_config(**extra):
    from mmaemu.integrations import vortex as mv
    return mv.evo2_config("evo2-1b-8k", **{**TINY, **extra})


def test_example_runs_and_projections_equal_scaled_mm(tmp_path):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    r = subprocess.run([sys.executable, str(ROOT / "examples" / "evo2_tiny.py")], cwd=tmp_path,
                       env=env, capture_output=True, text=True, timeout=600)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert "16 projection calls (M = 16 after vortex's padding) equal direct mmaemu.scaled_mm " \
           "calls bit for bit" in out, out
    assert "S=1 scheme='none' source='explicit'" in out, out
    lines = [l for l in out.splitlines() if l.startswith("pass ")]
    hashes = [l.split("sha256 ")[1].split(";")[0] for l in lines]
    # inference_mode keeps the scales; each grad-mode pass moves them (delayed scaling).
    assert len(hashes) == 4 and hashes[0] == hashes[1] and len(set(hashes[1:])) == 3, out
    assert "blocks.0.projections (1, 1), blocks.4.projections (1, 1)" in lines[2], out
    assert "blocks.4.projections (1, 1)" not in lines[3], out


def test_striped_hyena_projections_in_process():
    from mmaemu.integrations import vortex as mv
    torch.manual_seed(0)
    model = mv.striped_hyena(tiny_config(), splitk=1)
    proj = model.blocks[0].projections
    assert isinstance(proj, DelayedScalingFP8Linear)
    seen = []
    proj.register_forward_hook(lambda m, a, out: seen.append((a[0].clone(), out.clone())))
    with torch.inference_mode():
        model(torch.randint(0, 512, (1, 5)))
    x, y = seen[0]
    assert x.shape == (1, 16, 64)                      # vortex padded 5 -> 16
    one = torch.tensor(1.0)
    expected = mmaemu.scaled_mm(quantize_e4m3(x, one).reshape(16, 64),
                                quantize_e4m3(proj.weight, one).t(), one, one,
                                out_dtype=torch.bfloat16, use_fast_accum=True,
                                profile="hopper-te", splitk=1)
    assert_bitwise_equal(y.reshape(16, -1), expected)
    with pytest.raises(ValueError, match="already emulated"):
        mv.emulate_fp8_projections(model)
    with pytest.raises(ValueError, match="use_flash_attn"):
        mv.striped_hyena(tiny_config(use_flash_attn=True))


def test_states_from_checkpoint_extra_state():
    from test_te_state import as_te2_tensor, te_state
    from mmaemu.integrations import vortex as mv
    ckpt = {"blocks.0.projections._extra_state": as_te2_tensor(te_state(history_len=1024)),
            "blocks.1.projections._extra_state": as_te2_tensor(None),
            "blocks.0.projections.weight": torch.zeros(1)}
    states = mv.states_from_checkpoint(ckpt)
    assert list(states) == ["blocks.0.projections"]
    st = states["blocks.0.projections"]
    assert st.scale.tolist() == [112.0, 1792.0] and st.amax_history.shape == (16, 2)
    torch.manual_seed(0)
    model = mv.striped_hyena(tiny_config(), states=states, splitk=1)
    assert model.blocks[0].projections.state is st
    assert model.blocks[1].projections.state.scale.tolist() == [1.0, 1.0]
    with pytest.raises(KeyError, match="blocks.9.projections"):
        mv.striped_hyena(tiny_config(), states={"blocks.9.projections": st}, splitk=1)
    with pytest.raises(ValueError, match="refusing"):
        mv.states_from_checkpoint({"blocks.0.projections._extra_state": b"\x80\x04cos\nsystem\n."})


def test_swap_fp8_linears_on_vortex_te_less_telinear():
    from mmaemu.integrations import vortex as mv
    mv.install_cpu_shims()
    from vortex.model.layers import TELinear
    from vortex.model.model import StripedHyena
    cfg = tiny_config(use_fp8_input_projections=False)
    torch.manual_seed(0)
    model = StripedHyena(cfg)
    model.to_bfloat16_except_pr_lc()
    assert isinstance(model.blocks[0].projections, TELinear)
    assert not isinstance(model.blocks[0].projections, torch.nn.Linear)
    w = model.blocks[0].projections.weight.detach().clone()
    names = swap_fp8_linears(model, {"blocks.0.projections": (30.0, 900.0)}, splitk=1)
    assert names == ["blocks.0.projections"]
    layer = model.blocks[0].projections
    assert isinstance(layer, EmulatedFP8Linear)
    x = (torch.randn(16, 64) / 4).to(torch.bfloat16)
    sx, sw = torch.tensor(30.0), torch.tensor(900.0)
    with torch.inference_mode():
        assert_bitwise_equal(layer(x), mmaemu.scaled_mm(
            quantize_e4m3(x, sx), quantize_e4m3(w, sw).t(), 1 / sx, 1 / sw,
            out_dtype=torch.bfloat16, use_fast_accum=True, profile="hopper-te", splitk=1))
        logits, _ = model(torch.randint(0, 512, (1, 16)))    # vortex takes the tensor it returns
    assert logits.shape == (1, 16, 512)
    with pytest.raises(KeyError, match="blocks.0.filter"):
        swap_fp8_linears(model, {"blocks.0.filter": (1.0, 1.0)})   # no 2-D weight


@pytest.mark.parametrize("interleaved", [False, True])
def test_cpu_rotary_matches_vortex_torch_reference(interleaved):
    from mmaemu.integrations import vortex as mv
    mv.install_cpu_shims()
    from vortex.model.rotary import apply_rotary_emb_torch
    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 7, 3, 16, generator=g)
    cos, sin = torch.randn(9, 6, generator=g), torch.randn(9, 6, generator=g)  # rotary dim 12
    assert_bitwise_equal(mv.apply_rotary(x, cos, sin, interleaved=interleaved),
                         apply_rotary_emb_torch(x, cos[:7], sin[:7], interleaved))
    off = torch.tensor([0, 2])
    got = mv.apply_rotary(x, cos, sin, seqlen_offsets=off, interleaved=interleaved,
                          conjugate=True)
    for b in range(2):
        assert_bitwise_equal(got[b:b + 1], apply_rotary_emb_torch(
            x[b:b + 1], cos[off[b]:off[b] + 7], -sin[off[b]:off[b] + 7], interleaved))
    y = x.clone()
    assert mv.apply_rotary(y, cos, sin, inplace=True) is y
    with pytest.raises(NotImplementedError):
        mv.apply_rotary(x, cos, sin, cu_seqlens=torch.tensor([0, 7]), max_seqlen=7)


def test_checkpoint_weights_and_fp8_states_are_loaded():
    from test_te_state import as_te2_tensor, te_state
    from mmaemu.integrations import vortex as mv
    torch.manual_seed(5)
    source = mv.striped_hyena(tiny_config(), splitk=1)
    ckpt = {k: v for k, v in source.state_dict().items() if ".projections." not in k}
    g = torch.Generator().manual_seed(6)
    w = (torch.randn(192, 64, generator=g) / 8).to(torch.bfloat16)
    for i in (0, 1, 2, 4):
        ckpt[f"blocks.{i}.projections.weight"] = w
    ckpt["blocks.2.projections._extra_state"] = as_te2_tensor(te_state())
    torch.manual_seed(7)
    model = mv.striped_hyena(tiny_config(), state_dict=ckpt, splitk=1)
    proj = model.blocks[2].projections
    assert torch.equal(proj.weight, w)
    assert proj.state.scale.tolist() == [112.0, 1792.0]
    x = (torch.randn(16, 64, generator=g) / 4).to(torch.bfloat16)
    sx, sw = torch.tensor(112.0), torch.tensor(1792.0)
    with torch.inference_mode():
        assert_bitwise_equal(proj(x), mmaemu.scaled_mm(
            quantize_e4m3(x, sx), quantize_e4m3(w, sw).t(), 1 / sx, 1 / sw,
            out_dtype=torch.bfloat16, use_fast_accum=True, profile="hopper-te", splitk=1))
    assert model.blocks[0].projections.state.scale.tolist() == [1.0, 1.0]
