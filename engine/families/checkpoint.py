"""A mask-diffusion checkpoint's files, family-independent: its sampler settings (generation_config.json under the
upstream names, then the engine's `sampler={...}`), the mask token read from its tokenizer files, and its weights
(HF-named tensors, from safetensors or any reader that yields them, e.g. a GGUF reader) loaded into a `DenseLM`."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from engine.config import CONFIG_JSON, DEFAULT, GENERATION_JSON, SETTING, ConfigError
from engine.families.dense import DenseConfig, DenseLM

# (HF name, shape, read) as engine.quant.checkpoint.tensors and engine.formats' readers yield them
TensorSource = Iterable[tuple[str, tuple[int, ...], Callable[[], torch.Tensor]]]


@dataclass(frozen=True)
class FamilyCheckpoint:
    """What the mask engine needs of a checkpoint: its network config (`text`), the canvas length used when a call
    gives none, the family's sampler settings with their sources, every eos id and the calibrated gate."""

    text: DenseConfig
    sampler: Any  # the family's settings dataclass (e.g. DreamSampling), upstream field names
    sources: Mapping[str, str] = field(default_factory=dict)
    eos_token_ids: tuple[int, ...] = ()
    canvas_length: int = 32
    min_confidence: float | None = None

    def settings_in_force(self) -> dict[str, dict[str, Any]]:
        out = {f.name: {"value": getattr(self.sampler, f.name), "source": self.sources.get(f.name, DEFAULT)}
               for f in dataclasses.fields(self.sampler)}
        out["eos_token_ids"] = {"value": list(self.eos_token_ids), "source": self.sources.get("eos_token_ids",
                                                                                              CONFIG_JSON)}
        out["canvas_length"] = {"value": self.canvas_length, "source": DEFAULT}
        out["mask_token_id"] = {"value": self.text.mask_token_id, "source": self.sources.get("mask_token_id",
                                                                                             "tokenizer")}
        out["min_confidence"] = {"value": self.min_confidence,
                                 "source": "infill.json" if self.min_confidence is not None else DEFAULT}
        return out


def resolve_settings(cls: type, gen: Mapping[str, Any], overrides: Mapping[str, Any] | None,
                     family: str) -> tuple[Any, dict[str, str]]:
    """The family's settings dataclass `cls` from generation_config.json's keys of the same names, then the engine's
    `sampler={...}` (None = not set); an unknown setting is an error naming the known ones."""
    names = [f.name for f in dataclasses.fields(cls)]
    given = {k: v for k, v in (overrides or {}).items() if v is not None}
    unknown = sorted(set(given) - set(names))
    if unknown:
        raise ConfigError(f"unknown sampler settings {unknown} for the {family} family; known: {', '.join(names)}")
    from_file = {k: gen[k] for k in names if gen.get(k) is not None}
    sources = {**dict.fromkeys(from_file, GENERATION_JSON), **dict.fromkeys(given, SETTING)}
    return cls(**{**from_file, **given}), sources


def read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text()) if path.is_file() else {}


def mask_token_id(path: Path, config_value: int | None) -> tuple[int, str]:
    """(the mask id, where it was read): tokenizer_config.json's `mask_token` looked up in tokenizer.json, else
    config.json's `mask_token_id`; a tokenizer and a config that disagree are an error. Never a built-in id."""
    tok_cfg = read_json(path / "tokenizer_config.json")
    spelled = tok_cfg.get("mask_token")
    if isinstance(spelled, Mapping):
        spelled = spelled.get("content")
    tid = None
    if isinstance(spelled, str) and (path / "tokenizer.json").is_file():
        added = read_json(path / "tokenizer.json").get("added_tokens") or []
        tid = next((t["id"] for t in added if t.get("content") == spelled), None)
        if tid is None:
            raise ConfigError(f"{path}/tokenizer_config.json names mask token {spelled!r}, which tokenizer.json "
                              "does not hold")
    if tid is not None and config_value is not None and tid != config_value:
        raise ConfigError(f"{path}: the tokenizer's mask token {spelled!r} is id {tid}, config.json's "
                          f"mask_token_id is {config_value}")
    if tid is not None:
        return tid, "tokenizer_config.json + tokenizer.json"
    if config_value is not None:
        return int(config_value), CONFIG_JSON
    raise ConfigError(f"{path}: no mask token (neither tokenizer_config.json's mask_token nor config.json's "
                      "mask_token_id): not a mask-diffusion checkpoint")


def eos_ids(raw: Mapping[str, Any], gen: Mapping[str, Any]) -> tuple[tuple[int, ...], str]:
    """generation_config.json's eos ids when it has them (as transformers reads them), else config.json's."""
    for value, source in ((gen.get("eos_token_id"), GENERATION_JSON), (raw.get("eos_token_id"), CONFIG_JSON)):
        if value is not None:
            return (tuple(int(v) for v in value) if isinstance(value, list) else (int(value),)), source
    raise ConfigError("no eos_token_id in generation_config.json or config.json")


def load_dense(source: TensorSource, cfg: DenseConfig, rename: Callable[[str], str | None], device: torch.device,
               dtype: torch.dtype) -> DenseLM:
    """HF-named tensors -> a `DenseLM` on `device` in `dtype` (built on the meta device, filled tensor by tensor);
    `rename` maps a checkpoint name to our state-dict key (None: skipped). Missing, unexpected or mis-shaped tensors
    are one error listing them."""
    with torch.device("meta"):
        model = DenseLM(cfg)
    expected = dict(model.state_dict(keep_vars=True))
    state: dict[str, torch.Tensor] = {}
    unexpected: list[str] = []
    for name, shape, read in source:
        key = rename(name)
        if key is None:
            continue
        if key == "lm_head" and cfg.tie_word_embeddings:
            continue  # tied: the embedding is the head (Dream declares it tied and ships it untied)
        if key not in expected:
            unexpected.append(name)
            continue
        if tuple(shape) != tuple(expected[key].shape):
            raise ConfigError(f"{name}: shape {tuple(shape)} != expected {tuple(expected[key].shape)}")
        state[key] = read().to(device=device, dtype=dtype)
    missing = sorted(set(expected) - set(state))
    if missing or unexpected:
        raise ConfigError(f"checkpoint does not match its config: missing {missing[:20]}; unexpected "
                          f"{unexpected[:20]}")
    model.load_state_dict(state, assign=True, strict=True)
    return model.eval().requires_grad_(False)
