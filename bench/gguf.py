"""GGUF checkpoints: bytes per ggml type of the 26B-A4B files computed from the shape (Q4_K_M against the published
16.8 GB) and what serving them packed takes on a 24 GB card, our dequantizers against gguf-py's, the logit error of
each quant type against F32 on a small random model, and the load time and host memory of a GGUF load.

    python -m bench.gguf [--quick]
    python -m bench.gguf --logits-only --device cuda   # on a device: each type's logits, served packed there
                                                       # (the Triton dequant-GEMM), against F32 on the same device

Last line JSON: q4_k_m_bytes, published_bytes, kernel_max_rel_err (the Triton ggml-block MoE kernel against its eager
oracle, fp32 activations, under TRITON_INTERPRET=1 here: no GPU), dequantizer_max_rel_err (our torch dequantizer,
the CPU matmul path, against gguf.quants.dequantize), logit_rel_err {type: x}, load_s, host_mb_beyond_map (peak
anonymous resident memory added while loading: the map's pages are not counted; it includes the tensors dequantized
to the compute dtype at load, `dequantized_mb`), host_mb_beyond_served (that peak less `dequantized_mb`: the load's
own temporaries), mixes, fit_4090.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from bench.common import emit, machine  # noqa: E402
from engine.formats import gguf_write as W  # noqa: E402
from engine.formats.gguf_quants import BLOCKS, dequantize  # noqa: E402
from engine.quant import memory  # noqa: E402

GB = 1e9
PUBLISHED_Q4_K_M = 16.8e9  # unsloth's diffusiongemma-26B-A4B-it-Q4_K_M.gguf (../shared/GGUF.md §0.3)
CARD_4090 = 24 * 2**30  # 24 GiB


def mix_rule(default: str, more: str | None) -> callable:
    """llama-quant's rule for one file type: `default` everywhere quantized, `more` for token_embd and where
    use_more_bits picks attn_v / ffn_down* (None: `default` there too)."""
    def rule(name, shape, n_layer, v_index):
        base = W.q4_k_m_type(name, shape, n_layer, v_index)
        if base == "F32" or default in ("BF16", "F16"):
            return base if base == "F32" else default
        picked = more if more and base in ("Q6_K", "Q8_0") else default  # Q8_0: a Q6_K that fell back
        return W.fit_type(picked, shape[-1])
    return rule


MIXES = {"Q4_K_M": W.q4_k_m_type, "Q5_K_M": mix_rule("Q5_K", "Q6_K"), "Q6_K": mix_rule("Q6_K", None),
         "Q8_0": mix_rule("Q8_0", None), "BF16": mix_rule("BF16", None)}


def mixes() -> dict:
    """Per file type: bytes per ggml type from the 26B-A4B shape, and the 4090 fit of serving it packed (targets as
    stored, embedding and norms dequantized to bf16 at load, the KV cache of a 4k context and the fill's working
    memory beside them, 1 GB for the CUDA context)."""
    from engine.formats.gguf import hf_name
    from engine.model.transformer import map_name
    from engine.quant.modules import is_target

    cfg = memory.gemma4_26b_a4b()
    shapes = W.gguf_shapes(cfg)
    reserve = memory.reserve_bytes(cfg, 2, 4096, overhead=int(1 * GB))
    out = {}
    for label, rule in MIXES.items():
        per = W.mix_bytes(cfg, rule)
        file_bytes = sum(m["bytes"] for m in per.values())
        v_index = {n: i for i, n in enumerate(sorted((n for n in shapes if ".attn_v." in n),
                                                     key=lambda n: int(n.split(".")[1])))}
        served = 0
        for name, shape in shapes.items():
            if name == "rope_freqs.weight":
                continue
            qtype = rule(name, shape, cfg.num_hidden_layers, v_index)
            numel = int(np.prod(shape))
            packed = qtype not in ("F32", "F16", "BF16") and is_target(map_name(hf_name(name)))
            served += numel // BLOCKS[qtype][0] * BLOCKS[qtype][1] if packed else numel * 2
        out[label] = {"file_bytes": file_bytes, "types": per, "served_bytes": served,
                      "served_plus_4k_context": served + reserve,
                      "fits_4090": served + reserve <= CARD_4090}
    return out


def dequantizer_error() -> float:
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize as reference

    rng = np.random.default_rng(0)
    worst = 0.0
    for qtype, (_, size) in BLOCKS.items():
        if qtype in ("F32", "F16", "BF16"):
            continue
        raw = rng.integers(0, 256, (64, 8 * size), dtype=np.uint8).reshape(-1, size)
        for at in {"Q6_K": [208], "Q8_0": [0], "Q5_0": [0]}.get(qtype, [0, 2]):
            raw[:, at:at + 2] = (rng.standard_normal((raw.shape[0], 1)) * 0.1).astype(np.float16).view(np.uint8)
        raw = raw.reshape(64, -1)
        want = torch.from_numpy(reference(raw, GGMLQuantizationType[qtype]))
        got = dequantize(torch.from_numpy(raw), qtype, want.shape[-1])
        worst = max(worst, float((got - want).abs().max() / want.abs().max()))
    return worst


def kernel_error(qtypes: tuple[str, ...] | None = None) -> float:
    """engine.kernels.gguf_moe against its oracle in a child process under Triton's interpreter (fp32 activations),
    on `qtypes` (default: every type it decodes)."""
    which = "" if qtypes is None else f", qtypes={qtypes!r}"
    code = ("import json; import torch; from engine.kernels.gguf_moe import max_rel_errs; "
            f"print(json.dumps(max_rel_errs((torch.float32,){which})))")
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT, env=env)
    return max(json.loads(r.stdout.strip().splitlines()[-1]).values())


def dequantized_mb(path: Path, compute_bytes: int) -> float:
    """MB of the tensors a weights=auto load dequantizes to the compute dtype (embedding, norms, router...)."""
    from engine.formats.gguf import IGNORED, hf_name, open_gguf
    from engine.model.transformer import map_name
    from engine.quant.modules import is_target

    info = open_gguf(path)
    total = 0
    for name, t in info.tensors.items():
        packed = t.qtype not in ("F32", "F16", "BF16") and is_target(map_name(hf_name(name)))
        if name not in IGNORED and not packed:
            total += int(np.prod(t.shape)) * compute_bytes
    return round(total / 2**20, 1)


QTYPES = ("BF16", "F16", "Q8_0", "Q6_K", "Q5_K", "Q5_1", "Q5_0", "Q4_K", "Q4_K_M")
# --quick runs the loop on the Q4_K_M mix (K-quants and their fallbacks) against the F32 reference (the float path):
# a code-path check; each type's load and logits are tests/quant/test_gguf.py's cases, and the kernel on Q4_K alone
# (every type, fp32 and fp16: tests/quant/test_gguf_kernel.py)
QUICK_QTYPES = ("Q4_K_M",)
QUICK_KERNEL_QTYPES = ("Q4_K",)


def logit_errors(root: Path, device: str = "cpu", qtypes: tuple[str, ...] = QTYPES) -> dict:
    """Each quant type against F32 on the shipped model (trained weights: a random model's logits move by tens of
    percent under any rounding), all loaded from GGUF and served packed; decoder logits on a code context and a
    random canvas. Its rows are 192 or 512 wide, so a K-quant covers the 512-wide rows (down projections, expert
    gate_up) and falls back elsewhere (Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0): `types` lists each file's mix."""
    from engine.engine import Engine, default_model_path
    from engine.formats.gguf import open_gguf
    from engine.model.transformer import KVCache

    src = default_model_path()

    def logits(path: Path) -> torch.Tensor:
        eng = Engine.from_pretrained(path, device=device, dtype="float32")
        model = eng.model
        g = torch.Generator().manual_seed(0)
        ctx = torch.randint(0, model.cfg.vocab_size, (1, 48), generator=g).to(eng.device)
        canvas = torch.randint(0, model.cfg.vocab_size, (1, 16), generator=g).to(eng.device)
        with torch.inference_mode():
            return model.decode(canvas, model.encode(ctx, KVCache()), None).float().cpu()

    ref = logits(W.write_gguf(src, root / "F32.gguf", "F32"))
    out, types = {}, {}
    for qtype in qtypes:
        path = W.write_gguf(src, root / f"{qtype}.gguf", W.q4_k_m_type if qtype == "Q4_K_M" else qtype)
        got = logits(path)
        out[qtype] = round(float((got - ref).abs().max() / ref.abs().max()), 6)
        types[qtype] = sorted(open_gguf(path).type_counts())
    return {"logit_rel_err": out, "types": types}


