"""The engine suite for a device run (what bench/gpu.sh calls): the DiffusionGemma 26B-A4B text shape with random
bf16 weights built on the GPU, its weight-streaming floor, the denoising step with CUDA graphs on and off at canvas
256 / 16 steps (ms per step against the floor, tokens/s), cold encodes of 4k and 32k contexts, transformers'
generate on the same tensors, then the shipped default model; writes JSON, PNG plots and gpu.md into --out.

Memory (80 GB card): 50.5 GB of weights; the prefix cache is capped at gpu_model.PREFIX_CACHE_BYTES (a 32k
context holds ~1.3 GB of KV now that sliding layers keep only their window); CUDA-graph workspaces and the encoder's
2,048-token chunks take a few GB more. Peak allocated memory is recorded per part.

    python -m bench.gpu_suite --out DIR            # needs CUDA
    python -m bench.gpu_suite --out DIR --dry-run  # the same code on CPU with a tiny shape (seconds)
    python -m bench.gpu_suite --quick              # --dry-run --skip-shipped into a temporary folder (smoke tests)
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import math
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bench import engine_sweep, gpu_model, plots  # noqa: E402
from bench.common import emit, machine, median  # noqa: E402
from bench.engine_speed import compare  # noqa: E402
from bench.report import engine_section  # noqa: E402


def say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# canvas, steps, context for the graphs on/off comparison; cold-encode contexts
FAST = {"gpu": dict(canvas=256, steps=16, context=512, repeats=5, cold=(4096, 32768)),
        "quick": dict(canvas=16, steps=4, context=64, repeats=2, cold=(256, 1024))}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _peak_mb(device: torch.device) -> float | None:
    return round(torch.cuda.max_memory_allocated(device) / 2**20, 1) if device.type == "cuda" else None


def fast_path(model, sizes: dict, floor_ms: float) -> dict:
    """The denoising step with CUDA graphs on and off (same tensors; stopping rule off, so every run takes its full
    step budget), and cold encodes under the engine's CUDA chunk policy."""
    device = next(model.parameters()).device
    gen = torch.Generator().manual_seed(0)
    ctx = torch.randint(6, model.cfg.vocab_size, (sizes["context"],), generator=gen).tolist()
    rows = []
    for graphs in (True, False):
        eng = gpu_model.make_engine(model, cuda_graphs=graphs, prefix_cache_size=2)
        eng.config = dataclasses.replace(eng.config, sampler=dataclasses.replace(
            eng.config.sampler, confidence_threshold=1e-9, stability_threshold=sizes["steps"] + 1))
        t = time.perf_counter()
        eng.infill(ctx, canvas_length=sizes["canvas"], steps=2, seed=0)  # encodes; captures the bucket's graph
        warm_s = time.perf_counter() - t
        ms = []
        for r in range(sizes["repeats"]):
            res = eng.infill(ctx, canvas_length=sizes["canvas"], steps=sizes["steps"], seed=1 + r)
            ms.append(res.timings["decode_ms"] / res.steps)
        step = median(ms)
        rows.append({"cuda_graphs": eng.cuda_graphs, "requested_graphs": graphs, "ms_per_step": round(step, 3),
                     "x_weight_stream_floor": round(step / floor_ms, 2), "first_call_s": round(warm_s, 2),
                     "tokens_per_s": round(sizes["canvas"] * 1e3 / (step * sizes["steps"]), 1),
                     "canvas": sizes["canvas"], "steps": sizes["steps"], "context": sizes["context"]})
        say(f"graphs {graphs}: {step:.2f} ms/step ({step / floor_ms:.2f}x the floor)")
        del eng
    eng = gpu_model.make_engine(model, prefix_cache_size=1)
    cold = []
    for n in sizes["cold"]:
        ids = torch.randint(6, model.cfg.vocab_size, (n,), generator=gen).tolist()
        for _ in range(2):  # the first is a warm-up
            eng.clear_prefix_cache()
            _sync(device)
            t = time.perf_counter()
            with torch.inference_mode():
                eng._encode_context(ids)
            _sync(device)
            ms = (time.perf_counter() - t) * 1e3
        cold.append({"context": n, "cold_encode_ms": round(ms, 1), "chunk": eng.encode_chunk,
                     "weight_passes": math.ceil(n / eng.encode_chunk), "kv_mb": round(eng.kv_bytes(n) / 2**20, 1)})
        say(f"cold encode {n}: {ms:.0f} ms")
    eng.clear_prefix_cache()
    return {"graphs": rows, "cold_encode": cold, "kv_bytes_per_token": eng.kv_bytes_per_token(),
            "cuda_peak_mb": _peak_mb(device)}


