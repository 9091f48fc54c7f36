"""Stacked projections (q/k/v and gate/up in one GEMM each): the same bits as separate GEMMs, no extra weight
memory, and left alone where a weight is biased."""

import pytest
import torch

from engine.engine import Engine
from engine.model.kv_cache import KVCache
from engine.testing.tiny import build_tiny_checkpoint


def _unfuse(model) -> None:
    for layer in (*model.layers, *(model.enc_layers or ())):
        layer.self_attn.qkv = None
        layer.mlp.gate_up = None
    model.self_conditioning.mlp.gate_up = None


def _logits(model, ctx, canvas, soft):
    return model.decode(canvas, model.encode(ctx, KVCache()), soft)


@pytest.mark.parametrize("variant", ["mixed", "exact_gelu", "untied"])
def test_stacked_projections_give_the_bits_of_separate_ones(tmp_path, variant):
    eng = Engine.from_pretrained(build_tiny_checkpoint(tmp_path / variant, variant, canvas_length=16), device="cpu")
    m = eng.model
    assert m.layers[0].self_attn.qkv is not None and m.layers[0].mlp.gate_up is not None
    g = torch.Generator().manual_seed(3)
    ctx = torch.randint(3, eng.vocab_size, (1, 41), generator=g)
    canvas = torch.randint(0, eng.vocab_size, (1, 16), generator=g)
    soft = m.soft_embedding(torch.softmax(torch.randn(1, 16, eng.vocab_size, generator=g) * 4, dim=-1))
    with torch.inference_mode():
        fused = _logits(m, ctx, canvas, soft)
        _unfuse(m)
        separate = _logits(m, ctx, canvas, soft)
    assert torch.equal(fused, separate)
    assert fused.abs().max() > 1.0


def test_stacked_weights_are_views_not_copies(tmp_path):
    eng = Engine.from_pretrained(build_tiny_checkpoint(tmp_path / "m", "mixed", canvas_length=16), device="cpu")
    attn = eng.model.layers[0].self_attn
    base = attn.qkv.untyped_storage().data_ptr()
    for proj in (attn.q_proj, attn.k_proj, attn.v_proj):
        if proj is not None:
            assert proj.weight.untyped_storage().data_ptr() == base
    stack = attn.q_proj.weight.shape[0] + attn.k_proj.weight.shape[0]
    stack += attn.v_proj.weight.shape[0] if attn.v_proj is not None else 0
    assert attn.qkv.shape[0] == stack
    # the state dict still names (and holds) each projection on its own
    sd = eng.model.state_dict()
    assert torch.equal(sd["layers.0.self_attn.q_proj.weight"], attn.qkv[: attn.q_proj.weight.shape[0]])


def test_biased_projections_stay_separate(tmp_path):
    eng = Engine.from_pretrained(build_tiny_checkpoint(tmp_path / "b", "attention_bias", canvas_length=16),
                                 device="cpu")
    assert all(layer.self_attn.qkv is None for layer in eng.model.layers)
    assert all(layer.mlp.gate_up is not None for layer in eng.model.layers)  # the MLP has no biases


def test_chunked_lm_head_gives_the_bits_of_one_gemm(tmp_path):
    eng = Engine.from_pretrained(build_tiny_checkpoint(tmp_path / "h", "mixed", canvas_length=16), device="cpu")
    m = eng.model
    g = torch.Generator().manual_seed(5)
    ctx = torch.randint(3, eng.vocab_size, (1, 20), generator=g)
    canvas = torch.randint(0, eng.vocab_size, (1, 16), generator=g)
    with torch.inference_mode():
        m.head_chunk = None
        whole = _logits(m, ctx, canvas, None)
        m.head_chunk = 100  # uneven: the last chunk is shorter
        assert eng.vocab_size % 100
        chunked = _logits(m, ctx, canvas, None)
    assert torch.equal(whole, chunked)
