"""Which config.json is a LLaDA checkpoint (`model_type` "llada", ["LLaDAModelLM"]), its network config (OLMo-style
keys: d_model, n_heads, n_kv_heads, n_layers, mlp_hidden_size, rope_theta, rms_norm_eps, embedding_size) and its
tensor names (`model.transformer.wte`, `blocks.{i}.{q,k,v}_proj`, `attn_out`, `ff_proj` (gate), `up_proj`,
`ff_out` (down), `attn_norm`, `ff_norm`, `ln_f`, `transformer.ff_out` (head)). What LLaDA's code can be configured
to do that the published checkpoints do not (ALiBi, biases, QK norms, non-RMS norms, scaled logits) is refused by
name. Logits are not shifted."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from engine.config import ConfigError
from engine.families.checkpoint import eos_ids, mask_token_id, read_json
from engine.families.dense import DenseConfig

# config key -> the value every published LLaDA checkpoint has (anything else is refused)
REQUIRED = {"alibi": False, "include_bias": False, "include_qkv_bias": False, "attention_layer_norm": False,
            "layer_norm_type": "rms", "activation_type": "silu", "block_type": "llama", "scale_logits": False,
            "input_emb_norm": False, "rope": True}


def recognises(raw: Mapping[str, Any], path: Path) -> bool:
    return raw.get("model_type") == "llada" or "LLaDAModelLM" in (raw.get("architectures") or [])


def read_config(path: Path) -> DenseConfig:
    """config.json, the mask id from the tokenizer files (else config.json), the eos ids."""
    raw = read_json(path / "config.json")
    mask, _ = mask_token_id(path, raw.get("mask_token_id"))
    eos, _ = eos_ids(raw, read_json(path / "generation_config.json"))
    return dense_config(raw, mask, eos)


def dense_config(raw: Mapping[str, Any], mask: int, eos: tuple[int, ...]) -> DenseConfig:
    """A config.json body (or the same keys from another format's metadata, e.g. a GGUF's) -> DenseConfig."""
    for key, want in REQUIRED.items():
        if key in raw and raw[key] is not None and raw[key] != want:
            raise ConfigError(f"config {key}={raw[key]!r} is not supported (published LLaDA: {want!r})")
    d, heads = int(raw["d_model"]), int(raw["n_heads"])
    inter = raw.get("mlp_hidden_size") or int(raw.get("mlp_ratio", 4)) * d
    pad = raw.get("pad_token_id")
    return DenseConfig(
        family="llada", vocab_size=int(raw.get("embedding_size") or raw["vocab_size"]), hidden_size=d,
        intermediate_size=int(inter), num_hidden_layers=int(raw["n_layers"]), num_attention_heads=heads,
        num_key_value_heads=int(raw.get("n_kv_heads") or heads), head_dim=d // heads,
        rope_theta=float(raw.get("rope_theta", 10_000.0)), rms_norm_eps=float(raw.get("rms_norm_eps", 1e-5)),
        qkv_bias=False, tie_word_embeddings=bool(raw.get("weight_tying", False)), shift_logits=False,
        mask_token_id=mask, pad_token_id=int(pad if pad is not None else eos[0]),
        bos_token_id=raw.get("bos_token_id"), eos_token_ids=eos,
        max_position_embeddings=int(raw.get("max_sequence_length", 4096)))


_BLOCK = {"q_proj": "q_proj", "k_proj": "k_proj", "v_proj": "v_proj", "attn_out": "o_proj", "ff_proj": "gate_proj",
          "up_proj": "up_proj", "ff_out": "down_proj"}
_TOP = {"model.transformer.wte.weight": "embed_tokens", "model.transformer.ln_f.weight": "norm",
        "model.transformer.ff_out.weight": "lm_head"}


def rename(name: str) -> str | None:
    """LLaDA's tensor names -> DenseLM keys (an unknown name is returned as is: the loader lists it)."""
    if name in _TOP:
        return _TOP[name]
    parts = name.split(".")  # model.transformer.blocks.{i}.{module}.weight
    if len(parts) == 6 and parts[:3] == ["model", "transformer", "blocks"] and parts[5] == "weight":
        i, module = parts[3], parts[4]
        if module in _BLOCK:
            return f"layers.{i}.{_BLOCK[module]}.weight"
        if module in ("attn_norm", "ff_norm"):
            return f"layers.{i}.{'input_layernorm' if module == 'attn_norm' else 'post_attention_layernorm'}"
    return name
