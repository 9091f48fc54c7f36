"""Write a DiffusionGemma GGUF the way llama.cpp PR #24423's converter and `llama-quantize` lay it out, from a (tiny)
HF safetensors checkpoint: the same names, metadata keys and per-tensor types, for tests and benchmarks.

`q4_k_m_type` is llama-quant.cpp's Q4_K_M rule applied to this model (../shared/GGUF.md §2): Q4_K by default; Q6_K for
`token_embd` (tied output) and for `attn_v` / `ffn_down*` where `use_more_bits`; never quantized: 1-D tensors,
norms, `ffn_gate_inp.weight`; a row that is not whole 256-blocks falls back (Q4_K -> Q5_0, Q6_K -> Q8_0,
Q5_K -> Q5_1). Blocks: F32/F16/BF16 and Q8_0/Q5_0/Q5_1 by gguf-py's quantizer, K-quants by
engine.formats.gguf_quants.quantize_k.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from engine.formats.gguf import ARCH, LAYER_TENSORS, MODEL_TENSORS
from engine.formats.gguf_quants import BLOCKS, quantize_k

_FALLBACK = {"Q4_K": "Q5_0", "Q6_K": "Q8_0", "Q5_K": "Q5_1"}
_HF_TO_GGUF = {v: k for k, v in MODEL_TENSORS.items()}
_HF_LAYER_TO_GGUF = {v: k for k, v in LAYER_TENSORS.items()}


# ggml type -> the llama_ftype (gguf LlamaFileType) of a file whose weights are mostly of it; a Q4_K_M mix is 15
FILE_TYPES = {"F32": 0, "F16": 1, "Q4_0": 2, "Q4_1": 3, "Q8_0": 7, "Q5_0": 8, "Q5_1": 9, "Q4_K": 14, "Q5_K": 16,
              "Q6_K": 18, "BF16": 32}
Q4_K_M_FILE_TYPE = 15


def file_type(rule: Callable | str, types: dict[str, int]) -> int:
    """`general.file_type` of a file written by `rule`: the Q4_K_M mix for q4_k_m_type, else the type holding the
    most bytes of the >= 2-D weights (`types`: ggml type -> bytes), as llama-quantize names its output."""
    if rule is q4_k_m_type:
        return Q4_K_M_FILE_TYPE
    if isinstance(rule, str):
        return FILE_TYPES[rule]
    return FILE_TYPES[max(types, key=types.__getitem__)] if types else FILE_TYPES["F32"]


def use_more_bits(i: int, n: int) -> bool:
    """llama-quant.cpp: the first and last eighth of the layers, and every third in between (integer division)."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def q4_k_m_type(name: str, shape: tuple[int, ...], n_layer: int, v_index: dict[str, int]) -> str:
    """ggml type of GGUF tensor `name` (torch `shape`) in a Q4_K_M file; `v_index`: attn_v name -> its index among
    the model's attn_v tensors (global layers have none)."""
    if len(shape) < 2 or not name.endswith(".weight") or "norm" in name or "ffn_gate_inp" in name:
        return "F32"
    qtype = "Q4_K"
    if name == "token_embd.weight":
        qtype = "Q6_K"
    elif ".attn_v." in name and use_more_bits(v_index[name], len(v_index)):
        qtype = "Q6_K"
    elif re.match(r"^blk\.\d+\.ffn_down(_exps)?\.weight$", name) and use_more_bits(int(name.split(".")[1]), n_layer):
        qtype = "Q6_K"
    return fit_type(qtype, shape[-1])


def fit_type(qtype: str, k: int) -> str:
    """`qtype`, or its fallback when a row of `k` values is not whole blocks of it (F16 when nothing fits)."""
    if k % BLOCKS[qtype][0]:
        qtype = _FALLBACK.get(qtype, "F16")
    return qtype if k % BLOCKS[qtype][0] == 0 else "F16"