def random_shape_suite(shape: dict, name: str, device: torch.device, dtype: torch.dtype, sizes: dict,
                       context_budget_s: float, save=lambda out: None, fast: dict | None = None) -> dict:
    cfg = gpu_model.text_config(shape)
    counts = gpu_model.param_counts(cfg)
    say(f"building {name}: {counts['total_b']}B parameters ({counts['active_b']}B active) on {device}")
    t = time.perf_counter()
    model = gpu_model.random_model(cfg, device, dtype)
    build_s = time.perf_counter() - t
    if device.type == "cuda":
        counts["cuda_allocated_after_build_gb"] = round(torch.cuda.memory_allocated(device) / 1e9, 2)
    floor = gpu_model.weight_stream_floor(model)
    say(f"weight-streaming floor: {floor}")
    fast_out = fast_path(model, fast, floor["read_all_weights_ms"]) if fast else None
    save({"shape": shape, "params": counts, "weight_stream_floor": floor, "fast_path": fast_out})  # kept if cut off
    eng = gpu_model.make_engine(model)
    label = f"{name} shape, random {str(dtype).removeprefix('torch.')} weights ({counts['total_b']}B total, " \
            f"{counts['active_b']}B active)"
    out = engine_sweep.sweep(eng, label, sizes, progress=say, context_budget_s=context_budget_s)
    out["shape"], out["params"], out["build_s"], out["weight_stream_floor"] = shape, counts, round(build_s, 1), floor
    out["fast_path"] = fast_out
    save(out)
    say("transformers generate on the same tensors")
    twin = gpu_model.transformers_twin(model, shape)
    out["vs_transformers"] = compare(eng, twin, *sizes["transformers"])
    del twin, eng, model
    return out


def shipped_suite(device: torch.device, dtype: torch.dtype, sizes: dict, context_budget_s: float) -> dict | None:
    from engine.engine import default_model_path

    path = default_model_path()
    if not (path / "model.safetensors").is_file():
        return None
    from transformers import DiffusionGemmaForBlockDiffusion

    from engine.engine import Engine

    say(f"shipped model {path}")
    eng = Engine.from_pretrained(path, device=device, dtype=dtype)
    out = engine_sweep.sweep(eng, "default model (trained)", sizes, progress=say, context_budget_s=context_budget_s)
    ref = DiffusionGemmaForBlockDiffusion.from_pretrained(path, dtype=dtype).to(device).eval()
    out["vs_transformers"] = compare(eng, ref, *sizes["transformers"])
    return out


def markdown(result: dict) -> str:
    m = result["machine"]
    lines = [f"## Device benchmarks ({'DRY RUN on CPU, tiny shape' if result['dry_run'] else m['device']})", "",
             f"`{result['command']}` on {result['date'][:16].replace('T', ' ')}, host `{result['host']}`, torch "
             f"{m['torch']}, transformers {m['transformers']}. Runtime {result['runtime_s']:.0f} s.", ""]
    for key, title in (("random", "Random weights, " + ("tiny shape" if result["dry_run"] else "full-size shape")),
                       ("shipped", "Shipped default model")):
        e = result.get(key)
        if not e:
            continue
        lines += [f"### {title}", ""]
        if "weight_stream_floor" in e:
            f, best = e["weight_stream_floor"], min(r["ms_per_step"] for r in e["canvas_sweep"])
            lines += [f"Weight-streaming floor (read all {f['weight_gb']} GB of weights once): "
                      f"**{f['read_all_weights_ms']:.2f} ms** ({f['effective_gb_per_s']} GB/s); fastest measured "
                      f"step {best:.2f} ms ({best / f['read_all_weights_ms']:.2f}x the floor).", ""]
        if e.get("fast_path"):
            fp = e["fast_path"]
            lines += ["| CUDA graphs | canvas | steps | ms / step | x floor | tokens/s | first call s |",
                      "|---|---:|---:|---:|---:|---:|---:|",
                      *(f"| {r['cuda_graphs']} | {r['canvas']} | {r['steps']} | {r['ms_per_step']:.2f} | "
                        f"{r['x_weight_stream_floor']:.2f} | {r['tokens_per_s']:.0f} | {r['first_call_s']:.1f} |"
                        for r in fp["graphs"]), "",
                      "| cold context | encode ms | chunk | weight passes | KV MB |", "|---:|---:|---:|---:|---:|",
                      *(f"| {r['context']:,} | {r['cold_encode_ms']:.0f} | {r['chunk']} | {r['weight_passes']} | "
                        f"{r['kv_mb']:.0f} |" for r in fp["cold_encode"]), "",
                      f"KV cache: {fp['kv_bytes_per_token']:,} bytes per context token past the sliding window.",
                      ""]
        lines += engine_section(e)
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=None, help="default bench/results/gpu (--quick: a temporary folder)")
    ap.add_argument("--dry-run", action="store_true", help="CPU, tiny shape, tiny sizes: checks the code path")
    ap.add_argument("--skip-shipped", action="store_true")
    ap.add_argument("--quick", action="store_true", help="--dry-run --skip-shipped, files into a temporary folder "
                    "unless --out says where (smoke tests: never over the published results)")
    ap.add_argument("--context-budget-s", type=float, default=90.0)
    args = ap.parse_args(argv)
    if args.quick:
        args.dry_run = args.skip_shipped = True
    if args.out is not None or not args.quick:
        args.out = args.out or Path("bench/results/gpu")
        return run_suite(args)
    with tempfile.TemporaryDirectory(prefix="dg-gpu-quick-") as tmp:
        args.out = Path(tmp)
        return run_suite(args)


