"""Model and sampler configs parsed from a checkpoint's config.json / generation_config.json, checked on build."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

SUPPORTED_ARCHITECTURES = ("DiffusionGemmaForBlockDiffusion",)
SUPPORTED_MODEL_TYPES = ("diffusion_gemma",)
LAYER_TYPES = ("sliding_attention", "full_attention")


class ConfigError(ValueError):
    """A checkpoint's config cannot be served by this engine; the message says which field and why."""


@dataclass(frozen=True)
class RopeSpec:
    """Rotary embedding of one layer type. "proportional" rotates only the first partial_rotary_factor share."""

    rope_type: str
    theta: float
    partial_rotary_factor: float = 1.0
    factor: float = 1.0

    def __post_init__(self) -> None:
        if self.rope_type not in ("default", "proportional"):
            raise ConfigError(f"rope_type {self.rope_type!r} is not supported (default, proportional)")
        if not 0.0 < self.partial_rotary_factor <= 1.0:
            raise ConfigError(f"partial_rotary_factor must be in (0, 1], got {self.partial_rotary_factor}")


@dataclass(frozen=True)
class LayerSpec:
    """Per-layer attention shape: full-attention layers may have their own head_dim and KV-head count."""

    sliding: bool
    head_dim: int
    num_kv_heads: int


@dataclass(frozen=True)
class TextConfig:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    layer_types: tuple[str, ...]
    layers: tuple[LayerSpec, ...]
    rope: dict[str, RopeSpec]
    sliding_window: int
    num_experts: int
    top_k_experts: int
    moe_intermediate_size: int
    rms_norm_eps: float = 1e-6
    hidden_activation: str = "gelu_pytorch_tanh"
    final_logit_softcapping: float | None = 30.0
    tie_word_embeddings: bool = True
    attention_bias: bool = False
    pad_token_id: int = 0
    eos_token_ids: tuple[int, ...] = (1,)
    bos_token_id: int = 2
    max_position_embeddings: int = 131072

    def __post_init__(self) -> None:
        if len(self.layer_types) != self.num_hidden_layers or len(self.layers) != self.num_hidden_layers:
            raise ConfigError(f"layer_types has {len(self.layer_types)} entries for {self.num_hidden_layers} layers")
        bad = sorted(set(self.layer_types) - set(LAYER_TYPES))
        if bad:
            raise ConfigError(f"unknown layer types {bad}; expected {LAYER_TYPES}")
        for i, spec in enumerate(self.layers):
            if self.num_attention_heads % spec.num_kv_heads:
                raise ConfigError(f"layer {i}: {self.num_attention_heads} heads not divisible by {spec.num_kv_heads}")
        for t in set(self.layer_types):
            if t not in self.rope:
                raise ConfigError(f"rope_parameters has no entry for {t}")
        if not 1 <= self.top_k_experts <= self.num_experts:
            raise ConfigError(f"top_k_experts={self.top_k_experts} must be in [1, num_experts={self.num_experts}]")
        if self.hidden_activation not in ("gelu_pytorch_tanh", "gelu"):
            raise ConfigError(f"hidden_activation {self.hidden_activation!r} is not supported")


@dataclass(frozen=True)
class SamplerDefaults:
    """Sampler settings from generation_config.json; unset fields take transformers' global defaults."""

    max_denoising_steps: int = 48
    entropy_bound: float = 0.1
    t_min: float = 0.4
    t_max: float = 0.8
    stability_threshold: int = 1
    confidence_threshold: float = 0.005
    max_new_tokens: int = 256

    def __post_init__(self) -> None:
        if self.max_denoising_steps <= 0:
            raise ConfigError(f"max_denoising_steps must be > 0, got {self.max_denoising_steps}")
        if self.entropy_bound <= 0:
            raise ConfigError(f"entropy_bound must be > 0, got {self.entropy_bound}")
        if self.t_min < 0 or self.t_max <= self.t_min:
            raise ConfigError(f"need 0 <= t_min < t_max, got t_min={self.t_min} t_max={self.t_max}")
        if self.stability_threshold < 0 or self.confidence_threshold <= 0:
            raise ConfigError("stability_threshold must be >= 0 and confidence_threshold > 0")


@dataclass(frozen=True)
class CheckpointConfig:
    text: TextConfig
    canvas_length: int
    sampler: SamplerDefaults = field(default_factory=SamplerDefaults)

    def __post_init__(self) -> None:
        if self.canvas_length <= 0:
            raise ConfigError(f"canvas_length must be > 0, got {self.canvas_length}")


def _rope(raw: dict | None) -> dict[str, RopeSpec]:
    raw = raw or {
        "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
        "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1_000_000.0},
    }
    return {
        t: RopeSpec(
            rope_type=p.get("rope_type", "default"),
            theta=float(p["rope_theta"]),
            partial_rotary_factor=float(p.get("partial_rotary_factor", 1.0)),
            factor=float(p.get("factor", 1.0)),
        )
        for t, p in raw.items()
        if p is not None
    }