def gguf_shapes(cfg) -> dict[str, tuple[int, ...]]:
    """GGUF name -> torch shape of every tensor of a checkpoint of TextConfig `cfg` (rope_freqs included)."""
    from engine.formats.gguf import expected_names, hf_name
    from engine.model.transformer import map_name
    from engine.quant.memory import weight_shapes

    ours = weight_shapes(cfg)
    out = {}
    for name in sorted(expected_names(cfg)):
        key = map_name(hf_name(name))
        out[name] = ours[key]
    out["rope_freqs.weight"] = (max(s.head_dim for s in cfg.layers) // 2,)
    return out


def mix_bytes(cfg, rule: Callable = q4_k_m_type) -> dict[str, dict[str, int]]:
    """ggml type -> {"tensors", "bytes"} of a file of `cfg` typed by `rule` (Q4_K_M by default), from shapes alone."""
    shapes = gguf_shapes(cfg)
    v_index = {n: i for i, n in enumerate(sorted((n for n in shapes if ".attn_v." in n),
                                                 key=lambda n: int(n.split(".")[1])))}
    out: dict[str, dict[str, int]] = {}
    for name, shape in shapes.items():
        qtype = rule(name, shape, cfg.num_hidden_layers, v_index)
        block, size = BLOCKS[qtype]
        row = out.setdefault(qtype, {"tensors": 0, "bytes": 0})
        row["tensors"] += 1
        row["bytes"] += math.prod(shape) // block * size
    return out


def pack(w: torch.Tensor, qtype: str) -> np.ndarray:
    """Float tensor (..., K) -> the bytes a GGUF stores for it: (..., K) float for F32/F16, uint8 rows otherwise."""
    import gguf

    a = w.detach().float().numpy()
    if qtype == "F32":
        return a
    if qtype == "F16":
        return a.astype(np.float16)
    if qtype in ("Q4_K", "Q5_K", "Q6_K"):
        return quantize_k(w.float(), qtype).numpy()
    return gguf.quants.quantize(a, gguf.GGMLQuantizationType[qtype])


def _gguf_name(hf: str) -> str | None:
    if hf in _HF_TO_GGUF:
        return _HF_TO_GGUF[hf]
    m = re.match(r"^model\.(decoder|encoder\.language_model)\.layers\.(\d+)\.(.+)$", hf)
    if m is None:
        return None
    if m[1] != "decoder":
        return f"blk.{m[2]}.enc_layer_output_scale.weight" if m[3] == "layer_scalar" else None
    rest = _HF_LAYER_TO_GGUF.get(m[3])
    return f"blk.{m[2]}.{rest}" if rest else None


# What a diffusion-gemma GGUF cannot say otherwise (write_gguf refuses a checkpoint that differs).
GGUF_ASSUMES = {"hidden_activation": "gelu_pytorch_tanh", "tie_word_embeddings": True, "attention_bias": False}


def write_gguf(src: Path, dst: Path, rule: Callable | str = q4_k_m_type, *, canvas_length: int = 16,
               sampler: dict | None = None, split_max_tensors: int = 0, tokenizer: bool = True) -> Path:
    """The HF checkpoint at `src` (single-file safetensors, tied) as a GGUF at `dst`; `rule` gives each tensor's
    ggml type (a callable as q4_k_m_type, or one type name for every >= 2-D weight). `sampler`: diffusion.eb_* keys
    (without the prefix) to write; `tokenizer`: the tokenizer.ggml.* keys of src's tokenizer.json (BPE), when it has
    one. Returns the path of the (first) file written."""
    import gguf
    from safetensors.torch import load_file

    from engine.config import load_config

    cfg = load_config(src).text
    # The diffusion-gemma GGUF has no key for these: its readers assume the published model's tanh GELU, a tied head
    # and encoder, and no attention biases. A checkpoint that differs cannot be written without changing the model.
    odd = {k: getattr(cfg, k) for k, v in GGUF_ASSUMES.items() if getattr(cfg, k) != v}
    if odd:
        raise ValueError(f"{src}: {', '.join(f'{k}={v!r}' for k, v in odd.items())} cannot be written to a "
                         "diffusion-gemma GGUF (its readers assume gelu_pytorch_tanh, tied embeddings, no biases)")
    given = rule
    if isinstance(rule, str):
        one = rule
        rule = lambda n, s, _n, _v: fit_type(one, s[-1]) if q4_k_m_type(n, s, _n, _v) != "F32" else "F32"  # noqa
    tensors = {}
    for hf, t in load_file(str(src / "model.safetensors")).items():
        name = _gguf_name(hf)
        if name is not None:
            tensors[name] = t
    shapes = gguf_shapes(cfg)
    partial = cfg.rope["full_attention"].partial_rotary_factor
    n_pairs = shapes["rope_freqs.weight"][0]
    rot = round(partial * n_pairs)
    tensors["rope_freqs.weight"] = torch.tensor([1.0] * rot + [1e30] * (n_pairs - rot))
    v_index = {n: i for i, n in enumerate(sorted((n for n in tensors if ".attn_v." in n),
                                                 key=lambda n: int(n.split(".")[1])))}
    w = gguf.GGUFWriter(dst, ARCH, split_max_tensors=split_max_tensors)
    a = f"{ARCH}."
    full = next(s for s in cfg.layers if not s.sliding)
    swa = next((s for s in cfg.layers if s.sliding), full)
    w.add_uint32(a + "block_count", cfg.num_hidden_layers)
    w.add_uint32(a + "context_length", cfg.max_position_embeddings)
    w.add_uint32(a + "embedding_length", cfg.hidden_size)
    w.add_uint32(a + "feed_forward_length", cfg.intermediate_size)
    w.add_uint32(a + "expert_feed_forward_length", cfg.moe_intermediate_size)
    w.add_uint32(a + "expert_count", cfg.num_experts)
    w.add_uint32(a + "expert_used_count", cfg.top_k_experts)
    w.add_uint32(a + "attention.head_count", cfg.num_attention_heads)
    w.add_array(a + "attention.head_count_kv", [s.num_kv_heads for s in cfg.layers])
    w.add_uint32(a + "attention.key_length", full.head_dim)
    w.add_uint32(a + "attention.value_length", full.head_dim)
    w.add_uint32(a + "attention.key_length_swa", swa.head_dim)
    w.add_uint32(a + "attention.value_length_swa", swa.head_dim)
    w.add_uint32(a + "attention.sliding_window", cfg.sliding_window)
    w.add_array(a + "attention.sliding_window_pattern", [s.sliding for s in cfg.layers])
    w.add_float32(a + "attention.layer_norm_rms_epsilon", cfg.rms_norm_eps)
    w.add_bool(a + "attention.causal", False)
    w.add_uint32(a + "attention.shared_kv_layers", 0)  # Gemma4Model writes these two for every Gemma-4 text model
    w.add_uint32(a + "embedding_length_per_layer_input", 0)
    w.add_float32(a + "rope.freq_base", cfg.rope["full_attention"].theta)
    w.add_float32(a + "rope.freq_base_swa", cfg.rope["sliding_attention"].theta)
    w.add_uint32(a + "rope.dimension_count", full.head_dim)
    w.add_uint32(a + "rope.dimension_count_swa", swa.head_dim)
    if cfg.final_logit_softcapping:
        w.add_float32(a + "final_logit_softcapping", cfg.final_logit_softcapping)
    w.add_uint32("diffusion.canvas_length", canvas_length)
    for key, value in (sampler or {}).items():
        (w.add_uint32 if isinstance(value, int) else w.add_float32)(f"diffusion.{key}", value)
    w.add_uint32("tokenizer.ggml.eos_token_id", cfg.eos_token_ids[0])
    w.add_uint32("tokenizer.ggml.bos_token_id", cfg.bos_token_id)
    w.add_uint32("tokenizer.ggml.padding_token_id", cfg.pad_token_id)
    if tokenizer and (src / "tokenizer.json").is_file():  # what the converter writes from tokenizer.json
        from engine.formats.gguf_tokenizer import tokenizer_fields

        tf = tokenizer_fields(src / "tokenizer.json")
        w.add_tokenizer_model(tf["tokenizer.ggml.model"])
        if "tokenizer.ggml.pre" in tf:
            w.add_tokenizer_pre(tf["tokenizer.ggml.pre"])
        w.add_token_list(tf["tokenizer.ggml.tokens"])
        if "tokenizer.ggml.scores" in tf:
            w.add_token_scores(tf["tokenizer.ggml.scores"])
        w.add_token_types(tf["tokenizer.ggml.token_type"])
        w.add_token_merges(tf["tokenizer.ggml.merges"])
        if "tokenizer.ggml.unknown_token_id" in tf:
            w.add_uint32("tokenizer.ggml.unknown_token_id", tf["tokenizer.ggml.unknown_token_id"])
        # llama.cpp's llama-diffusion-cli requires a mask id: `<mask>` where the vocabulary has one (the published
        # files: 4), else the pad id; DiffusionGemma renoises with uniform tokens and never reads it.
        w.add_mask_token_id(tf.get("tokenizer.ggml.mask_token_id", cfg.pad_token_id))
        if tf["tokenizer.ggml.model"] == "gemma4":
            w.add_add_space_prefix(False)
        w.add_add_bos_token(True)
        if (src / "chat_template.jinja").is_file():
            w.add_chat_template((src / "chat_template.jinja").read_text())
    weight_bytes: dict[str, int] = {}
    for name in sorted(tensors, key=_order):
        t = tensors[name]
        qtype = rule(name, tuple(t.shape), cfg.num_hidden_layers, v_index)
        data = pack(t.reshape(-1, 1) if t.dim() == 0 else t, qtype)
        raw = None if qtype in ("F32", "F16") else gguf.GGMLQuantizationType[qtype]
        w.add_tensor(name, data, raw_dtype=raw)
        if t.dim() >= 2:
            weight_bytes[qtype] = weight_bytes.get(qtype, 0) + data.nbytes
    w.add_file_type(file_type(given, weight_bytes))  # the llama_ftype llama.cpp reports (else it guesses "all F32")
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    if split_max_tensors:
        return sorted(dst.parent.glob(f"{dst.stem}-*-of-*.gguf"))[0]
    return dst


def _order(name: str) -> tuple:
    m = re.match(r"^blk\.(\d+)\.", name)
    return (1, int(m[1]), name) if m else (0, 0, name)


def sidecar(src: Path, dst_dir: Path) -> None:
    """Copy the HF tokenizer and prompt files beside a GGUF (what a user puts there for exact tokenization)."""
    from engine.tokens import INFILL_FILE

    for f in src.iterdir():
        if f.name.startswith("tokenizer") or f.name in (INFILL_FILE, "chat_template.jinja"):
            (dst_dir / f.name).write_bytes(f.read_bytes())


def write_shipped(dst_dir: Path, *, beside: bool = False, rule: Callable | str = "Q8_0") -> Path:
    """The shipped model (engine/default_model) as `dst_dir/dg-default-<rule>.gguf`, Q8_0 with F32 norms by default,
    its byte-level tokenizer in the metadata; `beside`: its tokenizer.json and infill.json copied beside the file
    too (the HF files then win). For the editors' and server tests; returns the file."""
    from engine.config import load_config
    from engine.engine import default_model_path
    from engine.formats.gguf import SAMPLER_KEYS

    dst_dir = Path(dst_dir)
    dst_dir.mkdir(parents=True, exist_ok=True)
    src = default_model_path()
    cfg = load_config(src)
    # the sampler of its generation_config.json, as llama.cpp's converter writes it
    sampler = {key.removeprefix("diffusion."): getattr(cfg.sampler, name) for key, name in SAMPLER_KEYS.items()}
    out = write_gguf(src, dst_dir / f"dg-default-{rule if isinstance(rule, str) else 'mix'}.gguf", rule,
                     canvas_length=cfg.canvas_length, sampler=sampler)
    if beside:
        sidecar(src, dst_dir)
    return out


def main(argv: list[str] | None = None) -> int:
    """`python -m engine.formats.gguf_write DIR [--beside]`: the shipped model as a GGUF in DIR."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m engine.formats.gguf_write",
                                 description="Write the shipped model (engine/default_model) as a Q8_0 GGUF file "
                                 "into DIR (created if missing); prints the file's path.")
    ap.add_argument("dir", metavar="DIR", type=Path, help="the folder to write dg-default-Q8_0.gguf into")
    ap.add_argument("--beside", action="store_true",
                    help="also copy the model's tokenizer.json and infill.json beside the file")
    args = ap.parse_args(argv)
    print(write_shipped(args.dir, beside=args.beside))
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main())
