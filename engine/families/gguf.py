"""Dream and LLaDA GGUF files (llama.cpp's `dream` / `llada` architectures) as mask-diffusion engines: which family
a GGUF is (its `general.architecture`), and the engine loaded from it.

The file is read by engine.formats.gguf_mdm (the HF config.json dict the published checkpoint carries, every tensor
under its HF name, dequantized by this engine's dequantizers one at a time into the serving dtype), the network is
the family's own (its `dense_config` and `rename`, as for safetensors). The tokenizer: an HF tokenizer.json beside
the file wins (as for DiffusionGemma GGUFs), else the one the file's `tokenizer.ggml.*` tables hold
(engine.formats.gguf_tokenizer), else none (the id-based API only; the reason is the tokenizer source). The mask
id, eos ids (eos, then eot/eom as llama.cpp ends on them) and `add_bos_token` come from the metadata; the sampler
starts from the family's defaults (a GGUF carries no generation_config.json). What differs from what the families
serve is refused by name (GGUFError / ConfigError, one line)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from engine.config import ConfigError
from engine.formats import gguf
from engine.formats.gguf_mdm import ARCHES, open_mdm

if TYPE_CHECKING:
    from engine.families.contract import Family, MaskFamily

E = TypeVar("E")  # the engine class (engine.families.mask_engine.MaskEngine, which calls this module)

GGUF_SOURCE = gguf.SOURCE  # "gguf metadata": where the mask and eos ids were read


def architecture(path: str | Path) -> str | None:
    """`general.architecture` of the GGUF at `path` (a file, or a directory holding one); None when it cannot be
    read (the DiffusionGemma loader then names what is wrong with the file)."""
    return gguf.architecture(path)


def family_of_gguf(path: str | Path, families: Sequence[Family]) -> Family:
    """The family whose name is the file's architecture (dream, llada), else the first (DiffusionGemma's GGUF)."""
    arch = architecture(path)
    if arch in ARCHES:
        return next(f for f in families if f.name == arch)
    return families[0]


def summary(path: str | Path) -> dict[str, Any]:
    """What `dg-lsp --check` shows of a GGUF before loading it (engine.formats.gguf.summary for DiffusionGemma's)."""
    if architecture(path) not in ARCHES:
        return gguf.summary(path)
    arch, _, info, _ = open_mdm(path)
    counts = info.type_counts()
    return {"format": "gguf", "architecture": arch, "files": [str(f) for f in info.files],
            "file_type": info.fields.get("general.file_type"), "tensor_types": counts,
            "tensors": sum(c["tensors"] for c in counts.values()),
            "weights": "dequantized at load into the serving dtype (mask-diffusion families keep no packed blocks)"}


def _tokenizer(path: Path, fields: Mapping[str, Any], where: str) -> tuple[Any, str]:
    """(tokenizer or None, where it came from): tokenizer.json beside the file, else the file's tables."""
    from tokenizers import Tokenizer

    from engine.formats.gguf_tokenizer import tokenizer_from_fields, unsupported

    beside = gguf.tokenizer_dir(path) / "tokenizer.json"
    if beside.is_file():
        return Tokenizer.from_file(str(beside)), f"{beside} (beside the checkpoint)"
    why = unsupported(dict(fields))
    if why is not None:
        return None, f"none: {why}"
    return tokenizer_from_fields(dict(fields), where), gguf.TOKENIZER_SOURCE


def load_gguf(cls: Callable[..., E], family: MaskFamily, path: Path, *, device: Any = "auto", dtype: Any = "auto",
              prompt_format: str = "auto", sampler: Mapping[str, Any] | None = None,
              weights: str = "auto") -> E:
    """`MaskEngine.load` for a dream / llada GGUF file (see the module docstring)."""
    from engine.base import resolve_device, resolve_dtype
    from engine.families.checkpoint import FamilyCheckpoint, load_dense, resolve_settings
    from engine.prompts.mask import MaskInfillFormat

    family.traits.refuse(family.name, "weights", weights, ("auto", *family.traits.weight_formats))
    family.traits.refuse(family.name, "prompt format", prompt_format, ("auto", *family.traits.prompt_formats))
    arch, raw, info, reads = open_mdm(path)
    where, fields = str(info.files[0]), info.fields
    if arch != family.name:
        raise ConfigError(f"{where}: architecture {arch!r} is not the {family.name} family's")
    if raw.get("mask_token_id") is None:
        raise ConfigError(f"{where}: no tokenizer.ggml.mask_token_id: not a mask-diffusion file")
    if raw.get("eos_token_id") is None:
        raise ConfigError(f"{where}: no tokenizer.ggml.eos_token_id")
    eos = (int(raw["eos_token_id"]),) + tuple(
        int(fields[k]) for k in ("tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id")
        if k in fields and int(fields[k]) != int(raw["eos_token_id"]))
    text = family.dense_config(raw, int(raw["mask_token_id"]), eos)
    sampler = dict(sampler or {})
    dual = sampler.pop("dual_cache", None)  # the engine's own setting, as MaskEngine.load reads it
    if dual is not None and (isinstance(dual, bool) or not isinstance(dual, int) or dual < 1):
        raise ConfigError(f"dual_cache must be a refresh interval in steps (an int >= 1), got {dual!r}")
    settings, sources = resolve_settings(family.settings, {}, sampler, family.name)
    sources["eos_token_ids"] = sources["mask_token_id"] = GGUF_SOURCE
    dev = resolve_device(device)
    dt = resolve_dtype(dtype, dev)
    model = load_dense(reads, text, family.rename, dev, dt)
    tokenizer, tok_source = _tokenizer(path, fields, where)
    fmt = None
    if tokenizer is not None:
        bos = fields.get("tokenizer.ggml.bos_token_id") if fields.get("tokenizer.ggml.add_bos_token") else None
        fmt = MaskInfillFormat(mask_id=text.mask_token_id, bos_id=None if bos is None else int(bos))
    config = FamilyCheckpoint(text=text, sampler=settings, sources=sources, eos_token_ids=eos,
                              canvas_length=min(fmt.canvas_lengths) if fmt else 32)
    engine = cls(family, model, config, tokenizer, fmt, dev, dt, path)
    engine.tokenizer_source, engine.dual_cache = tok_source, dual
    return engine
