"""A checkpoint -> its config, tokenizer and DiffusionGemmaText on the target device (built on the meta device, then
filled), each read in the checkpoint's format.

Single-file and sharded (model.safetensors.index.json) checkpoints, plain or compressed-tensors FP8, or a llama.cpp
GGUF file (engine.formats.gguf: its tensors under their HF names); vision-tower
weights are skipped (the engine is text-only). Encoder tensors are tied to the decoder's exactly where transformers
ties them (`_tied_weights_keys` of DiffusionGemmaModel, only under a tied top-level config, never biases or layer
scalars); every other encoder tensor is loaded into the model's separate encoder. Never unpickles anything.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer

from engine.config import CheckpointConfig, TextConfig, load_config
from engine.formats import gguf
from engine.model.transformer import DiffusionGemmaText, map_name
from engine.quant.checkpoint import tensors as source_tensors
from engine.quant.plan import WeightPlan, one_heap_arena, trim_heap


class CheckpointError(ValueError):
    """Missing, unexpected or mis-shaped tensors; the message lists them."""


def refused(exc: BaseException) -> bool:
    """Whether `exc` is a checkpoint refused by name (bad input, not a bug: no such file, a broken GGUF, a config or
    tensor set the engine cannot serve): its one-line message is all a log needs, no traceback."""
    from engine.config import ConfigError

    return isinstance(exc, (gguf.GGUFError, CheckpointError, ConfigError, FileNotFoundError))


# Encoder tensors (names after "model.encoder.language_model.") that transformers ties to the decoder's under a tied
# top-level config: its patterns match weights, scales and expert tensors, not biases or buffers.
_TIED_IN_REFERENCE = re.compile(
    r"^(embed_tokens\.weight|norm\.weight|layers\.\d+\.(?:[^.]+\.)*(?:weight|scale|per_expert_scale|gate_up_proj"
    r"|down_proj))$")
_ENCODER = "model.encoder.language_model."


def load_checkpoint_config(path: Path, overrides: Mapping[str, Any] | None = None) -> CheckpointConfig:
    """The config of a checkpoint directory (engine.config.load_config) or of a llama.cpp GGUF file (its metadata),
    `overrides` applied (engine.config.apply_overrides)."""
    if gguf.is_gguf(path):
        return gguf.checkpoint_config(gguf.open_gguf(path), overrides)
    return load_config(path, overrides)


def checkpoint_files(path: Path) -> list[Path]:
    index = path / "model.safetensors.index.json"
    if index.is_file():
        weight_map = json.loads(index.read_text()).get("weight_map", {})
        files = sorted({path / f for f in weight_map.values()})
    elif (path / "model.safetensors").is_file():
        files = [path / "model.safetensors"]
    else:
        raise CheckpointError(f"{path} has neither model.safetensors nor model.safetensors.index.json")
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise CheckpointError(f"shards listed in the index are missing: {missing}")
    return files


def load_model(path: str | Path, cfg: TextConfig, device: torch.device, dtype: torch.dtype,
               weights: WeightPlan | None = None) -> DiffusionGemmaText:
    """`weights`: how each weight is stored (engine.quant.plan); None keeps every tensor in `dtype`."""
    path = Path(path)
    with torch.device("meta"):
        model = DiffusionGemmaText(cfg)
    expected = {k: v for k, v in model.state_dict(keep_vars=True).items()}
    plan = weights or WeightPlan("bf16", device, dtype)
    state: dict[str, torch.Tensor] = {}
    seen: set[str] = set()
    unexpected: list[str] = []
    # One tensor at a time: quantized formats convert each target as it is read (engine.quant.plan).
    source = gguf.tensors(path, cfg) if gguf.is_gguf(path) else source_tensors(path, checkpoint_files(path))
    for name, shape, read in source:
        key = map_name(name)
        if key is None:
            continue
        if key == "lm_head" and cfg.tie_word_embeddings:
            continue  # tied: the embedding is the head
        if name.startswith(_ENCODER) and not key.endswith("_layer_scalar"):
            rest = name.removeprefix(_ENCODER)
            if rest == "norm.weight" or (cfg.tie_word_embeddings and _TIED_IN_REFERENCE.match(rest)):
                continue  # the final norm never reaches the KV cache; tied tensors are the decoder's
            key = f"enc_{key}"  # enc_layers.* / enc_embed_tokens
        if key not in expected:
            unexpected.append(name)
            continue
        if tuple(shape) != tuple(expected[key].shape):
            raise CheckpointError(f"{name}: shape {tuple(shape)} != expected {tuple(expected[key].shape)}")
        seen.add(key)
        # layer scalars and norm weights stay exact; everything else is cast to the serving dtype or quantized
        state.update(plan.convert(key, read()))
    if model.enc_layers is not None:
        _share_encoder(state, expected, cfg.tie_word_embeddings)
        for key, entries in plan.share_encoder(expected, cfg.tie_word_embeddings).items():
            state.update(entries)
            seen.add(key)
    missing = sorted(set(expected) - seen - set(state))
    if missing or unexpected:
        raise CheckpointError(
            f"checkpoint {path} does not match the config: missing {missing[:20]}"
            f"{' ...' if len(missing) > 20 else ''}; unexpected {unexpected[:20]}"
            f"{' ...' if len(unexpected) > 20 else ''}"
        )
    plan.finish(model)
    model.load_state_dict(state, assign=True, strict=True)
    del state
    trim_heap()  # the reader's and converters' freed temporaries back to the OS
    if device.type == "cpu":
        one_heap_arena()  # the matmuls' worker threads share the main heap (freed blocks are reused, not kept apart)
    return model.eval().requires_grad_(False)


def _share_encoder(state: dict[str, torch.Tensor], expected: dict, tied: bool) -> None:
    """Fill the separate encoder's tensors that are the decoder's (tied in the reference, or equal to it) with the
    decoder's tensor objects, so they share memory. Encoder tensors the checkpoint must provide stay missing."""
    for key in expected:
        if not key.startswith("enc_"):
            continue
        dec = key.removeprefix("enc_")
        if dec not in state:
            continue
        if key not in state:
            # layer scalars: the encoder's is layers.i.enc_layer_scalar, the decoder's is unused by the encoder
            if dec.endswith("_layer_scalar") or (tied and not dec.endswith(".bias")):
                state[key] = state[dec]
        elif state[key].shape == state[dec].shape and torch.equal(state[key], state[dec]):
            state[key] = state[dec]


def load_tokenizer(path: Path, side: Path) -> tuple[Tokenizer | None, tuple[str, str] | None, str]:
    """(tokenizer, chat template passed to the prompt formats, where the tokenizer came from). An HF tokenizer.json
    beside the checkpoint wins; a GGUF without one brings its own (tokenizer.ggml.*), and its
    `tokenizer.chat_template` is used where no template file is beside it."""
    tok_file = side / "tokenizer.json"
    beside = tok_file.is_file()
    tokenizer = Tokenizer.from_file(str(tok_file)) if beside else None
    source = f"{tok_file} (beside the checkpoint)" if beside else "none: no tokenizer.json beside the checkpoint"
    if not gguf.is_gguf(path):
        return tokenizer, None, source
    rebuilt, text, why = gguf.file_prompt(path, tokenizer=not beside)
    if rebuilt is not None:
        tokenizer, source = rebuilt, gguf.TOKENIZER_SOURCE
    elif not beside:
        source = f"none: {why}"
    return tokenizer, (text, gguf.TEMPLATE_SOURCE) if text else None, source
