"""Tiny Dream and LLaDA GGUF files laid out as llama.cpp's converter lays them out (conversion/dream.py,
conversion/llada.py over TextModel.set_gguf_parameters in conversion/base.py): the same architecture names, tensor
names (gguf-py's tensor_mapping), LLaDA's q/k row permutation, metadata keys and special ids, F32 or Q8_0
(`--outtype q8_0`: 2-D weights quantized, 1-D kept F32). No tokenizer tables: only the special ids, which is what
the reader maps. For tests of engine.formats.gguf_mdm; never imported by product code.
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


def write_mdm_gguf(cfg: dict[str, Any], tensors: dict[str, torch.Tensor], dst: Path, qtype: str = "F32") -> Path:
    """The checkpoint (`cfg`, HF `tensors`) as llama.cpp's converter writes it, `qtype` F32 or Q8_0."""
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
    # SpecialVocab (and DreamModel's mask_token_id from config.json)
    for key, name in (("bos", "bos_token_id"), ("eos", "eos_token_id"), ("padding", "pad_token_id"),
                      ("mask", "mask_token_id")):
        if cfg.get(name) is not None:
            w.add_uint32(f"tokenizer.ggml.{key}_token_id", cfg[name])
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
