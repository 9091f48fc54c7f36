"""Tiny Dream and LLaDA GGUF files laid out as llama.cpp's converter lays them out (conversion/dream.py,
conversion/llada.py over TextModel.set_gguf_parameters in conversion/base.py): the same architecture names, tensor
names (gguf-py's tensor_mapping), LLaDA's q/k row permutation, metadata keys and special ids, F32 or Q8_0
(`--outtype q8_0`: 2-D weights quantized, 1-D kept F32). Given the checkpoint's directory, its tokenizer tables too,
as DreamModel/LLaDAModel.get_vocab_base and `_set_vocab_gpt2` write them: `tokenizer.ggml.model` "gpt2", one token
per embedding row (ids the tokenizer lacks as `[PAD{i}]`, UNUSED), CONTROL for special added tokens, USER_DEFINED
for other added ones, and gguf-py's own SpecialVocab for the merges and special ids (tokenizer_config.json, then
config.json); LLaDA's `add_bos_token` true. The pre-tokenizer name: the converter names it by a hash of known
tokenizers; these tiny ones split as GPT-2 does ("gpt-2"), or, given Qwen2's Split + ByteLevel sequence, as Qwen2
does ("qwen2"). Without a directory: no tokenizer tables, only the special ids from config.json. For tests of
engine.formats.gguf_mdm and engine.families.gguf; never imported by product code.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from engine.formats.gguf_mdm import LAYER_PREFIX, LAYER_TENSORS, MODEL_TENSORS


def tiny_dream(seed: int = 0, tied: bool = False) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """(config.json dict, HF tensors) of a tiny random Dream checkpoint (Qwen2 names, q/k/v biases)."""
    cfg = {"architectures": ["DreamModel"], "model_type": "Dream", "hidden_act": "silu", "hidden_size": 64,
           "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
           "max_position_embeddings": 512, "bos_token_id": 1, "tie_word_embeddings": tied, "vocab_size": 160,
           "rope_theta": 1_000_000.0, "rms_norm_eps": 1e-6, "mask_token_id": 151, "eos_token_id": 2,
           "pad_token_id": 0}
    return cfg, _random(cfg, "dream", seed, tied)


def tiny_llada(seed: int = 0) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """(config.json dict, HF tensors) of a tiny random LLaDA checkpoint (`model.transformer.blocks.{i}.*`)."""
    cfg = {"architectures": ["LLaDAModelLM"], "model_type": "llada", "d_model": 64, "n_heads": 4, "n_kv_heads": 4,
           "n_layers": 2, "mlp_hidden_size": 96, "max_sequence_length": 512, "embedding_size": 160,
           "activation_type": "silu", "block_type": "llama", "layer_norm_type": "rms", "include_bias": False,
           "rope": True, "alibi": False, "weight_tying": False, "vocab_size": 160, "rope_theta": 500_000.0,
           "rms_norm_eps": 1e-5, "mask_token_id": 150, "eos_token_id": 2, "pad_token_id": 2}
    return cfg, _random(cfg, "llada", seed, False)


def _random(cfg: dict, arch: str, seed: int, tied: bool) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    h = cfg.get("hidden_size", cfg.get("d_model"))
    heads = cfg.get("num_attention_heads", cfg.get("n_heads"))
    kv = cfg.get("num_key_value_heads", cfg.get("n_kv_heads"))
    ff, v = cfg.get("intermediate_size", cfg.get("mlp_hidden_size")), cfg["vocab_size"]
    d = h // heads
    shapes = {"attn_norm.weight": (h,), "attn_q.weight": (heads * d, h), "attn_q.bias": (heads * d,),
              "attn_k.weight": (kv * d, h), "attn_k.bias": (kv * d,), "attn_v.weight": (kv * d, h),
              "attn_v.bias": (kv * d,), "attn_output.weight": (h, heads * d), "ffn_norm.weight": (h,),
              "ffn_gate.weight": (ff, h), "ffn_up.weight": (ff, h), "ffn_down.weight": (h, ff)}
    out = {}
    for name, hf in MODEL_TENSORS[arch].items():
        if name == "output.weight" and tied:
            continue
        out[hf] = torch.randn((h,) if "norm" in name else (v, h), generator=g) * 0.1
    n = cfg.get("num_hidden_layers", cfg.get("n_layers"))
    for i in range(n):
        for name, hf in LAYER_TENSORS[arch].items():
            out[LAYER_PREFIX[arch].format(i=i) + hf] = torch.randn(shapes[name], generator=g) * 0.1
    return out


def permute(w: torch.Tensor, n_head: int) -> torch.Tensor:
    """LLaDAModel.permute (the converter's, for ggml's rope): per head, rows (2, d/2) -> (d/2, 2)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_vocab(w: Any, tokenizer_dir: Path, vocab_size: int, arch: str) -> None:
    """The tokenizer tables of the HF tokenizer in `tokenizer_dir` (see the module docstring)."""
    import json

    import gguf
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json"))
    added = {a["id"]: a for a in json.loads((tokenizer_dir / "tokenizer.json").read_text()).get("added_tokens", [])}
    by_id = {i: t for t, i in tok.get_vocab(with_added_tokens=True).items()}
    tokens, types = [], []
    for i in range(vocab_size):
        if i not in by_id:
            tokens.append(f"[PAD{i}]")
            types.append(gguf.TokenType.UNUSED)
        else:
            tokens.append(by_id[i])
            types.append(gguf.TokenType.NORMAL if i not in added else
                         gguf.TokenType.CONTROL if added[i].get("special") else gguf.TokenType.USER_DEFINED)
    split = json.loads((tokenizer_dir / "tokenizer.json").read_text()).get("pre_tokenizer") or {}
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2" if split.get("type") == "Sequence" else "gpt-2")  # see the module docstring
    w.add_token_list(tokens)
    w.add_token_types(types)
    gguf.SpecialVocab(tokenizer_dir, load_merges=True, n_vocab=len(tokens)).add_to_gguf(w)
    if arch == "llada":  # LLaDAModel.set_vocab
        w.add_add_bos_token(True)


