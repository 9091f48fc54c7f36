"""bench.cpu_quant's error table: what the 8-bit few-row product adds to a quantized file's own error, against F32.

`matmul_errors`: one weight of each ggml type in the bench's files (the F32 file's weight is the truth), times 8
random rows of x: the format's own error (its exact dequantized values, `exact_vs_f32`), the few-row product with x in
8 bits (`int8_vs_f32`, what serves the K-quants by default: DG_CPU_ACTIVATIONS=int8) and between the two
(`int8_vs_exact`): max |a - b| / max |b|. (The shipped trained model cannot show it: its hidden size, 192, is no
multiple of 256, so it has no K-quant weights.)
"""

from __future__ import annotations

from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
# (tensor, ggml type in the file) per format of the bench: a plain linear and the MoE's down experts
PICKS = {"Q8_0": ["blk.0.ffn_up.weight"], "Q4_K_M": ["blk.0.ffn_up.weight", "blk.0.ffn_down_exps.weight"]}


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return round(float((a - b).abs().max() / b.abs().max()), 6)


def _tensor(path: Path, name: str):
    import gguf

    reader = gguf.GGUFReader(str(path))
    return next(t for t in reader.tensors if t.name == name)


def matmul_errors(files: dict) -> dict:
    """{format: {tensor (type): {exact_vs_f32, int8_vs_f32, int8_vs_exact}}} for the formats in PICKS."""
    from engine.formats.gguf_quants import dequantize
    from engine.quant.native import ops

    if "F32" not in files:
        return {}
    out: dict[str, dict] = {}
    for fmt, names in PICKS.items():
        if fmt not in files:
            continue
        for name in names:
            f32 = _tensor(next(iter(files["F32"].values())), name)
            t = _tensor(next(iter(files[fmt].values())), name)
            qtype = t.tensor_type.name
            k = int(t.shape[0])
            w = torch.from_numpy(f32.data.copy()).reshape(-1, k)[:2048]
            raw = torch.from_numpy(t.data.copy()).reshape(-1, t.data.shape[-1])[:2048]
            x = torch.randn(8, k, generator=torch.Generator().manual_seed(0))
            truth = x @ w.T
            exact = x @ dequantize(raw, qtype, k).T
            row = {"exact_vs_f32": _rel(exact, truth)}
            if ops.int8_available(qtype):
                int8 = ops.qmatmul_int8(qtype, raw, 0, raw.shape[0], k, x, torch.empty_like(truth))
                row.update(int8_vs_f32=_rel(int8, truth), int8_vs_exact=_rel(int8, exact))
            out.setdefault(fmt, {})[f"{name} ({qtype})"] = row
    return out

