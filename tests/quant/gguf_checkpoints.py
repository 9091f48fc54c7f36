"""Tiny DiffusionGemma GGUFs for the GGUF tests (imported by name): written under the real names and keys by
engine.formats.gguf_write, and the safetensors twin holding gguf-py's dequantization of every stored tensor."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file

from engine.formats import gguf as G

# hidden 256 and head dims of 128 / 256 make whole K-blocks (attention, dense MLP, experts' gate_up, embedding);
# the down projections' rows (64, 32) are not, so they fall back to Q5_0 / Q8_0 as in the published files.
GGUF_SHAPE = dict(
    hidden_size=256, intermediate_size=64, num_hidden_layers=3, num_attention_heads=2, num_key_value_heads=1,
    head_dim=128, global_head_dim=256, num_global_key_value_heads=1, sliding_window=8,
    layer_types=["sliding_attention", "full_attention", "full_attention"],
    num_experts=4, top_k_experts=2, moe_intermediate_size=32,
)


def dequantized_twin(gguf_path: Path, src: Path, dst: Path) -> Path:
    """A safetensors checkpoint (src's config and tokenizer) whose tensors are gguf-py's dequantization of the
    GGUF's, under their HF names."""
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize

    dst.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.suffix == ".json" and f.name != "model.safetensors.index.json":
            shutil.copy(f, dst / f.name)
    info = G.open_gguf(gguf_path)
    out = {}
    for name, t in info.tensors.items():
        if name in G.IGNORED:
            continue
        w = dequantize(np.asarray(t.data), GGMLQuantizationType[t.qtype]).astype(np.float32)
        out[G.hf_name(name)] = torch.from_numpy(w.copy()).reshape(t.shape)
    save_file(out, str(dst / "model.safetensors"))
    return dst
