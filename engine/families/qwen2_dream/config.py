"""Which config.json is a Dream-style Qwen2 diffusion checkpoint, and its network config.

Dream, Dream-Coder and DiffuCoder say so themselves (`model_type` "Dream", `architectures` ["DreamModel"]).
Open-dCoder ships a stock Qwen2 config (`model_type` "qwen2", ["Qwen2ForCausalLM"]) that transformers would load as
a causal model; it is recognised as diffusion by its mask token (tokenizer_config.json's `mask_token`, or
config.json's `mask_token_id`) or its name, and is always run bidirectionally. A Qwen2 config with neither is a
causal language model and is not this family's.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from engine.config import ConfigError
from engine.families.checkpoint import eos_ids, mask_token_id, read_json
from engine.families.dense import DenseConfig

DREAM_TYPES = ("Dream", "dream")
DREAM_ARCHS = ("DreamModel",)
# Names a published Qwen2-layout diffusion coder goes by (Open-dLLM's Open-dCoder)
DIFFUSION_NAMES = ("open-dcoder", "opendcoder", "open_dcoder")


def recognises(raw: Mapping[str, Any], path: Path) -> bool:
    if raw.get("model_type") in DREAM_TYPES or set(raw.get("architectures") or []) & set(DREAM_ARCHS):
        return True
    if raw.get("model_type") != "qwen2":
        return False
    named = any(n in str(raw.get("_name_or_path", "")).lower() or n in path.name.lower() for n in DIFFUSION_NAMES)
    tok_cfg = read_json(path / "tokenizer_config.json")
    return named or raw.get("mask_token_id") is not None or tok_cfg.get("mask_token") is not None


def rope_theta(raw: Mapping[str, Any]) -> float:
    """`rope_theta` (transformers 4 layout) or `rope_parameters.rope_theta` (5); only the default rope."""
    params = raw.get("rope_parameters") or {}
    scaling = raw.get("rope_scaling")
    kind = params.get("rope_type", "default") if params else (scaling or {}).get("rope_type", "default")
    if kind != "default" or (scaling and scaling.get("rope_type", scaling.get("type")) not in (None, "default")):
        raise ConfigError(f"rope scaling {scaling or params!r} is not supported for this family (default rope only)")
    return float(params.get("rope_theta", raw.get("rope_theta", 10_000.0)))


def read_config(path: Path) -> DenseConfig:
    """config.json, the mask id from the tokenizer files, the eos ids from generation_config.json."""
    raw = read_json(path / "config.json")
    mask, _ = mask_token_id(path, raw.get("mask_token_id"))
    eos, _ = eos_ids(raw, read_json(path / "generation_config.json"))
    return dense_config(raw, mask, eos)


def dense_config(raw: Mapping[str, Any], mask: int, eos: tuple[int, ...]) -> DenseConfig:
    """A config.json body (or the same keys from another format's metadata, e.g. a GGUF's) -> DenseConfig."""
    if raw.get("use_sliding_window"):
        raise ConfigError("use_sliding_window is not supported (these models attend over the whole window)")
    if raw.get("hidden_act", "silu") != "silu":
        raise ConfigError(f"hidden_act {raw['hidden_act']!r} is not supported (silu)")
    heads = int(raw["num_attention_heads"])
    hidden = int(raw["hidden_size"])
    pad = raw.get("pad_token_id")
    return DenseConfig(
        family="dream", vocab_size=int(raw["vocab_size"]), hidden_size=hidden,
        intermediate_size=int(raw["intermediate_size"]), num_hidden_layers=int(raw["num_hidden_layers"]),
        num_attention_heads=heads, num_key_value_heads=int(raw.get("num_key_value_heads") or heads),
        head_dim=int(raw.get("head_dim") or hidden // heads), rope_theta=rope_theta(raw),
        rms_norm_eps=float(raw.get("rms_norm_eps", 1e-6)), qkv_bias=True,
        tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)), shift_logits=True, mask_token_id=mask,
        pad_token_id=int(pad if pad is not None else eos[0]), bos_token_id=raw.get("bos_token_id"),
        eos_token_ids=eos, max_position_embeddings=int(raw.get("max_position_embeddings", 32768)))


def rename(name: str) -> str | None:
    """Qwen2's tensor names (Dream's are the same) -> DenseLM keys."""
    if name == "lm_head.weight":
        return "lm_head"
    if not name.startswith("model."):
        return name  # unexpected: the loader lists it
    rest = name.removeprefix("model.")
    if rest in ("embed_tokens.weight", "norm.weight"):
        return rest.removesuffix(".weight")
    parts = rest.split(".")  # layers.{i}.{self_attn|mlp}.{proj}.{weight|bias} or layers.{i}.{norm}.weight
    if len(parts) == 5 and parts[0] == "layers" and parts[2] in ("self_attn", "mlp"):
        return f"layers.{parts[1]}.{parts[3]}.{parts[4]}"
    if len(parts) == 4 and parts[0] == "layers" and parts[3] == "weight":
        return f"layers.{parts[1]}.{parts[2]}"
    return name
