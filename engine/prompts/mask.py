"""The mask-infill prompt format of mask-diffusion families (Dream, Open-dCoder, LLaDA): `[prefix][mask][suffix]`,
no template and no sentinels. One mask id marks where the hole is; the engine widens it into the canvas (as many
masks as the canvas length the server picked for the hole) and fills it with the whole window in view. A mask id
the user's own text tokenizes to is dropped from the prefix and suffix, so the hole is never ambiguous."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from engine.seam import HoleInfo
from engine.tokens import INFILL_FILE

DEFAULT_CANVAS_LENGTHS = (16, 32, 64)


@dataclass(frozen=True)
class MaskInfillFormat:
    name: ClassVar[str] = "mask"  # the prompt format's name at the engine seam (engine.seam.PromptFormat)
    canvas_headroom: ClassVar[int] = 0  # the canvas holds only code
    mask_id: int
    bos_id: int | None = None  # prepended when the tokenizer's config adds a bos token
    canvas_lengths: tuple[int, ...] = DEFAULT_CANVAS_LENGTHS
    max_context_tokens: int | None = None

    def __post_init__(self) -> None:
        if not self.canvas_lengths or any(c <= 0 for c in self.canvas_lengths):
            raise ValueError(f"canvas_lengths must be positive, got {self.canvas_lengths}")

    def context_budget(self, requested: int) -> int:
        return requested if self.max_context_tokens is None else min(requested, self.max_context_tokens)

    def context(self, prefix_ids: list[int], suffix_ids: list[int], hole: HoleInfo | None = None) -> list[int]:
        keep = [t for t in prefix_ids if t != self.mask_id], [t for t in suffix_ids if t != self.mask_id]
        return [*([self.bos_id] if self.bos_id is not None else []), *keep[0], self.mask_id, *keep[1]]

    def answer(self, text: str, prefix: str = "", suffix: str = "") -> str:
        return text

    @classmethod
    def load(cls, checkpoint: Path, mask_id: int, bos_id: int | None) -> MaskInfillFormat:
        """infill.json's canvas_lengths and max_context_tokens when the checkpoint has one (else the defaults)."""
        f = Path(checkpoint) / INFILL_FILE
        body = json.loads(f.read_text()) if f.is_file() else {}
        return cls(mask_id=mask_id, bos_id=bos_id,
                   canvas_lengths=tuple(body.get("canvas_lengths") or DEFAULT_CANVAS_LENGTHS),
                   max_context_tokens=body.get("max_context_tokens"))
