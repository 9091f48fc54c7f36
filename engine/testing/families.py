"""Tiny mask-diffusion checkpoints laid out like the published ones (REFERENCE §2), from a transformers reference
model with random weights, so a test can compare our forward with transformers' on the very weights it loads.

- Dream / Dream-Coder / DiffuCoder: config.json with `model_type` "Dream", `architectures` ["DreamModel"],
  `mask_token_id`, `rope_theta` at the top (transformers 4 layout), Qwen2 tensor names, bf16 shards with
  model.safetensors.index.json, a Qwen-style byte-level tokenizer.json whose added tokens hold `<|endoftext|>` and
  `<|mask|>` (not next to each other), tokenizer_config.json naming the mask token, generation_config.json;
- Open-dCoder: the same files with a stock Qwen2 config (`model_type` "qwen2", ["Qwen2ForCausalLM"], tied);
- LLaDA: OLMo-style config.json (`model_type` "llada", d_model, n_heads, ...) and tensor names
  (`model.transformer.blocks.{i}.q_proj`, `attn_out`, `ff_proj`, `up_proj`, `ff_out`, ...), `<|mdm_mask|>`.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

from engine.testing.tiny import SAMPLE_CODE

# Shapes: GQA and not, tied and untied, rope theta varied (each a (Qwen2|Llama)Config's keys)
DREAM_VARIANTS: dict[str, dict] = {
    "gqa_untied": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                       num_key_value_heads=2, rope_theta=1_000_000.0, tie_word_embeddings=False),
    "mha_tied": dict(hidden_size=48, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
                     num_key_value_heads=4, rope_theta=10_000.0, tie_word_embeddings=True),
    "gqa8_theta": dict(hidden_size=64, intermediate_size=80, num_hidden_layers=2, num_attention_heads=8,
                       num_key_value_heads=2, rope_theta=500_000.0, tie_word_embeddings=False),
}
LLADA_VARIANTS: dict[str, dict] = {
    "mha": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                rope_theta=500_000.0),
    "mha_theta": dict(hidden_size=48, intermediate_size=96, num_hidden_layers=3, num_attention_heads=6,
                      rope_theta=10_000.0),
    "mha_wide": dict(hidden_size=96, intermediate_size=64, num_hidden_layers=2, num_attention_heads=3,
                     rope_theta=1_000_000.0),
}
QWEN_SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|fim_prefix|>", "<|beginoftext|>", "<|mask|>"]
LLADA_SPECIAL = ["<|startoftext|>", "<|endoftext|>", "<|eot_id|>", "<|start_header_id|>", "<|mdm_mask|>"]


def byte_tokenizer(special: list[str], vocab_size: int = 320) -> Tokenizer:
    """A byte-level BPE (Qwen2/LLaDA style, no prefix space) with `special` added after the learned vocabulary."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(SAMPLE_CODE * 4, trainer=trainer)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in special])
    return tok


def _randomise(model: torch.nn.Module, seed: int) -> torch.nn.Module:
    """Every weight random, norms and biases too (ones and zeros would hide a dropped tensor)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _, p in model.named_parameters():
            if p.dim() == 1:
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(torch.randn(p.shape, generator=gen) * (1.0 / p.shape[-1] ** 0.5))
    return model.eval()


def _vocab(tok: Tokenizer) -> int:
    return -(-tok.get_vocab_size() // 64) * 64  # padded like the published embeddings


def qwen2_reference(variant: str | dict, tok: Tokenizer, seed: int = 0):
    """transformers' Qwen2ForCausalLM of a tiny shape with random weights (the parity oracle)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    shape = dict(DREAM_VARIANTS[variant] if isinstance(variant, str) else variant)
    theta = shape.pop("rope_theta")
    cfg = Qwen2Config(vocab_size=_vocab(tok), rope_parameters={"rope_type": "default", "rope_theta": theta},
                      max_position_embeddings=4096, rms_norm_eps=1e-6, **shape)
    torch.manual_seed(seed)
    return _randomise(Qwen2ForCausalLM(cfg), seed)


