"""Dream and LLaDA GGUF files, as llama.cpp's converter writes them (architectures `dream`, `llada`), read back as the
Hugging Face checkpoint they came from: every tensor under its HF name, dequantized to float32 by this engine's
dequantizers (engine.formats.gguf_quants), and the config.json dict the published checkpoints carry.

What the converter does, and this module undoes (ggml-org/llama.cpp conversion/dream.py and conversion/llada.py,
names through gguf-py's tensor_mapping; REFERENCE.md §2):
- Dream (`DreamModel`, Qwen2 names, q/k/v biases): names only. Keys: TextModel.set_gguf_parameters, causal false,
  `tokenizer.ggml.mask_token_id` from config.json's mask_token_id.
- LLaDA (`LLaDAModelLM`, `model.transformer.blocks.{i}.*`): names, and q/k rows permuted for ggml's rope
  (`LLaDAModel.permute`: per head, the two rotary halves interleaved), undone here. Keys: the same plus
  `llada.vocab_size`, `rope.dimension_count`, `diffusion.shift_logits` false.
Anything else is refused by name (GGUFError): another architecture, a tensor missing or unknown, a causal file,
shifted logits on LLaDA, rope scaling (not in the published checkpoints).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from engine.formats.gguf import GGUFError, GGUFInfo, GGUFTensor, open_gguf
from engine.formats.gguf_quants import dequantize

ARCHES = ("dream", "llada")
_LAYER = re.compile(r"^blk\.(?P<i>\d+)\.(?P<rest>.+)$")
# GGUF name -> HF name, per architecture (gguf-py tensor_mapping for MODEL_ARCH.DREAM / LLADA)
MODEL_TENSORS = {
    "dream": {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
              "output.weight": "lm_head.weight"},
    "llada": {"token_embd.weight": "model.transformer.wte.weight",
              "output_norm.weight": "model.transformer.ln_f.weight",
              "output.weight": "model.transformer.ff_out.weight"},
}
LAYER_TENSORS = {
    "dream": {"attn_norm.weight": "input_layernorm.weight", "attn_q.weight": "self_attn.q_proj.weight",
              "attn_q.bias": "self_attn.q_proj.bias", "attn_k.weight": "self_attn.k_proj.weight",
              "attn_k.bias": "self_attn.k_proj.bias", "attn_v.weight": "self_attn.v_proj.weight",
              "attn_v.bias": "self_attn.v_proj.bias", "attn_output.weight": "self_attn.o_proj.weight",
              "ffn_norm.weight": "post_attention_layernorm.weight", "ffn_gate.weight": "mlp.gate_proj.weight",
              "ffn_up.weight": "mlp.up_proj.weight", "ffn_down.weight": "mlp.down_proj.weight"},
    "llada": {"attn_norm.weight": "attn_norm.weight", "attn_q.weight": "q_proj.weight",
              "attn_k.weight": "k_proj.weight", "attn_v.weight": "v_proj.weight",
              "attn_output.weight": "attn_out.weight", "ffn_norm.weight": "ff_norm.weight",
              "ffn_gate.weight": "ff_proj.weight", "ffn_up.weight": "up_proj.weight",
              "ffn_down.weight": "ff_out.weight"},
}
LAYER_PREFIX = {"dream": "model.layers.{i}.", "llada": "model.transformer.blocks.{i}."}
IGNORED = {"rope_freqs.weight"}
# (HF name, shape, read) per tensor, as engine.families.checkpoint.load_dense takes them
TensorReads = list[tuple[str, tuple[int, ...], Callable[[], torch.Tensor]]]


def hf_name(arch: str, name: str) -> str | None:
    """GGUF tensor name -> the HF name of `arch`'s checkpoint (None: not in the map)."""
    if name in MODEL_TENSORS[arch]:
        return MODEL_TENSORS[arch][name]
    m = _LAYER.match(name)
    rest = LAYER_TENSORS[arch].get(m["rest"]) if m else None
    return LAYER_PREFIX[arch].format(i=m["i"]) + rest if m and rest else None


def expected_names(arch: str, n_layers: int, tied: bool) -> set[str]:
    names = {n for n in MODEL_TENSORS[arch] if n != "output.weight" or not tied}
    return names | {f"blk.{i}.{k}" for i in range(n_layers) for k in LAYER_TENSORS[arch]}


