"""Loading quantized weights: a compressed-tensors FP8 checkpoint (written by the library) against its dequantized
reference, int4 / int8 / fp8 made on load from bf16 shards, and what quantization does to a tiny model's output."""

from __future__ import annotations

import json

import pytest
import torch
from quant_checkpoints import dequantized_copy, dequantized_twin, logits, rel_err, to_bf16_shards
from safetensors import safe_open

from engine.engine import Engine
from engine.quant.checkpoint import QuantConfigError
from engine.quant.modules import QuantLinear, QuantWeight


def test_fp8_checkpoint_loads_as_fp8_and_matches_its_dequantized_reference(fp8_ckpt, tmp_path):
    with safe_open(str(fp8_ckpt / "model.safetensors"), "pt") as f:
        stored = {n: f.get_slice(n).get_dtype() for n in f.keys()}
    assert stored["model.decoder.layers.0.experts.1.gate_proj.weight"] == "F8_E4M3"
    assert "model.decoder.layers.0.experts.1.gate_proj.weight_scale" in stored
    fp8 = Engine.from_pretrained(fp8_ckpt, device="cpu", dtype="float32")  # auto keeps the checkpoint's format
    assert fp8.weights == "fp8"
    moe = fp8.model.layers[0].moe
    assert isinstance(moe.gate_up_proj, QuantWeight) and moe.gate_up_proj.qweight.dtype == torch.float8_e4m3fn
    assert isinstance(fp8.model.layers[0].self_attn.q_proj, QuantLinear)
    ref = Engine.from_pretrained(dequantized_copy(fp8_ckpt, tmp_path / "deq"), device="cpu", dtype="float32",
                                 weights="bf16")
    # every stored weight, dequantized by us, equals the library's dequantization
    torch.testing.assert_close(moe.gate_up_proj.dequantize(), ref.model.layers[0].moe.gate_up_proj, rtol=0, atol=0)
    # the checkpoint asks for dynamic per-token FP8 activations: the outputs differ by that rounding only
    assert fp8.model.layers[0].self_attn.q_proj.act_dynamic
    for m in fp8.model.modules():
        if isinstance(m, QuantWeight):
            m.act_dynamic = False
    torch.testing.assert_close(logits(fp8), logits(ref), rtol=1e-5, atol=1e-5)


def test_fp8_checkpoint_served_in_other_formats(fp8_ckpt):
    deq = Engine.from_pretrained(fp8_ckpt, device="cpu", dtype="float32", weights="bf16")
    assert deq.weights == "bf16" and not any(isinstance(m, QuantWeight) for m in deq.model.modules())
    int4 = Engine.from_pretrained(fp8_ckpt, device="cpu", dtype="float32", weights="int4")
    assert int4.model.layers[0].moe.down_proj.fmt == "int4"
    out = int4.infill([2, 5, 7, 9], canvas_length=16, steps=4)
    assert out.steps >= 1


def test_unsupported_quantization_config_is_refused_by_name(fp8_ckpt, tmp_path):
    import shutil

    bad = tmp_path / "bad"
    shutil.copytree(fp8_ckpt, bad)
    cfg = json.loads((bad / "config.json").read_text())
    cfg["quantization_config"]["config_groups"]["group_0"]["weights"]["num_bits"] = 4
    cfg["quantization_config"]["config_groups"]["group_0"]["weights"]["type"] = "int"
    (bad / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(QuantConfigError, match="not FP8 e4m3"):
        Engine.from_pretrained(bad, device="cpu", dtype="float32")


def test_quantized_from_bf16_shards_compute_with_their_dequantized_weights(tiny_ckpts, tmp_path):
    """Random tiny models amplify any perturbation (0.2% weight noise moves their logits by ~18%), so their error
    against bf16 only ranks the formats; the exactness check is against the dequantized weights. The shipped
    model's figures are in bench.quant."""
    shards = to_bf16_shards(tiny_ckpts["sliding_heavy"], tmp_path / "bf16")
    assert len(list(shards.glob("model-*.safetensors"))) > 1
    ref = Engine.from_pretrained(shards, device="cpu", dtype="float32", weights="bf16")
    errs = {}
    for fmt in ("int8", "fp8", "int4"):
        q = Engine.from_pretrained(shards, device="cpu", dtype="float32", weights=fmt)
        assert q.weights == fmt
        assert q.model.layers[0].moe.gate_up_proj.fmt == fmt
        torch.testing.assert_close(logits(q), logits(dequantized_twin(q)), rtol=1e-5, atol=1e-5)
        errs[fmt] = sum(rel_err(logits(q, s), logits(ref, s)) for s in range(3)) / 3
    assert 0 < errs["int8"] < errs["fp8"] < errs["int4"], errs


@pytest.mark.parametrize("fmt,min_agree", [("int8", 0.9), ("int4", 0.6)])
def test_shipped_model_token_agreement_over_two_canvases(fmt, min_agree):
    """Reference-compatible mode (the sampler's own draws), two canvases: the quantized shipped model mostly picks
    the tokens the fp32 one picks."""
    ref = Engine.from_pretrained(None, device="cpu", dtype="float32", weights="bf16")
    q = Engine.from_pretrained(None, device="cpu", dtype="float32", weights=fmt)
    agree, total = 0, 0
    for i, (prefix, suffix) in enumerate([("def add(a, b):\n    return ", "\n"),
                                          ("for i in range(10):\n    ", "\nprint(total)\n")]):
        kw = dict(canvas_length=16, max_canvases=2, steps=16, seed=i, reference_compatible=True)
        want = ref.infill_text(prefix, suffix, **kw).ids
        got = q.infill_text(prefix, suffix, **kw).ids
        agree += sum(a == b for a, b in zip(got, want, strict=False))
        total += max(len(want), len(got))
    assert total > 0 and agree / total >= min_agree, (agree, total)
