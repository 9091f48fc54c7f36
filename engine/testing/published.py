"""A tiny checkpoint laid out like the published `google/diffusiongemma-26B-A4B-it`, built by tests and benchmarks.

What is known of the published files (docs/../shared REFERENCE §1, §7) at a tiny scale: config.json with text and
vision sub-configs, the MoE keys and `architectures: ["DiffusionGemmaForBlockDiffusion"]`; bf16 weights in three
shards with `model.safetensors.index.json`; a Gemma-style tokenizer.json (SentencePiece-like BPE with byte fallback,
`<bos>` added by its post-processor) holding Gemma 4's special tokens and no FIM tokens; tokenizer_config.json and a
chat_template.jinja in Gemma 4's turn format with an `enable_thinking` switch; generation_config.json with two eos
ids (`<eos>` and the end-of-turn `<turn|>`) and the sampler settings.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

from engine.testing.tiny import SAMPLE_CODE, TINY_VISION, random_model

# Gemma 4's special tokens as public code spells them (REFERENCE §7); ids follow this order from 0.
SPECIAL = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "<|turn>", "<turn|>", "<|channel>", "<channel|>",
           "<|think|>", "<|tool>", "<tool|>", "<|tool_call>", "<tool_call|>", "<|tool_response>", "<tool_response|>",
           "<|image>", "<image|>", "<|image|>", "<|audio>", "<audio|>", "<|audio|>", "<|video|>"]
VOCAB_SIZE = 640

CHAT_TEMPLATE = """{{- bos_token -}}
{%- set thinking = enable_thinking if enable_thinking is defined else true -%}
{%- if messages and messages[0]['role'] == 'system' -%}
{{- '<|turn>system\\n' + ('<|think|>' if thinking else '') + messages[0]['content'] | trim + '<turn|>\\n' -}}
{%- set loop_messages = messages[1:] -%}
{%- else -%}
{%- if thinking -%}{{- '<|turn>system\\n<|think|><turn|>\\n' -}}{%- endif -%}
{%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
{%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}
{{- '<|turn>' + role + '\\n' + message['content'] | trim + '<turn|>\\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
{{- '<|turn>model\\n' -}}
{%- if not thinking -%}{{- '<|channel>thought\\n<channel|>' -}}{%- endif -%}
{%- endif -%}
"""

# The published shape scaled down: 4 layers (sliding x3, full), MoE top-k, K = V global layers.
TEXT = dict(
    hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
    head_dim=16, global_head_dim=32, num_global_key_value_heads=1, sliding_window=16, attention_k_eq_v=True,
    layer_types=["sliding_attention", "sliding_attention", "sliding_attention", "full_attention"],
    num_experts=8, top_k_experts=2, moe_intermediate_size=32, enable_moe_block=True,
    hidden_activation="gelu_pytorch_tanh", final_logit_softcapping=30.0, rms_norm_eps=1e-6,
    max_position_embeddings=262_144, tie_word_embeddings=True, attention_bias=False, use_bidirectional_attention=None,
    rope_parameters={
        "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
        "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1_000_000.0},
    },
)


def gemma_style_tokenizer(vocab_size: int = VOCAB_SIZE) -> Tokenizer:
    """SentencePiece-like BPE: spaces become "▁", unknown characters fall back to <0xNN> byte tokens, the
    post-processor prepends <bos>. Special tokens first (ids 0..), then the 256 byte tokens, then merges."""
    trainer_tok = Tokenizer(models.BPE())
    trainer_tok.normalizer = normalizers.Replace(" ", "▁")
    trainer_tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"▁*[^▁\n]+|▁+|\n+"), "isolated")
    budget = vocab_size - len(SPECIAL) - 256
    trainer = trainers.BpeTrainer(vocab_size=budget, show_progress=False, min_frequency=1)
    trainer_tok.train_from_iterator(SAMPLE_CODE * 4, trainer=trainer)
    learned = json.loads(trainer_tok.to_str())["model"]
    vocab = {t: i for i, t in enumerate(SPECIAL)}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    for piece, _ in sorted(learned["vocab"].items(), key=lambda kv: kv[1]):
        vocab.setdefault(piece, len(vocab))
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in learned["merges"]]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Replace(" ", "▁")
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"▁*[^▁\n]+|▁+|\n+"), "isolated")
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL])
    tok.post_processor = processors.TemplateProcessing(single="<bos> $A", pair="<bos> $A $B", special_tokens=[
        ("<bos>", vocab["<bos>"])])
    return tok


def _shard(src: Path, dst: Path, shards: int = 3) -> None:
    """model.safetensors (written by transformers) -> `shards` bf16 files + model.safetensors.index.json."""
    with safe_open(str(src), framework="pt") as f:
        tensors = {k: f.get_tensor(k).to(torch.bfloat16) for k in sorted(f.keys())}
    names = list(tensors)
    per = -(-len(names) // shards)
    weight_map, total = {}, 0
    for i in range(shards):
        file = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        part = {k: tensors[k].contiguous() for k in names[i * per:(i + 1) * per]}
        save_file(part, str(dst / file), metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(part, file))
        total += sum(t.numel() * t.element_size() for t in part.values())
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (dst / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")


def build_published_checkpoint(path: str | Path, *, seed: int = 0, canvas_length: int = 32, steps: int = 8,
                               turn_end_scale: float = 3.0) -> Path:
    """Write the checkpoint to `path`. `turn_end_scale` scales the `<turn|>` embedding row so the random model
    ends its turn now and then, as an instruction-tuned one does (the row is the LM head's too: tied)."""
    from transformers import DiffusionGemmaConfig

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tok = gemma_style_tokenizer()
    ids = {t: tok.token_to_id(t) for t in SPECIAL}
    text = dict(TEXT, vocab_size=tok.get_vocab_size(), pad_token_id=ids["<pad>"], eos_token_id=ids["<eos>"],
                bos_token_id=ids["<bos>"], dtype="bfloat16")
    top = dict(architectures=["DiffusionGemmaForBlockDiffusion"], model_type="diffusion_gemma",
               canvas_length=canvas_length, boi_token_id=ids["<|image>"], eoi_token_id=ids["<image|>"],
               image_token_id=ids["<|image|>"], initializer_range=0.02, tie_word_embeddings=True, dtype="bfloat16")
    config = DiffusionGemmaConfig(text_config=dict(text), vision_config=dict(TINY_VISION),
                                  **{k: v for k, v in top.items() if k not in ("architectures", "model_type")})
    model = random_model(config, seed)
    with torch.no_grad():
        model.model.decoder.embed_tokens.weight[ids["<turn|>"]] *= turn_end_scale
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp)
        _shard(Path(tmp) / "model.safetensors", path)
    vision = json.loads(config.vision_config.to_json_string())
    body = dict(top, text_config=dict(text, model_type="diffusion_gemma_text"), vision_config=vision,
                transformers_version="5.24.0")
    (path / "config.json").write_text(json.dumps(body, indent=2) + "\n")
    gen = {"bos_token_id": ids["<bos>"], "eos_token_id": [ids["<eos>"], ids["<turn|>"]], "pad_token_id": ids["<pad>"],
           "max_denoising_steps": steps, "sampler_config": {"_cls_name": "EntropyBoundSamplerConfig",
                                                            "entropy_bound": 0.1},
           "t_min": 0.4, "t_max": 0.8, "stability_threshold": 1, "confidence_threshold": 0.005,
           "transformers_version": "5.24.0"}
    (path / "generation_config.json").write_text(json.dumps(gen, indent=2) + "\n")
    tok.save(str(path / "tokenizer.json"))
    tok_cfg = {"tokenizer_class": "GemmaTokenizer", "bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>",
               "unk_token": "<unk>", "add_bos_token": True, "add_eos_token": False, "padding_side": "left",
               "model_max_length": 262_144, "clean_up_tokenization_spaces": False}
    (path / "tokenizer_config.json").write_text(json.dumps(tok_cfg, indent=2) + "\n")
    (path / "chat_template.jinja").write_text(CHAT_TEMPLATE)
    return path
