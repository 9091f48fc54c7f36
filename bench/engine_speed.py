"""Engine vs transformers' `generate` on the same checkpoint, same run, CPU: per-step time and speedup.

    python -m bench.engine_speed [--model DIR] [--context 512] [--canvas 64] [--steps 16] [--repeats 5] [--no-compile]
    python -m bench.engine_speed --quick   # seconds: a tiny random checkpoint, no compiled row (a code-path check)

Rows: the engine as it ships (eager step), the engine with its decoder compiled (`Engine(compile=True)`; the
first call compiles, excluded and reported as compile_s), the engine's reference-compatible mode, transformers.

`families`: each mask-diffusion family's exact step time at the same context, canvas and steps
(bench.engine_speed_families, random weights in memory); `--families-0.5b STEPS` adds a 0.5B Qwen2's 32-token fill
at 512 context.

Without --model it builds a 12.6M-parameter random checkpoint of the DiffusionGemma architecture (the size class
of the shipped model; vocabulary 8,192). Runs are interleaved (ours, theirs, ours, ...) so machine noise hits both;
one warm-up each is excluded; medians are reported. Both sides run the same number of denoising steps (the
stopping rule is disabled by a tiny confidence threshold), so per-step times compare like with like.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import tempfile
import time
from pathlib import Path

import torch

from bench.checkpoint import build_bench_checkpoint

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def run(model: Path, context: int, canvas: int, steps: int, repeats: int, compiled: bool = False) -> dict:
    """Load `model` into both implementations (CPU, fp32) and compare them."""
    from transformers import DiffusionGemmaForBlockDiffusion

    from engine.engine import Engine

    eng = Engine.from_pretrained(model, device="cpu", dtype="float32")
    ref = DiffusionGemmaForBlockDiffusion.from_pretrained(model).eval()
    twin = None
    if compiled:  # the same weights, the decoder compiled
        twin = Engine(eng.model, eng.config, eng.tokenizer, eng.infill_format, eng.device, eng.dtype, eng.path,
                      compile=True)
    return compare(eng, ref, context, canvas, steps, repeats, compiled=twin)


def _quiet(eng, never: int) -> None:
    eng.config = dataclasses.replace(eng.config, sampler=dataclasses.replace(
        eng.config.sampler, confidence_threshold=1e-9, stability_threshold=never))


def compare(eng, ref, context: int, canvas: int, steps: int, repeats: int, compiled=None) -> dict:
    """Time `eng` (an Engine) against `ref` (transformers' DiffusionGemmaForBlockDiffusion holding the same
    weights, on the same device) on fixed random prompts; with `compiled`, an Engine(compile=True) on the same
    weights too. Prints a table, returns the JSON fields."""
    ref.config.canvas_length = canvas
    # The stopping rule off on both sides (a confident trained model would stop the engine after a few steps)
    never = steps + 1  # a stability window longer than the run: the stopping rule cannot fire
    for e in (eng, compiled):
        if e is not None:
            _quiet(e, never)
    n_params = sum(p.numel() for p in eng.model.parameters())
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(3, eng.vocab_size, (1, context), generator=g) for _ in range(repeats + 1)]
    calls = {"n": 0}
    fwd = ref.forward
    sync = torch.cuda.synchronize if eng.device.type == "cuda" else (lambda: None)

    def counting_forward(*a, **k):
        calls["n"] += 1
        return fwd(*a, **k)

    ref.forward = counting_forward

    def ours(i: int, reference: bool, e=eng) -> tuple[float, int]:
        e.clear_prefix_cache()  # cold: every run encodes its context
        sync()
        t = time.perf_counter()
        res = e.infill(prompts[i][0].tolist(), canvas_length=canvas, steps=steps, seed=i, entropy_bound=1e-6,
                       reference_compatible=reference)
        sync()
        return time.perf_counter() - t, res.steps

    def theirs(i: int) -> tuple[float, int]:
        calls["n"] = 0
        torch.manual_seed(i)
        ids = prompts[i].to(eng.device)
        sync()
        t = time.perf_counter()
        with torch.no_grad():
            ref.generate(ids, max_new_tokens=canvas, max_denoising_steps=steps, confidence_threshold=1e-9,
                         stability_threshold=never)
        sync()
        return time.perf_counter() - t, calls["n"]

    names = ["engine", "transformers", "engine_reference_mode"] + (["engine_compiled"] if compiled else [])
    times = {name: [] for name in names}
    step_counts = {k: [] for k in times}
    compile_s = None
    for i in range(repeats + 1):  # i == 0 is the warm-up
        for name in names:
            if name == "transformers":
                dt, n = theirs(i)
            elif name == "engine_compiled":
                dt, n = ours(i, False, compiled)
                compile_s = compile_s if i else dt  # the warm-up run compiles the decoder
            else:
                dt, n = ours(i, name == "engine_reference_mode")
            if i:
                times[name].append(dt)
                step_counts[name].append(n)
    from bench.common import median

    out = {}
    print(f"model: {n_params / 1e6:.1f}M parameters, context {context}, canvas {canvas}, {steps} steps, "
          f"{repeats} runs each (median)")
    print(f"{'implementation':<24}{'canvas ms':>11}{'steps':>7}{'ms/step':>9}{'tok/s':>8}")
    for name in times:
        total = median(times[name]) * 1e3
        n = median(step_counts[name])
        out[name] = {"canvas_ms": total, "steps": n, "ms_per_step": total / n, "tokens_per_s": canvas / total * 1e3}
        print(f"{name:<24}{total:>11.1f}{n:>7.0f}{total / n:>9.2f}{canvas / total * 1e3:>8.0f}")
    if len({o["steps"] for o in out.values()}) > 1:
        counts = {k: o["steps"] for k, o in out.items()}
        raise RuntimeError(f"the implementations ran different step counts: {counts}")
    speedup = out["transformers"]["canvas_ms"] / out["engine"]["canvas_ms"]
    print(f"speedup vs transformers: {speedup:.2f}x (reference-compatible mode: "
          f"{out['transformers']['canvas_ms'] / out['engine_reference_mode']['canvas_ms']:.2f}x)")
    extra = {}
    if compiled:
        c = out["engine_compiled"]
        extra = {"compiled_speedup_vs_transformers": round(out["transformers"]["canvas_ms"] / c["canvas_ms"], 3),
                 "engine_compiled_ms_per_step": round(c["ms_per_step"], 3),
                 "engine_compiled_canvas_ms": round(c["canvas_ms"], 2), "compile_s": round(compile_s, 1)}
        print(f"compiled decoder: {extra['compiled_speedup_vs_transformers']:.2f}x (first call, compiling: "
              f"{compile_s:.0f} s, excluded)")
    return {**extra,
        "params_m": round(n_params / 1e6, 2), "context": context, "canvas": canvas, "steps": steps,
        "speedup_vs_transformers": round(speedup, 3),
        "engine_ms_per_step": round(out["engine"]["ms_per_step"], 3),
        "transformers_ms_per_step": round(out["transformers"]["ms_per_step"], 3),
        "engine_reference_mode_ms_per_step": round(out["engine_reference_mode"]["ms_per_step"], 3),
        "engine_canvas_ms": round(out["engine"]["canvas_ms"], 2),
        "transformers_canvas_ms": round(out["transformers"]["canvas_ms"], 2),
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, default=None)
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--canvas", type=int, default=64)
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=min(2, torch.get_num_threads()),
                    help="torch threads (1 is steadier when other jobs share the cores)")
    ap.add_argument("--no-compile", action="store_true", help="leave out the compiled-decoder engine")
    ap.add_argument("--families-0.5b", dest="big", type=int, default=0, metavar="STEPS",
                    help="also time a 32-token fill at 512 context of a 0.5B Qwen2 (Open-dCoder's shape, random "
                    "weights), STEPS of its 32 steps timed (minutes per step on a busy 2-core machine)")
    ap.add_argument("--holes", type=int, default=200, help="held-out holes for the families' dual-cache agreement")
    ap.add_argument("--quick", action="store_true", help="tiny checkpoint and sizes, no compiled row (smoke tests; "
                    "the compiled row's keys come only with compiling, which takes minutes on a CPU)")
    args = ap.parse_args(argv)
    if args.quick:
        args.context, args.canvas, args.steps, args.repeats, args.no_compile = 32, 8, 2, 1, True
    torch.set_num_threads(args.threads)
    from bench.common import emit, machine

    with tempfile.TemporaryDirectory() as tmp:
        if args.model is None and args.quick:
            from engine.testing.tiny import build_tiny_checkpoint

            model = build_tiny_checkpoint(Path(tmp) / "tiny", "mixed", canvas_length=args.canvas)
        else:
            model = args.model or build_bench_checkpoint(Path(tmp), args.canvas)
        result = run(model, args.context, args.canvas, args.steps, args.repeats, compiled=not args.no_compile)
    from bench.engine_speed_families import run_families  # Dream and LLaDA: the exact path per family

    result["families"] = run_families(args.context, args.canvas, args.steps, args.repeats, big=args.big > 0,
                                      big_steps=args.big, agreement_holes=4 if args.quick else args.holes)
    result["machine"] = machine()
    emit(result)


if __name__ == "__main__":
    main()