def llama_reference(variant: str | dict, tok: Tokenizer, seed: int = 0):
    """transformers' LlamaForCausalLM of a tiny LLaDA shape (MHA, no bias, untied) with random weights."""
    from transformers import LlamaConfig, LlamaForCausalLM

    shape = dict(LLADA_VARIANTS[variant] if isinstance(variant, str) else variant)
    theta = shape.pop("rope_theta")
    cfg = LlamaConfig(vocab_size=_vocab(tok), rope_parameters={"rope_type": "default", "rope_theta": theta},
                      num_key_value_heads=shape["num_attention_heads"], rms_norm_eps=1e-5, attention_bias=False,
                      mlp_bias=False, tie_word_embeddings=False, max_position_embeddings=4096, **shape)
    torch.manual_seed(seed)
    return _randomise(LlamaForCausalLM(cfg), seed)


def _write_shards(path: Path, tensors: dict[str, torch.Tensor], shards: int, dtype: torch.dtype) -> None:
    names = sorted(tensors)
    per = -(-len(names) // shards)
    weight_map, total = {}, 0
    for i in range(shards):
        file = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        part = {k: tensors[k].detach().to(dtype).contiguous() for k in names[i * per:(i + 1) * per]}
        save_file(part, str(path / file), metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(part, file))
        total += sum(t.numel() * t.element_size() for t in part.values())
    (path / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2) + "\n")


def _dump(path: Path, name: str, body: dict) -> None:
    (path / name).write_text(json.dumps(body, indent=2) + "\n")


