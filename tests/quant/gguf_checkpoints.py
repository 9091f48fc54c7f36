"""Tiny DiffusionGemma GGUFs for the GGUF tests (imported by name): written under the real names and keys by
engine.formats.gguf_write, and the safetensors twin holding gguf-py's dequantization of every stored tensor."""

from __future__ import annotations

from pathlib import Path

from engine.testing.gguf_twin import gguf_twin

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
    GGUF's, under their HF names, laid out at the GGUF's alignment (engine.testing.gguf_twin)."""
    return gguf_twin(gguf_path, src, dst)
