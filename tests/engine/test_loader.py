"""Checkpoint loading: sharded files, dtypes, vision weights skipped, precise errors; config parsing."""

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from engine.config import ConfigError, load_config, parse_text_config
from engine.engine import Engine
from engine.loader import CheckpointError


def test_sharded_checkpoint_loads_identically(tiny_mixed, tmp_path):
    from transformers import DiffusionGemmaForBlockDiffusion

    ref = DiffusionGemmaForBlockDiffusion.from_pretrained(tiny_mixed)
    ref.save_pretrained(tmp_path, max_shard_size="100KB")
    assert (tmp_path / "model.safetensors.index.json").exists()
    a = Engine.from_pretrained(tiny_mixed, device="cpu").model.state_dict()
    b = Engine.from_pretrained(tmp_path, device="cpu").model.state_dict()
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("dtype, want", [("bfloat16", torch.bfloat16), ("float16", torch.float16)])
def test_half_precision_load(tiny_mixed, dtype, want):
    eng = Engine.from_pretrained(tiny_mixed, device="cpu", dtype=dtype)
    assert eng.model.embed_tokens.dtype == want
    res = eng.infill([2, 5, 10, 11, 4], canvas_length=16, steps=2)
    assert res.steps >= 1


def test_vision_weights_are_skipped(tiny_mixed):
    tensors = load_file(str(tiny_mixed / "model.safetensors"))
    assert any("vision" in k for k in tensors)  # the checkpoint really carries a vision tower
    Engine.from_pretrained(tiny_mixed, device="cpu")


def _copy_with(tiny, tmp_path, edit):
    dst = tmp_path / "ckpt"
    shutil.copytree(tiny, dst)
    tensors = load_file(str(dst / "model.safetensors"))
    edit(tensors)
    save_file(tensors, str(dst / "model.safetensors"))
    return dst


def test_missing_tensor_is_named(tiny_mixed, tmp_path):
    dst = _copy_with(tiny_mixed, tmp_path, lambda t: t.pop("model.decoder.layers.1.mlp.up_proj.weight"))
    with pytest.raises(CheckpointError, match=r"missing \['layers\.1\.mlp\.up_proj\.weight'\]"):
        Engine.from_pretrained(dst, device="cpu")


def test_unexpected_tensor_is_named(tiny_mixed, tmp_path):
    dst = _copy_with(tiny_mixed, tmp_path, lambda t: t.__setitem__("model.decoder.mystery.weight", torch.zeros(2)))
    with pytest.raises(CheckpointError, match="model.decoder.mystery.weight"):
        Engine.from_pretrained(dst, device="cpu")


def test_wrong_shape_is_named(tiny_mixed, tmp_path):
    dst = _copy_with(tiny_mixed, tmp_path,
                     lambda t: t.__setitem__("model.decoder.norm.weight", torch.zeros(3)))
    with pytest.raises(CheckpointError, match="model.decoder.norm.weight: shape"):
        Engine.from_pretrained(dst, device="cpu")


def test_unknown_architecture_is_rejected(tiny_mixed, tmp_path):
    dst = tmp_path / "llama"
    shutil.copytree(tiny_mixed, dst)
    cfg = json.loads((dst / "config.json").read_text())
    cfg.update(architectures=["LlamaForCausalLM"], model_type="llama")
    (dst / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ConfigError, match="unsupported architecture"):
        load_config(dst)


def test_missing_directory_and_config(tmp_path):
    with pytest.raises(FileNotFoundError):
        Engine.from_pretrained(tmp_path / "nope")
    with pytest.raises(ConfigError, match="no config.json"):
        load_config(tmp_path)


def test_text_config_defaults_follow_transformers():
    from transformers import DiffusionGemmaTextConfig

    raw = dict(num_hidden_layers=7, num_experts=4, top_k_experts=2, moe_intermediate_size=8,
               num_global_key_value_heads=1)
    ours = parse_text_config(raw)
    ref = DiffusionGemmaTextConfig(**raw)
    assert list(ours.layer_types) == list(ref.layer_types)
    for i, spec in enumerate(ours.layers):
        assert spec.head_dim == ref.per_layer_config[i].head_dim
        assert spec.num_kv_heads == ref.per_layer_config[i].num_key_value_heads
    assert ours.layers[-1].head_dim == 512 and not ours.layers[-1].sliding
    with pytest.raises(ConfigError, match="num_experts"):
        parse_text_config({"num_hidden_layers": 2})
    with pytest.raises(ConfigError, match="bidirectional"):
        parse_text_config(dict(raw, use_bidirectional_attention="all"))