def write_dream_checkpoint(path: str | Path, ref, tok: Tokenizer, *, layout: str = "dream",
                           generation: dict | None = None, dtype: torch.dtype = torch.bfloat16,
                           shards: int = 3) -> Path:
    """`ref` (a Qwen2ForCausalLM) written as a Dream ("dream") or Open-dCoder ("open_dcoder") checkpoint."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    c = ref.config
    ids = {t: tok.token_to_id(t) for t in QWEN_SPECIAL}
    eos, mask = ids["<|endoftext|>"], ids["<|mask|>"]
    body = dict(attention_dropout=0.0, bos_token_id=eos, eos_token_id=eos, hidden_act="silu",
                hidden_size=c.hidden_size, initializer_range=0.02, intermediate_size=c.intermediate_size,
                max_position_embeddings=c.max_position_embeddings, max_window_layers=c.num_hidden_layers,
                num_attention_heads=c.num_attention_heads, num_hidden_layers=c.num_hidden_layers,
                num_key_value_heads=c.num_key_value_heads, pad_token_id=eos, rms_norm_eps=c.rms_norm_eps,
                rope_scaling=None, rope_theta=c.rope_parameters["rope_theta"], sliding_window=None,
                tie_word_embeddings=c.tie_word_embeddings, torch_dtype="bfloat16", transformers_version="4.46.2",
                use_cache=True, use_sliding_window=False, vocab_size=c.vocab_size)
    if layout == "dream":
        body.update(architectures=["DreamModel"], model_type="Dream", mask_token_id=mask,
                    auto_map={"AutoConfig": "configuration_dream.DreamConfig",
                              "AutoModel": "modeling_dream.DreamModel"})
    elif layout == "open_dcoder":
        body.update(architectures=["Qwen2ForCausalLM"], model_type="qwen2")
    else:
        raise ValueError(f"layout must be dream or open_dcoder, got {layout!r}")
    _dump(path, "config.json", dict(sorted(body.items())))
    state = {k: v for k, v in ref.state_dict().items() if not (c.tie_word_embeddings and k == "lm_head.weight")}
    _write_shards(path, state, shards, dtype)
    _dump(path, "generation_config.json", {"bos_token_id": eos, "eos_token_id": eos, "pad_token_id": eos,
                                           **(generation or {}), "transformers_version": "4.46.2"})
    tok.save(str(path / "tokenizer.json"))
    _dump(path, "tokenizer_config.json", {
        "added_tokens_decoder": {str(ids[t]): {"content": t, "special": True} for t in QWEN_SPECIAL},
        "bos_token": None, "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>", "mask_token": "<|mask|>",
        "model_max_length": 131072, "tokenizer_class": "Qwen2Tokenizer", "clean_up_tokenization_spaces": False})
    return path


# LlamaForCausalLM names -> LLaDA's OLMo-style names (the inverse is engine.families.llada's rename)
_LLAMA_TO_LLADA = {"self_attn.q_proj": "q_proj", "self_attn.k_proj": "k_proj", "self_attn.v_proj": "v_proj",
                   "self_attn.o_proj": "attn_out", "mlp.gate_proj": "ff_proj", "mlp.up_proj": "up_proj",
                   "mlp.down_proj": "ff_out", "input_layernorm": "attn_norm", "post_attention_layernorm": "ff_norm"}


def llada_name(name: str) -> str:
    if name == "model.embed_tokens.weight":
        return "model.transformer.wte.weight"
    if name == "model.norm.weight":
        return "model.transformer.ln_f.weight"
    if name == "lm_head.weight":
        return "model.transformer.ff_out.weight"
    _, _, i, rest = name.split(".", 3)
    module, _, leaf = rest.rpartition(".")
    return f"model.transformer.blocks.{i}.{_LLAMA_TO_LLADA[module]}.{leaf}"


def write_llada_checkpoint(path: str | Path, ref, tok: Tokenizer, *, generation: dict | None = None,
                           dtype: torch.dtype = torch.bfloat16, shards: int = 2) -> Path:
    """`ref` (a LlamaForCausalLM, MHA, untied) written in LLaDA-8B's published layout."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    c = ref.config
    ids = {t: tok.token_to_id(t) for t in LLADA_SPECIAL}
    body = dict(activation_type="silu", alibi=False, architectures=["LLaDAModelLM"], attention_layer_norm=False,
                block_type="llama", d_model=c.hidden_size, embedding_size=c.vocab_size,
                eos_token_id=ids["<|endoftext|>"], include_bias=False, include_qkv_bias=False,
                layer_norm_type="rms", mask_token_id=ids["<|mdm_mask|>"], max_sequence_length=4096,
                mlp_hidden_size=c.intermediate_size, model_type="llada", n_heads=c.num_attention_heads,
                n_kv_heads=c.num_key_value_heads, n_layers=c.num_hidden_layers, pad_token_id=ids["<|endoftext|>"],
                rms_norm_eps=c.rms_norm_eps, rope=True, rope_full_precision=True,
                rope_theta=c.rope_parameters["rope_theta"], scale_logits=False, vocab_size=c.vocab_size,
                weight_tying=False, transformers_version="4.46.3",
                auto_map={"AutoConfig": "configuration_llada.LLaDAConfig",
                          "AutoModel": "modeling_llada.LLaDAModelLM"})
    _dump(path, "config.json", body)
    _write_shards(path, {llada_name(k): v for k, v in ref.state_dict().items()}, shards, dtype)
    _dump(path, "generation_config.json", {"bos_token_id": ids["<|startoftext|>"],
                                           "eos_token_id": ids["<|endoftext|>"], **(generation or {})})
    tok.save(str(path / "tokenizer.json"))
    _dump(path, "tokenizer_config.json", {
        "bos_token": "<|startoftext|>", "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>",
        "tokenizer_class": "PreTrainedTokenizerFast"})
    return path


def _as_stored(ref, dtype: torch.dtype):
    """The reference with its weights rounded as the shards store them (its rotary buffers left in fp32)."""
    with torch.no_grad():
        for p in ref.parameters():
            p.copy_(p.to(dtype).float())
    return ref


def tiny_family(path: str | Path, family: str, variant: str, *, layout: str = "dream", seed: int = 0,
                generation: dict | None = None):
    """(checkpoint dir, transformers reference with the same weights) for family "dream" (Qwen2; `layout` "dream"
    or "open_dcoder") or "llada" (Llama), shape `variant` of DREAM_VARIANTS / LLADA_VARIANTS."""
    if family == "dream":
        tok = byte_tokenizer(QWEN_SPECIAL)
        ref = _as_stored(qwen2_reference(variant, tok, seed), torch.bfloat16)
        return write_dream_checkpoint(path, ref, tok, layout=layout, generation=generation), ref
    if family == "llada":
        tok = byte_tokenizer(LLADA_SPECIAL)
        ref = _as_stored(llama_reference(variant, tok, seed), torch.bfloat16)
        return write_llada_checkpoint(path, ref, tok, generation=generation), ref
    raise ValueError(f"family must be dream or llada, got {family!r}")