def parse_text_config(tc: dict) -> TextConfig:
    """Mirror `DiffusionGemmaTextConfig.__post_init__`: default layer pattern 5:1, last layer forced full,
    full layers take `per_layer_config` overrides or `global_head_dim` (default 512) / `num_global_key_value_heads`."""
    if tc.get("use_bidirectional_attention") == "all":
        raise ConfigError("use_bidirectional_attention='all' is not supported (the encoder must be causal)")
    n = int(tc.get("num_hidden_layers", 30))
    layer_types = list(tc.get("layer_types") or ["sliding_attention" if (i + 1) % 6 else "full_attention"
                                                 for i in range(n)])
    if layer_types:
        layer_types[-1] = "full_attention"
    head_dim = int(tc.get("head_dim", 256))
    kv = int(tc.get("num_key_value_heads", 4))
    per_layer = tc.get("per_layer_config")
    if per_layer is None:
        override = {"head_dim": int(tc.get("global_head_dim", 512))}
        if tc.get("num_global_key_value_heads") is not None and tc.get("attention_k_eq_v", True):
            override["num_key_value_heads"] = int(tc["num_global_key_value_heads"])
        per_layer = {str(i): override for i, t in enumerate(layer_types) if t == "full_attention"}
    layers = []
    for i, t in enumerate(layer_types):
        o = per_layer.get(str(i), per_layer.get(i, {})) or {}
        layers.append(LayerSpec(sliding=t == "sliding_attention", head_dim=int(o.get("head_dim", head_dim)),
                                num_kv_heads=int(o.get("num_key_value_heads", kv))))
    for key in ("num_experts", "top_k_experts", "moe_intermediate_size"):
        if tc.get(key) is None:
            raise ConfigError(f"text_config.{key} is required (the MoE block is always built)")
    eos = tc.get("eos_token_id", 1)
    return TextConfig(
        vocab_size=int(tc.get("vocab_size", 262_144)),
        hidden_size=int(tc.get("hidden_size", 2304)),
        intermediate_size=int(tc.get("intermediate_size", 9216)),
        num_hidden_layers=n,
        num_attention_heads=int(tc.get("num_attention_heads", 8)),
        layer_types=tuple(layer_types),
        layers=tuple(layers),
        rope=_rope(tc.get("rope_parameters")),
        sliding_window=int(tc.get("sliding_window", 512)),
        num_experts=int(tc["num_experts"]),
        top_k_experts=int(tc["top_k_experts"]),
        moe_intermediate_size=int(tc["moe_intermediate_size"]),
        rms_norm_eps=float(tc.get("rms_norm_eps", 1e-6)),
        hidden_activation=tc.get("hidden_activation", "gelu_pytorch_tanh"),
        final_logit_softcapping=tc.get("final_logit_softcapping", 30.0),
        tie_word_embeddings=bool(tc.get("tie_word_embeddings", True)),
        attention_bias=bool(tc.get("attention_bias", False)),
        pad_token_id=int(tc.get("pad_token_id", 0) if tc.get("pad_token_id") is not None else 0),
        eos_token_ids=tuple(eos) if isinstance(eos, list) else (int(eos),),
        bos_token_id=int(tc.get("bos_token_id", 2)),
        max_position_embeddings=int(tc.get("max_position_embeddings", 131_072)),
    )


def parse_sampler(gen: dict) -> SamplerDefaults:
    d = SamplerDefaults()
    sc = gen.get("sampler_config") or {}
    pick = lambda k, default: default if gen.get(k) is None else gen[k]  # noqa: E731
    return SamplerDefaults(
        max_denoising_steps=int(pick("max_denoising_steps", d.max_denoising_steps)),
        entropy_bound=float(sc.get("entropy_bound", d.entropy_bound)),
        t_min=float(pick("t_min", d.t_min)),
        t_max=float(pick("t_max", d.t_max)),
        stability_threshold=int(pick("stability_threshold", d.stability_threshold)),
        confidence_threshold=float(pick("confidence_threshold", d.confidence_threshold)),
        max_new_tokens=int(pick("max_new_tokens", d.max_new_tokens)),
    )


def load_config(checkpoint: str | Path) -> CheckpointConfig:
    path = Path(checkpoint)
    cfg_file = path / "config.json"
    if not cfg_file.is_file():
        raise ConfigError(f"{path} has no config.json (is it a checkpoint directory?)")
    raw = json.loads(cfg_file.read_text())
    archs = raw.get("architectures") or []
    if raw.get("model_type") not in SUPPORTED_MODEL_TYPES and not set(archs) & set(SUPPORTED_ARCHITECTURES):
        raise ConfigError(
            f"unsupported architecture {archs or raw.get('model_type')!r} in {cfg_file}; "
            f"this engine serves {SUPPORTED_ARCHITECTURES}"
        )
    text = parse_text_config(raw.get("text_config") or {})
    if "tie_word_embeddings" in raw:
        text = TextConfig(**{**text.__dict__, "tie_word_embeddings": bool(raw["tie_word_embeddings"])
                             and text.tie_word_embeddings})
    gen_file = path / "generation_config.json"
    gen = json.loads(gen_file.read_text()) if gen_file.is_file() else {}
    return CheckpointConfig(text=text, canvas_length=int(raw.get("canvas_length", 256)), sampler=parse_sampler(gen))
