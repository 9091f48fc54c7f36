"""Model and sampler configs parsed from a checkpoint's config.json / generation_config.json, checked on build."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

SUPPORTED_ARCHITECTURES = ("DiffusionGemmaForBlockDiffusion",)
SUPPORTED_MODEL_TYPES = ("diffusion_gemma",)
LAYER_TYPES = ("sliding_attention", "full_attention")
# transformers' ACT2FN names this engine computes bit-exactly -> torch.nn.functional.gelu's `approximate`
ACTIVATIONS = {"gelu_pytorch_tanh": "tanh", "gelu": "none"}


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
    # The top-level flag, as transformers reads it: True ties the LM head to the embedding AND the encoder's
    # weights to the decoder's (the text-level flag is ignored, as in transformers).
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
        if self.hidden_activation not in ACTIVATIONS:
            raise ConfigError(f"hidden_activation {self.hidden_activation!r} is not supported "
                              f"({', '.join(ACTIVATIONS)})")

    @property
    def gelu_approximate(self) -> str:
        """`approximate=` for torch.nn.functional.gelu: "tanh" for gelu_pytorch_tanh, "none" (erf) for gelu."""
        return ACTIVATIONS[self.hidden_activation]

    @property
    def separate_encoder(self) -> bool:
        """Whether the encoder has tensors of its own. transformers ties encoder weights to the decoder's only
        under a tied top-level config, and never ties biases."""
        return not self.tie_word_embeddings or self.attention_bias


@dataclass(frozen=True)
class SamplerDefaults:
    """Sampler settings from generation_config.json; unset fields take transformers' global defaults
    (`DiffusionGemmaGenerationConfig._get_default_generation_params`)."""

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
        if self.max_new_tokens <= 0:
            raise ConfigError(f"max_new_tokens must be > 0, got {self.max_new_tokens}")


# Where a value in force came from, in precedence order (a later source overrides an earlier one).
DEFAULT, CONFIG_JSON, GENERATION_JSON, SETTING = "default", "config.json", "generation_config.json", "setting"


@dataclass(frozen=True)
class CheckpointConfig:
    text: TextConfig
    canvas_length: int
    sampler: SamplerDefaults = field(default_factory=SamplerDefaults)
    # Every end-of-sequence id generation stops at: generation_config.json's list when it has one (as
    # transformers' generate reads it), else config.json's.
    eos_token_ids: tuple[int, ...] = (1,)
    # setting name -> where its value came from (DEFAULT, CONFIG_JSON, GENERATION_JSON or SETTING)
    sources: Mapping[str, str] = field(default_factory=dict, compare=False)
    # The confidence gate's threshold `dg-lsp calibrate` measured for this checkpoint (infill.json's
    # "min_confidence"); None: not calibrated (the server's documented default applies).
    min_confidence: float | None = None

    def __post_init__(self) -> None:
        if self.min_confidence is not None and not 0.0 <= self.min_confidence <= 1.0:
            raise ConfigError(f"infill.json min_confidence must be in [0, 1], got {self.min_confidence}")
        if self.canvas_length <= 0:
            raise ConfigError(f"canvas_length must be > 0, got {self.canvas_length}")
        if not self.eos_token_ids or any(not 0 <= t < self.text.vocab_size for t in self.eos_token_ids):
            raise ConfigError(f"eos ids {list(self.eos_token_ids)} must be non-empty and in [0, vocab_size)")

    def settings_in_force(self) -> dict[str, dict[str, Any]]:
        """{name: {"value": v, "source": s}} for each sampler setting (max_denoising_steps named "steps"), the eos
        ids, the canvas length and min_confidence (engine.seam.SettingsInForce). Settings given over the checkpoint's
        values are already in `sampler`, with the source SETTING (`apply_overrides`)."""
        out: dict[str, dict[str, Any]] = {}
        for field_name in SAMPLER_FIELDS:
            name = "steps" if field_name == "max_denoising_steps" else field_name
            out[name] = {"value": getattr(self.sampler, field_name), "source": self.sources.get(field_name, DEFAULT)}
        out["eos_token_ids"] = {"value": list(self.eos_token_ids), "source": self.sources.get("eos_token_ids",
                                                                                               CONFIG_JSON)}
        out["canvas_length"] = {"value": self.canvas_length, "source": self.sources.get("canvas_length", DEFAULT)}
        out["min_confidence"] = {"value": self.min_confidence,
                                 "source": "infill.json" if self.min_confidence is not None else DEFAULT}
        return out


SAMPLER_FIELDS = tuple(f.name for f in fields(SamplerDefaults))


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


def _id_list(value: Any, what: str) -> tuple[int, ...]:
    ids = value if isinstance(value, list) else [value]
    if not ids or not all(isinstance(t, int) and not isinstance(t, bool) for t in ids):
        raise ConfigError(f"{what} must be an int or a list of ints, got {value!r}")
    return tuple(ids)


def parse_sampler(gen: Mapping[str, Any]) -> tuple[SamplerDefaults, dict[str, str]]:
    """generation_config.json's sampler fields as transformers' DiffusionGemmaGenerationConfig reads them
    (`sampler_config` is the serialized EntropyBoundSamplerConfig). Returns the settings and their sources."""
    sc = gen.get("sampler_config") or {}
    if not isinstance(sc, Mapping):
        raise ConfigError(f"generation_config.json: sampler_config must be an object, got {sc!r}")
    if sc.get("_cls_name", "EntropyBoundSamplerConfig") != "EntropyBoundSamplerConfig":
        raise ConfigError(f"generation_config.json: sampler {sc['_cls_name']!r} is not supported "
                          "(this engine runs EntropyBoundSamplerConfig)")
    raw = {name: gen.get(name) for name in SAMPLER_FIELDS}
    raw["entropy_bound"] = sc.get("entropy_bound")
    given = {k: v for k, v in raw.items() if v is not None}
    defaults = SamplerDefaults()
    for k, v in given.items():
        want = type(getattr(defaults, k))
        if isinstance(v, bool) or not isinstance(v, (int, float)) or (want is int and not float(v).is_integer()):
            raise ConfigError(f"generation_config.json: {k} must be {'an integer' if want is int else 'a number'}, "
                              f"got {v!r}")
        given[k] = want(v)
    return SamplerDefaults(**given), {k: GENERATION_JSON for k in given}


def apply_overrides(sampler: SamplerDefaults, sources: dict[str, str],
                    overrides: Mapping[str, Any] | None) -> tuple[SamplerDefaults, dict[str, str]]:
    """Settings over the checkpoint's values: SamplerDefaults field names, "steps" for max_denoising_steps;
    None = not set."""
    given = {("max_denoising_steps" if k == "steps" else k): v for k, v in (overrides or {}).items() if v is not None}
    unknown = sorted(set(given) - set(SAMPLER_FIELDS))
    if unknown:
        raise ConfigError(f"unknown sampler settings {unknown}; known: steps, {', '.join(SAMPLER_FIELDS[1:])}")
    return replace(sampler, **given), {**sources, **{k: SETTING for k in given}}


def load_config(checkpoint: str | Path, overrides: Mapping[str, Any] | None = None) -> CheckpointConfig:
    """A checkpoint directory's config.json + generation_config.json (+ `overrides`, see `apply_overrides`), with
    each value's source. A GGUF file's config is in its metadata (engine.formats.gguf.checkpoint_config);
    engine.loader.load_checkpoint_config reads either."""
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
    # transformers reads only the top-level flag (default True); text_config.tie_word_embeddings is ignored
    text = replace(text, tie_word_embeddings=bool(raw.get("tie_word_embeddings", True)))
    gen_file = path / "generation_config.json"
    gen = json.loads(gen_file.read_text()) if gen_file.is_file() else {}
    sampler, sources = parse_sampler(gen)
    sampler, sources = apply_overrides(sampler, sources, overrides)
    if gen.get("eos_token_id") is not None:
        eos, sources["eos_token_ids"] = _id_list(gen["eos_token_id"], "generation_config.json eos_token_id"), \
            GENERATION_JSON
    else:
        eos, sources["eos_token_ids"] = text.eos_token_ids, CONFIG_JSON
    sources["canvas_length"] = CONFIG_JSON if "canvas_length" in raw else DEFAULT
    infill_file = path / "infill.json"
    calibrated = json.loads(infill_file.read_text()).get("min_confidence") if infill_file.is_file() else None
    if calibrated is not None and (isinstance(calibrated, bool) or not isinstance(calibrated, int | float)):
        raise ConfigError(f"{infill_file}: min_confidence must be a number in [0, 1], got {calibrated!r}")
    return CheckpointConfig(text=text, canvas_length=int(raw.get("canvas_length", 256)), sampler=sampler,
                            eos_token_ids=eos, sources=sources,
                            min_confidence=None if calibrated is None else float(calibrated))
