"""A checkpoint's tokenizer and prompt format, read from its small files without loading weights or torch.

Remote backends tokenize and lay out prompts in the language server, exactly as the embedded engine would
(engine.prompts.load_prompt_format, the function `Engine.from_pretrained` uses): the service backend reads the
files the service itself loaded (fetched once from it, checked by sha256); the OpenAI backend reads a local
directory holding the checkpoint's tokenizer and config files (no weights).

A mask-diffusion family's checkpoint (Dream, Open-dCoder, LLaDA: engine.families.registry) is read through its
family's own config reading, with the mask-infill prompt format (engine.prompts.mask), as `MaskEngine.load` reads
it; only such a checkpoint imports the family modules (and so torch): DiffusionGemma's stays torch-free.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

import engine
from engine.config import SUPPORTED_ARCHITECTURES, SUPPORTED_MODEL_TYPES, load_config
from engine.prompts import load_prompt_format
from engine.seam import PromptFormat
from engine.tokens import splits_before_newline


def default_model_dir() -> Path:
    """The shipped model (engine.engine.default_model_path, without importing torch)."""
    return Path(engine.__file__).resolve().parent / "default_model"


@dataclass(frozen=True)
class LocalCheckpoint:
    path: Path
    tokenizer: Tokenizer
    prompt_format: PromptFormat
    splits_before_newline: bool
    default_steps: int = 48  # the checkpoint's max_denoising_steps: what the embedded engine runs with steps unset
    vocab_size: int = 0  # what a seed canvas laid out here needs (engine.seam.seed_canvases)
    eos_id: int = 1
    pad_id: int = 0
    family: str = "diffusion_gemma"  # engine.families.registry's name of the checkpoint's family

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=False) if ids else ""


def load_local(path: str | Path, prompt_format: str = "auto") -> LocalCheckpoint:
    """The tokenizer and prompt format ("auto", "fim" or "chat", as the promptFormat setting) of the checkpoint
    files in `path`: tokenizer.json and config.json at least, and the chat template files of a chat checkpoint."""
    path = Path(path).expanduser()
    missing = [f for f in ("tokenizer.json", "config.json") if not (path / f).is_file()]
    if missing:
        raise FileNotFoundError(f"{path} has no {' or '.join(missing)}: the prompt is laid out in the language "
                                "server, so it needs the checkpoint's tokenizer and config files locally (modelPath "
                                "names their directory; the weights are not needed)")
    tok = Tokenizer.from_file(str(path / "tokenizer.json"))
    raw = json.loads((path / "config.json").read_text())
    if "dg_family" in raw:  # written by the service for a family's GGUF (engine.service.app.family_client_config)
        return _served_family(path, tok, raw)
    if not _diffusion_gemma(raw):
        return _load_family(path, tok, prompt_format)
    config = load_config(path)
    fmt = load_prompt_format(path, tok, config, prompt_format)
    return LocalCheckpoint(path, tok, fmt, splits_before_newline(tok), config.sampler.max_denoising_steps,
                           config.text.vocab_size, config.eos_token_ids[0], config.text.pad_token_id)


def _diffusion_gemma(raw: dict[str, Any]) -> bool:
    """engine.families.diffusion_gemma's test, without importing the families (torch)."""
    return raw.get("model_type") in SUPPORTED_MODEL_TYPES or bool(
        set(raw.get("architectures") or []) & set(SUPPORTED_ARCHITECTURES))


def _load_family(path: Path, tok: Tokenizer, prompt_format: str) -> LocalCheckpoint:
    """A mask-diffusion family's checkpoint, read as engine.families.mask_engine.MaskEngine.load reads it (the
    registry refuses, by name, a config no family reads). `default_steps`: generation_config.json's `steps`, else
    the smallest canvas length (upstream's unset steps: one step per canvas token)."""
    from engine.families.checkpoint import read_json, resolve_settings
    from engine.families.contract import MaskFamily
    from engine.families.registry import family_of
    from engine.prompts.mask import MaskInfillFormat

    family = family_of(path)
    if not isinstance(family, MaskFamily):  # pragma: no cover -- DiffusionGemma's configs are read above
        raise ValueError(f"{path}: the {family.name} family's checkpoint was not recognised as such")
    family.traits.refuse(family.name, "prompt format", prompt_format, ("auto", *family.traits.prompt_formats))
    text = family.read_config(path)
    settings, _ = resolve_settings(family.settings, read_json(path / "generation_config.json"), {}, family.name)
    bos = text.bos_token_id if read_json(path / "tokenizer_config.json").get("add_bos_token") else None
    fmt = MaskInfillFormat.load(path, text.mask_token_id, bos)
    steps = getattr(settings, "steps", None) or min(fmt.canvas_lengths)
    return LocalCheckpoint(path, tok, fmt, splits_before_newline(tok), int(steps), text.vocab_size,
                           text.eos_token_ids[0], text.pad_token_id, family.name)


def _served_family(path: Path, tok: Tokenizer, raw: dict[str, Any]) -> LocalCheckpoint:
    """The numbers the service wrote for a mask-diffusion family's GGUF, laid out as its engine lays them out."""
    from engine.prompts.mask import DEFAULT_CANVAS_LENGTHS, MaskInfillFormat

    lengths = tuple(int(c) for c in raw.get("canvas_lengths") or DEFAULT_CANVAS_LENGTHS)
    bos = raw.get("bos_id")
    fmt = MaskInfillFormat(mask_id=int(raw["mask_token_id"]), bos_id=None if bos is None else int(bos),
                           canvas_lengths=lengths)
    eos = raw.get("eos_token_id") or [1]
    return LocalCheckpoint(path, tok, fmt, splits_before_newline(tok), int(raw.get("steps") or min(lengths)),
                           int(raw["vocab_size"]), int(eos[0]), int(raw.get("pad_token_id") or 0),
                           str(raw["dg_family"]))