_LOAD = """
import resource, sys, threading, time
from engine.engine import Engine
def anon():
    with open('/proc/self/status') as f:
        return next(int(l.split()[1]) for l in f if l.startswith('RssAnon:')) * 1024
base, peak, done = anon(), [0], []
def watch():
    while not done:
        peak[0] = max(peak[0], anon()); time.sleep(0.002)
t = threading.Thread(target=watch); t.start()
t0 = time.perf_counter()
eng = Engine.from_pretrained(sys.argv[1], device='cpu', dtype=sys.argv[2])
dt = time.perf_counter() - t0
done.append(1); t.join()
print(dt, max(peak[0], anon()) - base, anon() - base)
"""


def load_stats(path: Path, dtype: str) -> dict:
    """Load time and anonymous memory of a GGUF load in a fresh process (torch imported before the baseline)."""
    code = "import torch, engine.engine\n" + _LOAD
    r = subprocess.run([sys.executable, "-c", code, str(path), dtype], capture_output=True, text=True, check=True,
                       cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    load_s, peak, kept = (float(x) for x in r.stdout.split()[-3:])
    return {"load_s": round(load_s, 3), "peak_anon_mb": round(peak / 2**20, 1), "kept_anon_mb": round(kept / 2**20, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help="a smaller model for the load figures, logits of the Q4_K_M mix, the kernel on Q4_K")
    ap.add_argument("--device", default="cpu", help="where the logit comparison runs (cuda: the packed kernels)")
    ap.add_argument("--logits-only", action="store_true", help="only the logit errors (the device check)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    if args.logits_only:
        with tempfile.TemporaryDirectory() as tmp:
            le = logit_errors(Path(tmp), args.device)
        print(f"logit rel err vs F32 on {args.device}: {le['logit_rel_err']}")
        emit({"device": args.device, "logit_rel_err": le["logit_rel_err"], "machine": machine()})
        return
    small = dict(hidden_size=256, intermediate_size=512, num_hidden_layers=3, num_attention_heads=2,
                 num_key_value_heads=1, head_dim=128, global_head_dim=256, num_global_key_value_heads=1,
                 sliding_window=8, layer_types=["sliding_attention", "full_attention", "full_attention"],
                 num_experts=4, top_k_experts=2, moe_intermediate_size=256)
    big = dict(small, hidden_size=1024, intermediate_size=2048, num_hidden_layers=4, num_attention_heads=8,
               num_key_value_heads=2, layer_types=["sliding_attention"] * 3 + ["full_attention"], num_experts=16,
               top_k_experts=4, moe_intermediate_size=512)
    mix = mixes()
    q4 = mix["Q4_K_M"]
    for label, m in mix.items():
        types = ", ".join(f"{t} {v['tensors']} ({v['bytes'] / GB:.2f} GB)" for t, v in m["types"].items())
        print(f"{label}: file {m['file_bytes'] / GB:.2f} GB [{types}]; served packed {m['served_bytes'] / GB:.2f} GB, "
              f"+4k context {m['served_plus_4k_context'] / GB:.2f} GB: {'fits' if m['fits_4090'] else 'does not fit'}"
              " a 24 GiB card")
    err = dequantizer_error()
    print(f"dequantizer vs gguf.quants.dequantize, max rel err over Q-types: {err}")
    kerr = kernel_error(QUICK_KERNEL_QTYPES if args.quick else None)
    print(f"Triton ggml-block MoE kernel vs its eager oracle (interpreter, fp32): max rel err {kerr}")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "logit").mkdir()
        le = logit_errors(root / "logit", qtypes=QUICK_QTYPES if args.quick else QTYPES)
        logit = le["logit_rel_err"]
        print(f"logit rel err vs F32 (shipped model, served packed): {logit}; file mixes {le['types']}")
        from engine.testing.tiny import build_tiny_checkpoint

        shape = small if args.quick else big
        src = build_tiny_checkpoint(root / "load_hf", shape, canvas_length=16, seed=1, with_tokenizer=False,
                                    vocab_size=4096 if args.quick else 32768)
        path = W.write_gguf(src, root / "load.gguf")
        size_mb = path.stat().st_size / 2**20
        stats = load_stats(path, "bfloat16")
        stats["dequantized_mb"] = dequantized_mb(path, 2)
        print(f"load of a {size_mb:.1f} MB Q4_K_M GGUF (bf16 compute): {stats}")
    emit({"q4_k_m_bytes": q4["file_bytes"], "published_bytes": int(PUBLISHED_Q4_K_M),
          "q4_k_m_vs_published": round(q4["file_bytes"] / PUBLISHED_Q4_K_M - 1, 4),
          "kernel_max_rel_err": kerr, "dequantizer_max_rel_err": err,
          "logit_rel_err": logit, "load_s": stats["load_s"], "host_mb_beyond_map": stats["peak_anon_mb"],
          "host_mb_kept": stats["kept_anon_mb"], "dequantized_mb": stats["dequantized_mb"],
          "host_mb_beyond_served": round(stats["peak_anon_mb"] - stats["dequantized_mb"], 1),
          "load_file_mb": round(size_mb, 1),
          "mixes": {k: {kk: vv for kk, vv in v.items() if kk != "types"} for k, v in mix.items()},
          "fit_4090": q4["fits_4090"], "quick": args.quick, "machine": machine()})


if __name__ == "__main__":
    main()
