"""DiffusionGemma behind the family contract: a thin adapter. Its network, loader and denoising step stay where they
were (engine/model/, engine/loader.py, engine/denoising/denoise.py); this only says which configs are its and what
the shared parts do for it (a causal encoder whose KV the prefix cache reuses, uniform-noise canvases, every prompt
and weight format)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.config import SUPPORTED_ARCHITECTURES, SUPPORTED_MODEL_TYPES
from engine.families.contract import Traits


@dataclass(frozen=True)
class DiffusionGemmaFamily:
    name: str = "diffusion_gemma"
    traits: Traits = Traits(noise="uniform", prompt_formats=("auto", "fim", "chat"),
                            weight_formats=("auto", "bf16", "int8", "int4", "fp8"), prefix_cache=True,
                            multi_canvas=True)

    def recognises(self, raw: Mapping[str, Any], path: Path) -> bool:
        return raw.get("model_type") in SUPPORTED_MODEL_TYPES or bool(
            set(raw.get("architectures") or []) & set(SUPPORTED_ARCHITECTURES))


FAMILY = DiffusionGemmaFamily()
