"""The safetensors twin of a GGUF file: its tensors (gguf-py's dequantization of each, under the HF names) as a
safetensors checkpoint with the source checkpoint's config and tokenizer files, laid out at the GGUF's alignment.

Why the layout matters: on CPU, MKL computes a one-row matmul (a GEMV: a one-token context, an expert that gets one
token) with a kernel chosen by the weight's address modulo 16 bytes, and the last bits of the result differ between
the four classes (tests/engine/test_short_contexts.py). Both the engine and transformers keep a safetensors tensor
where the file's mmap puts it, so a checkpoint's numbers depend on its layout: `save_pretrained` packs tensors
back to back, and every tensor after a 4-byte layer scalar lands 4 bytes off. A GGUF puts every tensor at a multiple
of its alignment (32). A twin written by `save_pretrained` therefore differs from the GGUF by ~1e-5 in one-row
logits although every weight is bit-equal; this twin places every tensor of a whole number of alignment units at a
multiple of the alignment too (the odd-sized scalars last), so it is the same model *and* the same layout: the engine
on the GGUF and the engine and transformers on the twin compute the same bits.
"""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import numpy as np
import torch

_DTYPES = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16"}


def save_aligned(tensors: dict[str, torch.Tensor], path: Path, align: int = 32,
                 metadata: dict[str, str] | None = None) -> Path:
    """A valid safetensors file (contiguous data, any order) in which every tensor whose size is a multiple of
    `align` bytes starts at a multiple of `align` in the file (the mmap is page-aligned, so in memory too)."""
    items = sorted(tensors.items(), key=lambda kv: (kv[1].numel() * kv[1].element_size() % align != 0, kv[0]))
    header: dict[str, object] = {"__metadata__": metadata or {"format": "pt"}}
    start, blobs = 0, []
    for name, t in items:
        raw = t.detach().contiguous().cpu().view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[name] = {"dtype": _DTYPES[t.dtype], "shape": list(t.shape), "data_offsets": [start, start + len(raw)]}
        blobs.append(raw)
        start += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((-(8 + len(text))) % align)  # the data section starts at a multiple of `align`
    with path.open("wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for raw in blobs:
            f.write(raw)
    return path


def gguf_twin(gguf_path: Path, src: Path, dst: Path) -> Path:
    """`dst`: src's config/tokenizer files and model.safetensors holding the GGUF's tensors dequantized by gguf-py
    (float32), under their HF names, laid out at the GGUF's alignment (`save_aligned`)."""
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize

    from engine.formats import gguf as G

    dst.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.is_file() and f.name != "model.safetensors.index.json" and not f.name.endswith(".safetensors"):
            shutil.copy(f, dst / f.name)
    info = G.open_gguf(gguf_path)
    out = {}
    for name, t in info.tensors.items():
        if name in G.IGNORED:
            continue
        w = dequantize(np.asarray(t.data), GGMLQuantizationType[t.qtype]).astype(np.float32)
        out[G.hf_name(name)] = torch.from_numpy(w.copy()).reshape(t.shape)
    save_aligned(out, dst / "model.safetensors", align=int(info.fields.get("general.alignment", 32)))
    return dst
