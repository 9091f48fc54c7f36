"""A GGUF is the same model as its safetensors twin, to the bit: an F32 GGUF, and a Q8_0 GGUF served packed, give
logits 0.0 apart from the safetensors checkpoint of the same (dequantized) tensors, for the engine on that
checkpoint and for transformers' DiffusionGemma on it, at every context length from one token up (where one-row
products take MKL's GEMV), and the same generated ids in reference-compatible mode.

The twin is laid out at the GGUF's alignment (engine.testing.gguf_twin): a one-row product's last bits depend on
the weight's address modulo 16 bytes, and a `save_pretrained` file puts tensors 4 bytes off after each layer scalar
(its logits differ from the GGUF's by ~1e-5 at one-token contexts with bit-equal weights)."""

from __future__ import annotations

import pytest
import torch
from gguf_checkpoints import GGUF_SHAPE
from transformers import DiffusionGemmaForBlockDiffusion

from engine.engine import Engine
from engine.formats import gguf_write as W
from engine.model.kv_cache import KVCache
from engine.quant.native import build
from engine.testing.gguf_twin import gguf_twin
from engine.testing.tiny import build_tiny_checkpoint, generated_ids, logit_diff

LENGTHS = [1, 2, 3, 5, 8, 13, 24]


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    return build_tiny_checkpoint(tmp_path_factory.mktemp("gguf_parity") / "hf", GGUF_SHAPE, canvas_length=16, seed=5)


def _logits(eng, ctx, canvas, sc):
    with torch.inference_mode():
        soft = eng.model.soft_embedding(torch.softmax(sc, dim=-1, dtype=torch.float32))
        return eng.model.decode(canvas, eng.model.encode(ctx, KVCache()), soft)


@pytest.mark.parametrize("rule", ["F32", "Q8_0"])
def test_gguf_computes_the_bits_of_its_safetensors_twin(src, tmp_path, rule, monkeypatch):
    """Bit for bit on the torch path (DG_NATIVE=0: a Q8_0 file's tiles hold the twin's values and go through the
    same GEMMs); the native path's row-by-row products differ in summation order only
    (tests/quant/test_gguf.py, tests/quant/test_native.py)."""
    monkeypatch.setenv("DG_NATIVE", "0")
    monkeypatch.setattr(build, "_state", {})
    path = W.write_gguf(src, tmp_path / f"{rule}.gguf", rule)
    twin = gguf_twin(path, src, tmp_path / "twin")
    eng = Engine.from_pretrained(path, device="cpu", dtype="float32")  # Q8_0: blocks kept packed (weights=auto)
    assert eng.weights == "gguf"
    other = Engine.from_pretrained(twin, device="cpu", dtype="float32")
    ref = DiffusionGemmaForBlockDiffusion.from_pretrained(twin, dtype=torch.float32).eval()
    g, v = torch.Generator().manual_seed(7), eng.vocab_size
    for n in LENGTHS:
        ctx, canvas = torch.randint(3, v, (1, n), generator=g), torch.randint(0, v, (1, 16), generator=g)
        sc = torch.randn(1, 16, v, generator=g) * 4
        assert torch.equal(_logits(eng, ctx, canvas, sc), _logits(other, ctx, canvas, sc)), n
        assert logit_diff(eng, ref, ctx, canvas, sc) == 0.0, n
    for seed, n in enumerate((1, 8, 21)):
        ctx = torch.randint(3, v, (n,), generator=g).tolist()
        want, got = generated_ids(eng, ref, ctx, seed, 32, 6)
        assert got == want, (n, got, want)


def test_twin_holds_every_weight_at_the_ggufs_alignment(src, tmp_path):
    from safetensors import safe_open

    twin = gguf_twin(W.write_gguf(src, tmp_path / "f32.gguf", "F32"), src, tmp_path / "twin")
    with safe_open(str(twin / "model.safetensors"), framework="pt") as f:
        for name in f.keys():
            t = f.get_tensor(name)
            if t.dim() >= 2:
                assert t.data_ptr() % 32 == 0, name
