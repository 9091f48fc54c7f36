"""The benchmarks' random checkpoint: the default model's architecture and size class with random weights, for runs
on a machine without the shipped model (or to compare implementations on the same weights).

BENCH_SHAPE is the DiffusionGemma shape of the shipped model's size class (12.6M parameters with the 8,192-token
vocabulary of `build_bench_checkpoint`); bench.common.pick_model builds it with the tiny test tokenizer when a
language server needs one. Used by bench.common and bench.engine_speed; it imports no benchmark.
"""

from __future__ import annotations

from pathlib import Path

BENCH_SHAPE = dict(
    hidden_size=256, intermediate_size=512, num_hidden_layers=6, num_attention_heads=4, num_key_value_heads=2,
    head_dim=64, global_head_dim=128, num_global_key_value_heads=1, sliding_window=1024,
    layer_types=["sliding_attention", "sliding_attention", "full_attention"] * 2,
    num_experts=4, top_k_experts=2, moe_intermediate_size=256,
)


def build_bench_checkpoint(root: Path, canvas: int) -> Path:
    """A random checkpoint of BENCH_SHAPE under `root`/bench (vocabulary 8,192, no tokenizer), `canvas` its canvas."""
    from engine.testing.tiny import build_tiny_checkpoint

    return build_tiny_checkpoint(root / "bench", BENCH_SHAPE, canvas_length=canvas, vocab_size=8192,
                                 with_tokenizer=False)
