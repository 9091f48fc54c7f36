"""Decoder step time of the 26B-A4B text shape with int4 / int8 / fp8 weights and GGUF's Q8_0 and Q4_K_M blocks
(served packed, dequantized inside the matmul) beside bf16, each against the weight-streaming floor of its own
bytes, on one CUDA device. Random weights are made on the device tensor by tensor
and quantized there (no files; bf16 peak is one tensor). bench/gpu.sh calls it with one line:

    "$PYTHON" -m bench.gpu_quant --out "$OUT"          # on a CUDA device (about 3 minutes on an H200)
    python -m bench.gpu_quant --dry-run                 # tiny shape on the CPU: checks the code path (seconds)
    python -m bench.gpu_quant --quick                   # the same (every bench module has --quick)
    bench/gpu_gguf.sh                                   # a device check of the GGUF path (see there)

On random MoE weights a rounding flips some top-k routes, so the logit errors here are tens of percent for every
format; the logit error that tells about a format is bench.gguf's, on trained weights.

Last line JSON: per format, weight GB, ms per step (canvas 256, 512 context tokens), floor ms, floor / measured,
the step's logits' max error relative to bf16's on the same random weights and inputs.
`gguf:Q4_K_M` here: Q4_K for every quantized matrix whose rows are whole 256-value blocks, Q8_0 for the rest (the
published mix takes Q5_0 for some of those and Q6_K for a few: its bytes differ by a few percent, and the floor is
computed from the bytes built).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from bench.common import emit, machine, median
from engine.config import parse_text_config
from engine.denoising.checked_runner import check_kernels
from engine.formats.gguf_quants import QK_K, quantize_k, quantize_q8_0, row_bytes
from engine.kernels.table import Target
from engine.model.transformer import DiffusionGemmaText, KVCache
from engine.quant import memory
from engine.quant.formats import FORMATS, QuantParts, quantize
from engine.quant.modules import is_target, swap_in, weight_bytes

TINY = dict(vocab_size=4096, hidden_size=64, intermediate_size=96, num_hidden_layers=6, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, global_head_dim=32, num_global_key_value_heads=1, sliding_window=64,
            num_experts=8, top_k_experts=2, moe_intermediate_size=32, max_position_embeddings=65_536)
H200_BANDWIDTH = 4.8e12  # bytes/s (REFERENCE.md section 3)
GGUF_FORMATS = ("gguf:Q8_0", "gguf:Q4_K_M")


def gguf_parts(w: torch.Tensor, fmt: str) -> QuantParts:
    """`w` packed in ggml blocks on its device (engine.formats.gguf_quants), as a GGUF file would hold it."""
    k = w.shape[-1]
    qtype = "Q4_K" if fmt == "gguf:Q4_K_M" and k % QK_K == 0 else "Q8_0"
    rows = w.reshape(-1, k)
    packed = torch.empty(rows.shape[0], row_bytes(qtype, k), dtype=torch.uint8, device=w.device)
    step = max(1, (1 << 22) // k)  # ~4M values per call: the quantizers' temporaries stay ~100 MB
    for r0 in range(0, rows.shape[0], step):
        chunk = rows[r0:r0 + step]
        packed[r0:r0 + step] = quantize_k(chunk, qtype) if qtype == "Q4_K" else quantize_q8_0(chunk)
    return QuantParts(f"gguf:{qtype}", tuple(w.shape), packed.reshape(*w.shape[:-1], -1),
                      torch.empty(0, device=w.device))


def build(raw: dict, fmt: str, device: torch.device, dtype: torch.dtype, seed: int = 0) -> DiffusionGemmaText:
    """The model on the meta device, then each tensor made random on `device` (N(0, 1/fan_in) matrices, norms
    1 + N(0, 0.1)) and quantized at once when `fmt` says so."""
    cfg = parse_text_config(raw)
    with torch.device("meta"):
        model = DiffusionGemmaText(cfg)
    g = torch.Generator(device=device).manual_seed(seed)
    state, parts = {}, {}
    for key, t in model.state_dict().items():
        if t.dim() >= 2:
            w = torch.randn(t.shape, generator=g, device=device, dtype=dtype) / t.shape[-1] ** 0.5
        else:
            w = 1.0 + 0.1 * torch.randn(t.shape, generator=g, device=device, dtype=torch.float32)
        if fmt != "bf16" and is_target(key):
            p = gguf_parts(w, fmt) if fmt in GGUF_FORMATS else quantize(w, fmt, device)
            parts[key] = p
            path = key[: -len(".weight")] if key.endswith(".weight") else key
            state.update({f"{path}.qweight": p.qweight, f"{path}.scale": p.scale})
            if p.zero is not None:
                state[f"{path}.zero"] = p.zero
        else:
            state[key] = w.to(dtype)
        del w
    swap_in(model, parts)
    model.load_state_dict(state, assign=True, strict=True)
    model = model.eval().requires_grad_(False)
    check_kernels(Target(model, device, dtype))  # the Triton matmuls serve once they pass their self-check
    return model


def step_ms(model: DiffusionGemmaText, device: torch.device, context: int, canvas: int,
            reps: int) -> tuple[float, torch.Tensor]:
    """(median ms per decoder step, the step's logits on the fixed canvas: every format sees the same inputs)."""
    v = model.cfg.vocab_size
    g = torch.Generator(device=device).manual_seed(1)
    with torch.inference_mode():
        cache = model.encode(torch.randint(0, v, (1, context), generator=g, device=device), KVCache())
        ids = torch.randint(0, v, (1, canvas), generator=g, device=device)
        times, logits = [], None
        for i in range(reps + 2):  # two warm-up steps excluded
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            t0 = time.perf_counter()
            logits = model.decode(ids, cache, None)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            if i >= 2:
                times.append(1e3 * (time.perf_counter() - t0))
    return median(times), logits.float()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dry-run", action="store_true", help="tiny shape on the CPU")
    ap.add_argument("--quick", action="store_true", help="--dry-run (the smoke tests' name for it)")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--formats", default=",".join((*FORMATS, *GGUF_FORMATS)),
                    help="comma-separated, bf16 first (the logit reference); e.g. bf16,gguf:Q8_0,gguf:Q4_K_M")
    ap.add_argument("--bandwidth", type=float, default=H200_BANDWIDTH, help="bytes/s for the streaming floor")
    args = ap.parse_args(argv)
    args.dry_run = args.dry_run or args.quick
    device = torch.device("cpu" if args.dry_run or not torch.cuda.is_available() else "cuda")
    raw = TINY if device.type == "cpu" else memory.GEMMA4_26B_A4B
    dtype = torch.float32 if device.type == "cpu" else torch.bfloat16
    canvas, context = (16, 64) if device.type == "cpu" else (256, 512)
    rows, ref = {}, None
    for fmt in args.formats.split(","):  # bf16 first: the others' logits are compared with its
        model = build(raw, fmt, device, dtype)
        nbytes = weight_bytes(model)
        ms, logits = step_ms(model, device, context, canvas, args.reps if device.type == "cuda" else 2)
        ref = logits if ref is None else ref
        err = float((logits - ref).abs().max() / ref.abs().max())
        floor = 1e3 * nbytes / args.bandwidth
        rows[fmt] = {"weights_gb": round(nbytes / 1e9, 2), "step_ms": round(ms, 2), "floor_ms": round(floor, 2),
                     "floor_over_measured": round(floor / ms, 3), "logit_rel_err_vs_bf16": round(err, 5)}
        print(f"{fmt:<12} {nbytes / 1e9:7.2f} GB  step {ms:8.2f} ms  floor {floor:7.2f} ms  logits vs bf16 {err:.4f}")
        del logits
        del model
        if device.type == "cuda":
            torch.cuda.empty_cache()
    result = {"shape": "tiny" if device.type == "cpu" else "26B-A4B", "canvas": canvas, "context": context,
              "formats": rows, "machine": machine()}
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "gpu_quant.json").write_text(json.dumps(result, indent=2))
    emit(result)


if __name__ == "__main__":
    main()
