"""Tiny random DiffusionGemma checkpoints for tests and benchmarks, written with transformers' `save_pretrained`, and
the two comparisons with transformers that the parity tests and bench.parity share (logits, generated ids)."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from engine.tokens import InfillFormat, train_bpe

# Shapes that exercise every code path: sliding + full layers, a global head dim and KV-head count that differ
# from the local ones, MoE, tied embeddings. Vocabulary comes from the tokenizer when one is built.
TINY_VARIANTS: dict[str, dict] = {
    "mixed": dict(
        hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
        head_dim=16, global_head_dim=32, num_global_key_value_heads=1, sliding_window=8,
        layer_types=["sliding_attention", "full_attention", "full_attention"],
        num_experts=4, top_k_experts=2, moe_intermediate_size=32,
    ),
    "sliding_heavy": dict(
        hidden_size=48, intermediate_size=96, num_hidden_layers=4, num_attention_heads=2, num_key_value_heads=1,
        head_dim=24, global_head_dim=48, num_global_key_value_heads=1, sliding_window=12,
        layer_types=["sliding_attention", "sliding_attention", "sliding_attention", "full_attention"],
        num_experts=8, top_k_experts=3, moe_intermediate_size=16,
    ),
    "mha_full": dict(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
        head_dim=8, global_head_dim=16, num_global_key_value_heads=2, sliding_window=6,
        layer_types=["sliding_attention", "full_attention"],
        num_experts=2, top_k_experts=1, moe_intermediate_size=24,
        rope_parameters={
            "sliding_attention": {"rope_type": "default", "rope_theta": 500.0},
            "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.5, "rope_theta": 20000.0},
        },
    ),
}

# Configs that transformers loads differently from the common case (issue 13's engine fixes): name ->
# (text-config changes over "mixed", top-level config changes).
ENGINE_FIX_VARIANTS: dict[str, tuple[dict, dict]] = {
    "exact_gelu": ({"hidden_activation": "gelu"}, {}),
    "attention_bias": ({"attention_bias": True}, {}),  # biases are never tied: the encoder has its own
    "untied": ({}, {"tie_word_embeddings": False}),  # own LM head and a whole encoder of its own
    "text_untied_flag": ({"tie_word_embeddings": False}, {}),  # ignored by transformers: still tied
}

TINY_VISION = dict(
    model_type="gemma4_vision", hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
    num_key_value_heads=2, head_dim=8, patch_size=4, position_embedding_size=16, pooling_kernel_size=2,
)

SAMPLE_CODE = [
    "def add(a, b):\n    return a + b\n",
    "for i in range(10):\n    print(i)\n",
    "class Point:\n    def __init__(self, x, y):\n        self.x = x\n        self.y = y\n",
    "import os\nimport sys\n\nif __name__ == '__main__':\n    sys.exit(main())\n",
    "function add(a, b) {\n  return a + b;\n}\nconst xs = [1, 2, 3].map((x) => x * 2);\n",
    "fn main() {\n    let v: Vec<i32> = vec![1, 2, 3];\n    println!(\"{:?}\", v);\n}\n",
    "package main\n\nfunc main() {\n\tfmt.Println(\"hi\")\n}\n",
    "# comment with unicode: café 日本語 😀\nvalue = {'key': [1, 2.5, None, True]}\n",
]


def tiny_tokenizer(vocab_size: int = 384):
    return train_bpe(SAMPLE_CODE * 4, vocab_size=vocab_size)


def random_model(config, seed: int):
    """transformers' DiffusionGemmaForBlockDiffusion with seeded random text weights. Norm weights, router scales,
    biases and layer scalars are randomised too (their defaults are ones or zeros, which would hide a bug that drops
    them or confuses the encoder's with the decoder's)."""
    from transformers import DiffusionGemmaForBlockDiffusion

    gen = torch.Generator().manual_seed(seed)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = DiffusionGemmaForBlockDiffusion(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "vision" in name:
                continue
            if p.dim() == 1:  # norm weights, router scales, biases
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(torch.randn(p.shape, generator=gen) * (1.0 / p.shape[-1] ** 0.5))
        for name, b in model.named_buffers():
            if name.endswith("layer_scalar"):
                b.copy_(0.5 + torch.rand(b.shape, generator=gen))
    return model


def build_tiny_checkpoint(
    path: str | Path,
    variant: str | dict = "mixed",
    *,
    canvas_length: int = 16,
    seed: int = 0,
    vocab_size: int | None = None,
    with_tokenizer: bool = True,
    canvas_lengths: tuple[int, ...] = (16, 32, 64),
    generation: dict | None = None,
    top: dict | None = None,
) -> Path:
    """Build a random-weight checkpoint that both transformers and our engine load. `variant` names a shape in
    TINY_VARIANTS or ENGINE_FIX_VARIANTS, or is a text-config dict; `top` sets top-level config keys.
    Weights: `random_model`.
    """
    from transformers import DiffusionGemmaConfig

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tok = tiny_tokenizer() if with_tokenizer else None
    if vocab_size is None:
        vocab_size = tok.get_vocab_size() if tok is not None else 512
    top = dict(top or {})
    if isinstance(variant, str) and variant in ENGINE_FIX_VARIANTS:
        text_changes, top_changes = ENGINE_FIX_VARIANTS[variant]
        variant, top = dict(TINY_VARIANTS["mixed"], **text_changes), {**top_changes, **top}
    shape = TINY_VARIANTS[variant] if isinstance(variant, str) else variant
    text = dict(shape, vocab_size=vocab_size, max_position_embeddings=16384)
    config = DiffusionGemmaConfig(text_config=text, vision_config=dict(TINY_VISION), canvas_length=canvas_length,
                                  **top)
    random_model(config, seed).save_pretrained(path)
    if generation is not None:
        gc_path = path / "generation_config.json"
        body = json.loads(gc_path.read_text()) if gc_path.exists() else {}
        body.update(generation)
        gc_path.write_text(json.dumps(body, indent=2))
    if tok is not None:
        tok.save(str(path / "tokenizer.json"))
        InfillFormat(canvas_lengths=canvas_lengths).save(path)
    return path


def logit_diff(eng, ref, ctx: torch.Tensor, canvas: torch.Tensor, sc: torch.Tensor, cache=None) -> float:
    """max |engine - transformers| over the soft-capped logits of one decoder pass: canvas (1, C) ids after the
    context ctx (1, T), self-conditioning logits sc (1, C, V). transformers encodes the context in one pass; the
    engine too, unless `cache` (its KVCache of ctx, e.g. from the prefix-cache path) is given. `eng` an
    engine.engine.Engine, `ref` a DiffusionGemmaForBlockDiffusion of the same checkpoint."""
    from transformers.cache_utils import DynamicCache

    from engine.model.kv_cache import KVCache

    with torch.no_grad():
        ref_cache = DynamicCache(config=ref.config.get_text_config(decoder=True))
        ref.model.encoder(input_ids=ctx, cache=ref_cache)
        want = ref(decoder_input_ids=canvas, cache=ref_cache, self_conditioning_logits=sc).logits
        soft = eng.model.soft_embedding(torch.softmax(sc, dim=-1, dtype=torch.float32))
        got = eng.model.decode(canvas, cache if cache is not None else eng.model.encode(ctx, KVCache()), soft)
    return (got - want).abs().max().item()


def generated_ids(eng, ref, ctx: list[int], seed: int, max_new_tokens: int,
                  steps: int | None) -> tuple[list[int], list[int]]:
    """(transformers' `generate` ids cut at the first eos, pads dropped; the engine's in reference-compatible mode)
    for the same context and seed; steps None: each side reads generation_config.json's."""
    eos, pad = eng.config.eos_token_ids, eng.config.text.pad_token_id
    kw = {} if steps is None else {"max_denoising_steps": steps}
    torch.manual_seed(seed)
    seq = ref.generate(torch.tensor([ctx]), max_new_tokens=max_new_tokens, **kw).sequences[0, len(ctx):].tolist()
    stop = next((i for i, t in enumerate(seq) if t in eos), len(seq))
    want = [t for t in seq[:stop] if t != pad]
    got = eng.generate_ids(ctx, max_new_tokens=max_new_tokens, steps=steps, seed=seed, reference_compatible=True)
    return want, got
