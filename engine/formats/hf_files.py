"""A loaded checkpoint's config written back as the HF files a client reads (config.json, generation_config.json).

The engine service hands its clients the small files they tokenize and lay out prompts with (engine.service.app
CHECKPOINT_FILES). A GGUF checkpoint has no config.json: its shape and sampler live in the file's metadata
(engine.formats.gguf). These functions write what `engine.config.load_config` reads back into the same
`CheckpointConfig` (tests/quant/test_gguf_service_files.py checks the round trip).
"""

from __future__ import annotations

import json
from typing import Any

from engine.config import SUPPORTED_ARCHITECTURES, SUPPORTED_MODEL_TYPES, CheckpointConfig, TextConfig


def text_config_dict(text: TextConfig) -> dict[str, Any]:
    """`text_config` of config.json: every field `parse_text_config` reads, per-layer shapes spelled out."""
    first = text.layers[0]
    return {
        "vocab_size": text.vocab_size, "hidden_size": text.hidden_size,
        "intermediate_size": text.intermediate_size, "num_hidden_layers": text.num_hidden_layers,
        "num_attention_heads": text.num_attention_heads, "layer_types": list(text.layer_types),
        "head_dim": first.head_dim, "num_key_value_heads": first.num_kv_heads,
        "per_layer_config": {str(i): {"head_dim": s.head_dim, "num_key_value_heads": s.num_kv_heads}
                             for i, s in enumerate(text.layers)},
        "rope_parameters": {t: {"rope_type": r.rope_type, "rope_theta": r.theta,
                                "partial_rotary_factor": r.partial_rotary_factor, "factor": r.factor}
                            for t, r in text.rope.items()},
        "sliding_window": text.sliding_window, "num_experts": text.num_experts,
        "top_k_experts": text.top_k_experts, "moe_intermediate_size": text.moe_intermediate_size,
        "rms_norm_eps": text.rms_norm_eps, "hidden_activation": text.hidden_activation,
        "final_logit_softcapping": text.final_logit_softcapping, "attention_bias": text.attention_bias,
        "pad_token_id": text.pad_token_id, "eos_token_id": list(text.eos_token_ids),
        "bos_token_id": text.bos_token_id, "max_position_embeddings": text.max_position_embeddings,
    }


def config_json(cfg: CheckpointConfig) -> bytes:
    raw = {"architectures": list(SUPPORTED_ARCHITECTURES), "model_type": SUPPORTED_MODEL_TYPES[0],
           "tie_word_embeddings": cfg.text.tie_word_embeddings, "canvas_length": cfg.canvas_length,
           "text_config": text_config_dict(cfg.text)}
    return json.dumps(raw, indent=1).encode()


def generation_config_json(cfg: CheckpointConfig) -> bytes:
    s = cfg.sampler
    raw = {"eos_token_id": list(cfg.eos_token_ids), "max_denoising_steps": s.max_denoising_steps,
           "t_min": s.t_min, "t_max": s.t_max, "stability_threshold": s.stability_threshold,
           "confidence_threshold": s.confidence_threshold, "max_new_tokens": s.max_new_tokens,
           "sampler_config": {"_cls_name": "EntropyBoundSamplerConfig", "entropy_bound": s.entropy_bound}}
    return json.dumps(raw, indent=1).encode()
