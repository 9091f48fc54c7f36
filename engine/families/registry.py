"""The families the engine serves, one line each, and which one a checkpoint is (by its config.json). Adding a
family: its folder (engine/families/<name>/) and one line here."""

from __future__ import annotations

import json
from pathlib import Path

from engine.config import ConfigError
from engine.families import diffusion_gemma, llada, qwen2_dream
from engine.families.contract import Family
from engine.families.gguf import family_of_gguf
from engine.formats.gguf import is_gguf

FAMILIES: tuple[Family, ...] = (
    diffusion_gemma.FAMILY,  # google/diffusiongemma-*: model_type "diffusion_gemma"
    qwen2_dream.FAMILY,  # Dream, Dream-Coder, DiffuCoder ("Dream"); Open-dCoder ("qwen2" + a mask token)
    llada.FAMILY,  # GSAI-ML/LLaDA-*: model_type "llada"
)


def family_of(path: str | Path) -> Family:
    """The family of the checkpoint directory `path`, or of a GGUF by its architecture. A directory without
    config.json and a GGUF of another architecture are DiffusionGemma's loader's to judge (it names what is
    missing)."""
    path = Path(path)
    if is_gguf(path):  # a llama.cpp GGUF: its general.architecture (dream, llada, else DiffusionGemma's)
        return family_of_gguf(path, FAMILIES)
    cfg = path / "config.json"
    if not path.is_dir() or not cfg.is_file():
        return FAMILIES[0]
    raw = json.loads(cfg.read_text())
    for family in FAMILIES:
        if family.recognises(raw, path):
            return family
    seen = raw.get("architectures") or raw.get("model_type")
    if raw.get("model_type") == "qwen2":
        raise ConfigError(f"{cfg}: a causal Qwen2 model (no mask token in tokenizer_config.json or config.json): "
                          "not a diffusion model; this engine serves " + ", ".join(f.name for f in FAMILIES))
    raise ConfigError(f"unsupported architecture {seen!r} in {cfg}; this engine serves the families "
                      + ", ".join(f.name for f in FAMILIES))