def unpermute(w: torch.Tensor, n_head: int) -> torch.Tensor:
    """Undo LLaDAModel.permute: rows (n_head, 2, d/2) were stored as (n_head, d/2, 2) -- back to HF's order."""
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _float(t: GGUFTensor) -> torch.Tensor:
    raw = torch.from_numpy(np.array(t.data, copy=True)).reshape(-1).view(torch.uint8)
    k = t.shape[-1]
    return dequantize(raw.reshape(-1, raw.numel() // (int(np.prod(t.shape)) // k)), t.qtype, k).reshape(t.shape)


def _key(info: GGUFInfo, arch: str, key: str, default: Any = None, required: bool = True) -> Any:
    full = f"{arch}.{key}"
    if full in info.fields:
        return info.fields[full]
    if required and default is None:
        raise GGUFError(f"{info.files[0]}: required key {full!r} is missing")
    return default


def _f32(value: Any) -> float:
    """A float32 metadata value as the shortest decimal that is that float32 (1e-06, not 9.99999997e-07)."""
    return float(str(np.float32(value)))


def hf_config(info: GGUFInfo, arch: str, vocab_rows: int, tied: bool) -> dict[str, Any]:
    """The config.json dict of the published checkpoint this file was converted from."""
    f, where = info.fields, info.files[0]
    if _key(info, arch, "attention.causal", True, required=False) is not False:
        raise GGUFError(f"{where}: {arch}.attention.causal is not false: a {arch} model attends both ways")
    scaling = [k for k in f if k.startswith(f"{arch}.rope.scaling.")]
    if scaling:
        raise GGUFError(f"{where}: rope scaling ({', '.join(sorted(scaling))}) is not supported for {arch}")
    layers, heads = int(_key(info, arch, "block_count")), int(_key(info, arch, "attention.head_count"))
    kv = int(_key(info, arch, "attention.head_count_kv", heads, required=False))
    ids = {k: f.get(f"tokenizer.ggml.{k}_token_id") for k in ("bos", "eos", "padding", "mask")}
    common = dict(vocab_size=vocab_rows, rope_theta=_f32(_key(info, arch, "rope.freq_base")),
                  rms_norm_eps=_f32(_key(info, arch, "attention.layer_norm_rms_epsilon")),
                  mask_token_id=ids["mask"], eos_token_id=ids["eos"], pad_token_id=ids["padding"])
    if arch == "dream":
        return {"architectures": ["DreamModel"], "model_type": "Dream", "hidden_act": "silu",
                "hidden_size": int(_key(info, arch, "embedding_length")),
                "intermediate_size": int(_key(info, arch, "feed_forward_length")), "num_hidden_layers": layers,
                "num_attention_heads": heads, "num_key_value_heads": kv,
                "max_position_embeddings": int(_key(info, arch, "context_length")),
                "bos_token_id": ids["bos"], "tie_word_embeddings": tied, **common}
    if f.get("diffusion.shift_logits", False):
        raise GGUFError(f"{where}: diffusion.shift_logits is true, but LLaDA predicts each position in place")
    d_model = int(_key(info, arch, "embedding_length"))
    head_dim = int(_key(info, arch, "rope.dimension_count", d_model // heads, required=False))
    if head_dim * heads != d_model:
        raise GGUFError(f"{where}: {arch}.rope.dimension_count {head_dim} x {heads} heads != embedding_length "
                        f"{d_model} (LLaDA rotates whole heads)")
    return {"architectures": ["LLaDAModelLM"], "model_type": "llada", "d_model": d_model, "n_heads": heads,
            "n_kv_heads": kv, "n_layers": layers, "mlp_hidden_size": int(_key(info, arch, "feed_forward_length")),
            "max_sequence_length": int(_key(info, arch, "context_length")),
            "embedding_size": vocab_rows, "activation_type": "silu", "block_type": "llama",
            "layer_norm_type": "rms", "include_bias": False, "rope": True, "alibi": False, "weight_tying": tied,
            **common, "vocab_size": int(f.get(f"{arch}.vocab_size", vocab_rows))}


def open_mdm(path: str | Path) -> tuple[str, dict[str, Any], GGUFInfo, TensorReads]:
    """(architecture, HF config.json dict, the file's GGUFInfo (metadata in `.fields`), (HF name, shape, read) per
    tensor) of a dream / llada GGUF, checked; each `read()` dequantizes one tensor to float32 (LLaDA's q/k
    un-permuted), so a loader holds one float32 tensor at a time. Raises GGUFError."""
    info = open_gguf(path, ARCHES)
    arch = info.fields["general.architecture"]
    embd = info.tensors.get("token_embd.weight")
    if embd is None:
        raise GGUFError(f"{info.files[0]}: tensor token_embd.weight is missing")
    tied = "output.weight" not in info.tensors
    cfg = hf_config(info, arch, embd.shape[0], tied)
    layers = cfg.get("num_hidden_layers", cfg.get("n_layers"))
    have, want = set(info.tensors) - IGNORED, expected_names(arch, layers, tied)
    missing, unknown = sorted(want - have), sorted(have - want)
    if missing or unknown:
        raise GGUFError(f"{info.files[0]}: tensor set does not match {arch} with {layers} layers: missing "
                        f"{missing[:12]}; unknown {unknown[:12]}")
    heads = cfg.get("num_attention_heads", cfg.get("n_heads"))
    kv = cfg.get("num_key_value_heads", cfg.get("n_kv_heads"))

    def read(name: str, t: GGUFTensor) -> torch.Tensor:
        w = _float(t)
        if arch == "llada" and name.endswith((".attn_q.weight", ".attn_k.weight")):
            w = unpermute(w, heads if ".attn_q." in name else kv)
        return w

    reads = [(hf_name(arch, name) or name, tuple(t.shape), lambda name=name, t=t: read(name, t))
             for name, t in info.tensors.items() if name not in IGNORED]
    return arch, cfg, info, reads


def read_mdm(path: str | Path) -> tuple[str, dict[str, Any], dict[str, torch.Tensor]]:
    """(architecture, HF config.json dict, HF name -> float32 tensor) of a dream / llada GGUF. Raises GGUFError."""
    arch, cfg, _, reads = open_mdm(path)
    return arch, cfg, {name: read() for name, _, read in reads}
