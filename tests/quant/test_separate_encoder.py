"""Quantized weights on checkpoints whose encoder has tensors of its own: an untied checkpoint (a whole encoder of its
own, quantized like the decoder) and one with attention biases (the encoder shares the decoder's quantized weights
and keeps its own biases)."""

from __future__ import annotations

import pytest
import torch
from quant_checkpoints import dequantized_twin, logits, rel_err

from engine.engine import Engine
from engine.quant.modules import QuantLinear, QuantWeight
from engine.testing.tiny import build_tiny_checkpoint


@pytest.fixture(scope="module")
def encoder_ckpts(tmp_path_factory):
    root = tmp_path_factory.mktemp("quant_encoder")
    return {name: build_tiny_checkpoint(root / name, name, canvas_length=16, seed=20 + i)
            for i, name in enumerate(("untied", "attention_bias"))}


@pytest.mark.parametrize("fmt", ["int8", "int4", "fp8"])
def test_untied_encoder_is_quantized_from_its_own_weights(encoder_ckpts, fmt):
    ref = Engine.from_pretrained(encoder_ckpts["untied"], device="cpu", dtype="float32", weights="bf16")
    q = Engine.from_pretrained(encoder_ckpts["untied"], device="cpu", dtype="float32", weights=fmt)
    assert q.weights == fmt and q.model.enc_layers is not None
    enc, dec = q.model.enc_layers[0], q.model.layers[0]
    assert isinstance(enc.self_attn.q_proj, QuantLinear) and isinstance(enc.moe.gate_up_proj, QuantWeight)
    for mine, ref_enc, ref_dec in ((enc.self_attn.q_proj, ref.model.enc_layers[0].self_attn.q_proj.weight,
                                    ref.model.layers[0].self_attn.q_proj.weight),
                                   (enc.moe.down_proj, ref.model.enc_layers[0].moe.down_proj,
                                    ref.model.layers[0].moe.down_proj)):
        w = mine.dequantize()
        assert rel_err(w, ref_enc) < 0.2 < rel_err(w, ref_dec)  # the encoder's own weights, not the decoder's
    assert enc.moe.gate_up_proj.qweight.data_ptr() != dec.moe.gate_up_proj.qweight.data_ptr()
    # the encoder's quantized weights are the ones computing: exact against their dequantization
    torch.testing.assert_close(logits(q), logits(dequantized_twin(q)), rtol=1e-5, atol=1e-5)
    assert q.infill([2, 5, 7, 9], canvas_length=16, steps=4).steps >= 1


def test_attention_bias_encoder_shares_the_decoders_quantized_weights(encoder_ckpts):
    path = encoder_ckpts["attention_bias"]
    q = Engine.from_pretrained(path, device="cpu", dtype="float32", weights="int4")
    enc, dec = q.model.enc_layers[0], q.model.layers[0]
    assert enc.self_attn.q_proj.qweight.data_ptr() == dec.self_attn.q_proj.qweight.data_ptr()
    assert enc.moe.gate_up_proj.qweight.data_ptr() == dec.moe.gate_up_proj.qweight.data_ptr()
    assert not torch.equal(enc.self_attn.q_proj.bias, dec.self_attn.q_proj.bias)  # biases stay the encoder's own
    torch.testing.assert_close(logits(q), logits(dequantized_twin(q)), rtol=1e-5, atol=1e-5)
    untied = Engine.from_pretrained(encoder_ckpts["untied"], device="cpu", dtype="float32", weights="int4")
    from engine.tools.check import weights_bytes

    assert weights_bytes(q.model) < weights_bytes(untied.model)  # shared tensors are stored once


def test_untied_encoder_counts_in_the_shape_accounting(encoder_ckpts):
    """`dg-lsp --check` and the fit check count the untied encoder's weights in the format asked for."""
    from engine.config import load_config
    from engine.quant import memory
    from engine.quant.modules import weight_bytes

    path = encoder_ckpts["untied"]
    cfg = load_config(path).text
    gap = {}
    for fmt in ("bf16", "int4"):
        q = Engine.from_pretrained(path, device="cpu", dtype="float32", weights=fmt)
        gap[fmt] = memory.weight_bytes(cfg, fmt, compute_bytes=4) - weight_bytes(q.model)
    # the shape count also counts a few scalars the loaded model shares between encoder and decoder (24 bytes here),
    # in every format alike: the quantized encoder layers themselves are counted exactly
    assert gap["int4"] == gap["bf16"] and 0 <= gap["bf16"] <= 64, gap
