"""Model shapes for the default model: a small DiffusionGemma text config plus the tiny vision config it carries."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from engine.testing.tiny import TINY_VISION


@dataclass(frozen=True)
class ModelShape:
    """Text-model shape. Sliding and full layers both see the whole context when `sliding_window` exceeds the
    context + canvas budget (REFERENCE §6: otherwise only full layers see a suffix-first context's suffix)."""

    vocab_size: int = 4096
    hidden_size: int = 256
    intermediate_size: int = 768
    num_hidden_layers: int = 6
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int = 64
    global_head_dim: int = 64
    num_global_key_value_heads: int = 2
    sliding_window: int = 512
    full_every: int = 3  # every `full_every`-th layer is full attention (and always the last)
    num_experts: int = 2
    top_k_experts: int = 1
    moe_intermediate_size: int = 128

    def __post_init__(self) -> None:
        if self.hidden_size % self.num_attention_heads or self.num_attention_heads % self.num_key_value_heads:
            raise ValueError("heads must divide hidden size and KV heads must divide heads")
        if not 1 <= self.top_k_experts <= self.num_experts or self.num_hidden_layers < 1 or self.full_every < 1:
            raise ValueError("bad MoE or layer counts")

    def layer_types(self) -> list[str]:
        n = self.num_hidden_layers
        return [
            "full_attention" if (i + 1) % self.full_every == 0 or i == n - 1 else "sliding_attention" for i in range(n)
        ]

    def hf_config(self, canvas_length: int = 16, max_position_embeddings: int = 4096):
        from transformers import DiffusionGemmaConfig

        text = {k: v for k, v in asdict(self).items() if k != "full_every"}
        text.update(layer_types=self.layer_types(), max_position_embeddings=max_position_embeddings)
        return DiffusionGemmaConfig(text_config=text, vision_config=dict(TINY_VISION), canvas_length=canvas_length)


SHAPES = {
    "tiny": ModelShape(
        vocab_size=4096,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=32,
        global_head_dim=32,
        num_global_key_value_heads=1,
        moe_intermediate_size=32,
        full_every=2,
    ),
    "small": ModelShape(
        hidden_size=192,
        intermediate_size=512,
        num_hidden_layers=4,
        num_attention_heads=3,
        num_key_value_heads=1,
        global_head_dim=64,
        num_global_key_value_heads=1,
        moe_intermediate_size=96,
        full_every=2,
    ),
    "base": ModelShape(),
    "wide": ModelShape(
        hidden_size=320,
        intermediate_size=960,
        num_hidden_layers=6,
        num_attention_heads=5,
        num_key_value_heads=1,
        global_head_dim=64,
        num_global_key_value_heads=1,
        moe_intermediate_size=160,
    ),
}