def write_mdm_gguf(cfg: dict[str, Any], tensors: dict[str, torch.Tensor], dst: Path, qtype: str = "F32",
                   tokenizer_dir: Path | None = None) -> Path:
    """The checkpoint (`cfg`, HF `tensors`) as llama.cpp's converter writes it, `qtype` F32 or Q8_0; with its
    tokenizer tables when `tokenizer_dir` (the checkpoint's directory) is given."""
    import gguf

    from engine.formats.gguf_write import FILE_TYPES, fit_type, pack

    arch = {"DreamModel": "dream", "LLaDAModelLM": "llada"}[cfg["architectures"][0]]
    to_gguf = {hf: g for g, hf in MODEL_TENSORS[arch].items()}
    n_layers = cfg.get("num_hidden_layers", cfg.get("n_layers"))
    for i in range(n_layers):
        to_gguf |= {LAYER_PREFIX[arch].format(i=i) + hf: f"blk.{i}.{g}" for g, hf in LAYER_TENSORS[arch].items()}
    heads = cfg.get("num_attention_heads", cfg.get("n_heads"))
    kv = cfg.get("num_key_value_heads", cfg.get("n_kv_heads"))
    h = cfg.get("hidden_size", cfg.get("d_model"))
    w = gguf.GGUFWriter(dst, arch)
    a = f"{arch}."
    # TextModel.set_gguf_parameters
    w.add_uint32(a + "block_count", n_layers)
    w.add_uint32(a + "context_length", cfg.get("max_position_embeddings", cfg.get("max_sequence_length")))
    w.add_uint32(a + "embedding_length", h)
    w.add_uint32(a + "feed_forward_length", cfg.get("intermediate_size", cfg.get("mlp_hidden_size")))
    w.add_uint32(a + "attention.head_count", heads)
    w.add_uint32(a + "attention.head_count_kv", kv)
    w.add_float32(a + "rope.freq_base", cfg["rope_theta"])
    w.add_float32(a + "attention.layer_norm_rms_epsilon", cfg["rms_norm_eps"])
    w.add_file_type(FILE_TYPES[qtype])
    w.add_bool(a + "attention.causal", False)
    if arch == "llada":  # LLaDAModel.set_gguf_parameters
        w.add_uint32(a + "vocab_size", cfg["vocab_size"])
        w.add_uint32(a + "rope.dimension_count", h // heads)
        w.add_bool("diffusion.shift_logits", False)
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    # SpecialVocab's ids from config.json (from the tokenizer files when they are given), and DreamModel's mask id
    for key, name in (("bos", "bos_token_id"), ("eos", "eos_token_id"), ("padding", "pad_token_id"),
                      ("mask", "mask_token_id")):
        if cfg.get(name) is not None and (tokenizer_dir is None or (arch, key) == ("dream", "mask")):
            w.add_uint32(f"tokenizer.ggml.{key}_token_id", cfg[name])
    if tokenizer_dir is not None:
        write_vocab(w, Path(tokenizer_dir), cfg["vocab_size"], arch)
    for hf, t in tensors.items():
        name = to_gguf[hf]
        if arch == "llada" and name.endswith((".attn_q.weight", ".attn_k.weight")):
            t = permute(t, heads if ".attn_q." in name else kv)
        kind = "F32" if t.dim() < 2 or qtype == "F32" else fit_type(qtype, t.shape[-1])
        data = pack(t, kind)
        w.add_tensor(name, data, raw_dtype=None if kind in ("F32", "F16") else gguf.GGMLQuantizationType[kind])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return dst