def run_suite(args: argparse.Namespace) -> dict:
    if not args.dry_run and not torch.cuda.is_available():
        raise SystemExit("no CUDA device: run with --dry-run to check the code path on CPU")
    device = torch.device("cpu" if args.dry_run else "cuda")
    dtype = torch.float32 if args.dry_run else torch.bfloat16  # CPU bf16 matmuls are slow enough to hide bugs
    sizes = engine_sweep.SIZES["quick" if args.dry_run else "gpu"]
    shape, name = (gpu_model.TINY, "tiny 26B-A4B-like") if args.dry_run else (gpu_model.GEMMA4_26B_A4B,
                                                                               "DiffusionGemma 26B-A4B")
    torch.manual_seed(0)
    if args.dry_run:
        torch.set_num_threads(1)  # a shared CPU: one thread is steadier (see bench/run.py)
    now, t0 = datetime.datetime.now(), time.perf_counter()
    result = {"date": now.isoformat(timespec="seconds"), "host": platform.node(), "machine": machine(),
              "dry_run": args.dry_run, "command": "bench/gpu.sh" + (" --dry-run" if args.dry_run else "")}
    args.out.mkdir(parents=True, exist_ok=True)
    json_path = args.out / f"gpu-{now:%Y-%m-%d}-{platform.node() or 'host'}.json"

    def save(random: dict | None = None) -> None:  # after every part: a run stopped by the time limit keeps them
        if random is not None:
            result["random"] = random
        result["runtime_s"] = round(time.perf_counter() - t0, 1)
        json_path.write_text(json.dumps(result, indent=1, sort_keys=True, default=str) + "\n")

    fast = FAST["quick" if args.dry_run else "gpu"]
    save(random_shape_suite(shape, name, device, dtype, sizes, args.context_budget_s, save=save, fast=fast))
    if device.type == "cuda":
        torch.cuda.empty_cache()
    if not args.skip_shipped:
        result["shipped"] = shipped_suite(device, dtype, sizes, args.context_budget_s)
    result["plots"] = []
    for key in ("random", "shipped"):
        if result.get(key):
            result["plots"] += [p.name for p in (
                plots.step_vs_canvas(result[key], args.out / f"{key}_step_vs_canvas.png"),
                plots.step_vs_context(result[key], args.out / f"{key}_step_vs_context.png"),
                plots.acceptance_bars(result[key], args.out / f"{key}_parallel_vs_one_per_step.png"))]
    save()
    md = markdown(result)
    (args.out / "gpu.md").write_text(md)
    print(md)
    r = result["random"]
    fp = r.get("fast_path") or {}
    emit({"json": str(json_path), "dry_run": args.dry_run, "runtime_s": result["runtime_s"],
          "random_ms_per_step_canvas256": next((x["ms_per_step"] for x in r["canvas_sweep"] if x["canvas"] == 256),
                                               None),
          "graphs_on_off_ms_per_step": [g["ms_per_step"] for g in fp.get("graphs", [])],
          "cold_encode_ms": {c["context"]: c["cold_encode_ms"] for c in fp.get("cold_encode", [])},
          "weight_stream_floor_ms": r["weight_stream_floor"]["read_all_weights_ms"],
          "speedup_vs_transformers": r["vs_transformers"]["speedup_vs_transformers"],
          "shipped": bool(result.get("shipped"))})
    return result


if __name__ == "__main__":
    main()
