"""Engine speed sweeps on one checkpoint: step time vs canvas and context length, parallel vs one-per-step
acceptance, and encoder time cold vs with the prefix cache.

    python -m bench.engine_sweep [--model DIR] [--quick]

Without --model it uses the shipped default model (engine/default_model) when it exists, else the random bench
checkpoint of bench/engine_speed.py (BENCH_SHAPE, vocabulary 8,192). Contexts are real Python source from the
standard library when the checkpoint has a tokenizer (acceptance of a trained model means nothing on random ids),
random ids otherwise. Seeds are fixed, one warm-up per configuration is excluded, medians are reported.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

from bench.common import emit, machine, median, pick_model

os.environ.setdefault("HF_HUB_OFFLINE", "1")

CANVASES = (16, 32, 64, 128, 256)
CONTEXTS = (256, 512, 1024, 2048, 4096, 8192)
STDLIB_FILES = ("argparse.py", "typing.py", "inspect.py", "subprocess.py", "tarfile.py", "dataclasses.py")

Progress = Callable[[str], None]


def _noop(_: str) -> None:
    pass


def load(path: Path):
    from engine.engine import Engine

    # Room for every context of a sweep: round-robin runs must not evict each other's prefix KV.
    return Engine.from_pretrained(path, device="auto", dtype="auto", prefix_cache_size=16)


def model_info(eng, label: str) -> dict:
    n = sum(p.numel() for p in eng.model.parameters())
    t = eng.config.text
    return {"label": label, "path": str(eng.path), "params_m": round(n / 1e6, 2), "vocab": t.vocab_size,
            "layers": t.num_hidden_layers, "hidden": t.hidden_size, "experts": t.num_experts,
            "top_k": t.top_k_experts, "sliding_window": t.sliding_window, "device": str(eng.device),
            "dtype": str(eng.dtype).removeprefix("torch."), "real_code_contexts": eng.tokenizer is not None}


class Contexts:
    """Fixed-seed contexts of an exact token count: real code (suffix-first prompt, 3/4 prefix) or random ids."""

    def __init__(self, eng, seed: int = 0) -> None:
        self.eng, self.seed = eng, seed
        self.tokens: list[int] = []
        if eng.tokenizer is not None:
            root = Path(os.__file__).parent
            text = "\n".join((root / f).read_text() for f in STDLIB_FILES if (root / f).is_file())
            self.tokens = eng.encode(text)

    def get(self, n: int, index: int = 0) -> list[int]:
        g = torch.Generator().manual_seed(self.seed * 1000 + index * 7 + n)
        body = n - 4  # the infill layout adds 4 special tokens
        if self.tokens and len(self.tokens) > body + 1:
            start = int(torch.randint(0, len(self.tokens) - body, (1,), generator=g))
            span = self.tokens[start:start + body]
            cut = body * 3 // 4
            return self.eng.infill_format.context(span[:cut], span[cut:])
        return torch.randint(6, self.eng.vocab_size, (n,), generator=g).tolist()


def step_times(eng, configs: list[tuple[list[int], int]], steps: int, repeats: int, ref_steps: int = 16,
               progress: Progress = _noop, budget_s: float | None = None) -> list[dict]:
    """Decoder ms per step for each (context ids, canvas length), context already cached. Each configuration gets
    a 2-step warm-up (which also encodes its context; excluded, and on CUDA its peak memory is recorded), then the
    configurations are run round-robin `repeats` times so machine noise spreads over all of them; medians.
    tokens/s is for a canvas denoised in `ref_steps` steps. With `budget_s`, configurations whose warm-up starts
    after that many seconds are left out (the caller reports the cap)."""
    cuda = eng.device.type == "cuda"
    warm, t0 = [], time.perf_counter()
    for ctx, canvas in configs:
        if budget_s is not None and time.perf_counter() - t0 > budget_s:
            break
        progress(f"warm-up: context {len(ctx)}, canvas {canvas}")
        if cuda:
            torch.cuda.reset_peak_memory_stats(eng.device)
        eng.infill(ctx, canvas_length=canvas, steps=2, seed=0)
        warm.append(round(torch.cuda.max_memory_allocated(eng.device) / 2**20, 1) if cuda else None)
    samples: list[list[float]] = [[] for _ in warm]
    for r in range(repeats):
        progress(f"round {r + 1}/{repeats} over {len(warm)} configurations")
        for i, (ctx, canvas) in enumerate(configs[:len(warm)]):
            res = eng.infill(ctx, canvas_length=canvas, steps=steps, seed=1 + r)
            samples[i].append(res.timings["decode_ms"] / max(res.steps, 1))
    rows = []
    for (ctx, canvas), xs, mem in zip(configs, samples, warm, strict=False):
        ms = median(xs)
        row = {"context": len(ctx), "canvas": canvas, "ms_per_step": round(ms, 3), "steps": steps,
               "canvas_ms": round(ms * ref_steps, 2), "tokens_per_s": round(canvas * 1e3 / (ms * ref_steps), 1)}
        if mem is not None:
            row["cuda_max_allocated_mb"] = mem
        rows.append(row)
    return rows


def canvas_sweep(eng, contexts: Contexts, canvases=CANVASES, context: int = 512, steps: int = 8,
                 repeats: int = 5, progress: Progress = _noop) -> list[dict]:
    ctx = contexts.get(context)
    return step_times(eng, [(ctx, c) for c in canvases], steps, repeats, progress=progress)


def context_sweep(eng, contexts: Contexts, lengths=CONTEXTS, canvas: int = 64, steps: int = 8, repeats: int = 5,
                  budget_s: float = 60.0, progress: Progress = _noop) -> dict:
    """Step time per context length. Longer contexts are left out (and the cap reported) once encoding the
    shorter ones has used `budget_s` seconds."""
    rows = step_times(eng, [(contexts.get(n), canvas) for n in lengths], steps, repeats, progress=progress,
                      budget_s=budget_s)
    capped = lengths[len(rows)] if len(rows) < len(lengths) else None
    return {"rows": rows, "capped_at": capped, "budget_s": budget_s}


def acceptance(eng, contexts: Contexts, canvases=(16, 32, 64), context: int = 512, samples: int = 3,
               progress: Progress = _noop) -> list[dict]:
    """Parallel (entropy-bound) vs one-per-step acceptance at the checkpoint's sampler settings and the same step
    budget (= canvas length, enough for one-per-step to fill the canvas); the stopping rule may end either early.
    A third row, "default_steps", is parallel acceptance with the checkpoint's own step budget (what the server
    runs). The modes alternate on each context."""
    modes = ("parallel", "one_per_step", "default_steps")
    budget = {"parallel": None, "one_per_step": None, "default_steps": eng.config.sampler.max_denoising_steps}
    rows = []
    for c in canvases:
        got = {m: {"steps": [], "acc": [], "ms": []} for m in modes}
        for i in range(samples):
            ctx = contexts.get(context, index=100 + i)
            eng.infill(ctx, canvas_length=c, steps=2)  # caches the context (and warms up): time the denoising only
            for mode in modes:
                progress(f"acceptance: canvas {c}, context {i + 1}/{samples}, {mode}")
                res = eng.infill(ctx, canvas_length=c, steps=budget[mode] or c, seed=i,
                                 one_per_step=mode == "one_per_step")
                got[mode]["steps"].append(res.steps)
                got[mode]["acc"].append(res.tokens_accepted_per_step)
                got[mode]["ms"].append(res.timings["decode_ms"])
        for mode in modes:
            g = got[mode]
            rows.append({"canvas": c, "context": context, "mode": mode, "step_budget": budget[mode] or c,
                         "steps_per_canvas": median(g["steps"]), "tokens_accepted_per_step": round(median(g["acc"]), 3),
                         "canvas_ms": round(median(g["ms"]), 2), "tokens_per_s": round(c * 1e3 / median(g["ms"]), 1)})
    return rows


def prefix_cache(eng, contexts: Contexts, context: int = 4096, keystrokes: int = 5,
                 progress: Progress = _noop) -> dict:
    """Encoder ms for a cold context vs a keystroke at its end (the token before <fim_middle> in suffix-first).
    `*_total_ms` is encode + one denoising step, which ends in a host sync (on CUDA the engine's encode_ms is
    read before the GPU has finished, so there the totals are the numbers to trust)."""
    progress(f"prefix cache {context}")
    ctx = contexts.get(context)
    cold, cold_total = [], []
    for i in range(3):  # first is the warm-up
        eng.clear_prefix_cache()
        res = eng.infill(ctx, canvas_length=16, steps=1)
        if i:
            cold.append(res.timings["encode_ms"])
            cold_total.append(res.timings["total_ms"])
    warm, warm_total, reused = [], [], []
    g = torch.Generator().manual_seed(7)
    for _ in range(keystrokes):
        ctx = ctx[:-1] + [int(torch.randint(6, eng.vocab_size, (1,), generator=g))] + ctx[-1:]
        res = eng.infill(ctx, canvas_length=16, steps=1)
        warm.append(res.timings["encode_ms"])
        warm_total.append(res.timings["total_ms"])
        reused.append(res.reused_prefix_tokens)
    eng.clear_prefix_cache()
    return {"context": context, "cold_encode_ms": round(median(cold), 2), "keystroke_encode_ms": round(median(warm), 2),
            "cold_total_ms": round(median(cold_total), 2), "keystroke_total_ms": round(median(warm_total), 2),
            "reused_prefix_tokens": median(reused), "speedup": round(median(cold) / max(median(warm), 1e-6), 1)}


def cancel_latency(eng, contexts: Contexts, context: int = 512, canvas: int = 64, trials: int = 6,
                   progress: Progress = _noop) -> dict:
    """Time from CancelToken.cancel() (from another thread, at a random point inside a step, as an editor's
    keystroke would) until infill returns, and how many steps finished after the cancel."""
    import random
    import threading

    from engine.seam import CancelToken

    progress("cancellation")
    ctx = contexts.get(context)
    eng.infill(ctx, canvas_length=canvas, steps=2)
    step_ms = eng.infill(ctx, canvas_length=canvas, steps=4).timings["decode_ms"] / 4
    rng = random.Random(0)
    ms, after = [], []
    for i in range(trials):
        token, stamps, done = CancelToken(), [], {}

        def fill(token=token, stamps=stamps, done=done, seed=i) -> None:
            eng.infill(ctx, canvas_length=canvas, steps=64, seed=seed, cancel=token,
                       on_step=lambda d: stamps.append(time.perf_counter()))
            done["t"] = time.perf_counter()

        th = threading.Thread(target=fill)
        th.start()
        time.sleep(step_ms * rng.uniform(1.5, 4.0) / 1e3)
        t = time.perf_counter()
        token.cancel()
        th.join()
        ms.append((done["t"] - t) * 1e3)
        after.append(sum(s > t for s in stamps))
    return {"context": context, "canvas": canvas, "ms_per_step": round(step_ms, 2),
            "cancel_ms_p50": round(median(ms), 2), "cancel_ms_max": round(max(ms), 2),
            "steps_after_cancel_max": max(after)}


def vs_transformers(path: Path, context: int = 512, canvas: int = 64, steps: int = 16, repeats: int = 3) -> dict:
    """The same checkpoint under transformers' generate, interleaved with the engine (bench/engine_speed.py)."""
    from bench.engine_speed import run

    return run(path, context, canvas, steps, repeats)


# name -> sizes: canvas sweep, context sweep, steps per canvas, repeats, acceptance canvases, prefix-cache context,
# transformers comparison (context, canvas, steps, repeats)
SIZES = {
    "quick": dict(canvases=(8, 16), contexts=(64, 128), steps=2, repeats=2, acceptance=(8,), samples=1,
                  prefix_context=128, keystrokes=2, cancel_trials=2, transformers=(64, 16, 2, 1)),
    "cpu": dict(canvases=CANVASES, contexts=CONTEXTS, steps=8, repeats=5, acceptance=(16, 32, 64), samples=2,
                prefix_context=4096, keystrokes=5, cancel_trials=6, transformers=(512, 64, 16, 3)),
    "gpu": dict(canvases=CANVASES, contexts=(*CONTEXTS, 16384, 32768), steps=16, repeats=7, acceptance=(16, 64, 256),
                samples=3, prefix_context=32768, keystrokes=5, cancel_trials=6, transformers=(512, 256, 16, 3)),
}


def sweep(eng, label: str, sizes: dict, progress: Progress = _noop, context_budget_s: float = 60.0) -> dict:
    """Every engine-only measurement on a loaded engine."""
    contexts = Contexts(eng)
    base = min(512, sizes["contexts"][-1])
    # Acceptance depends on what the model predicts: keep its context within the length it was trained on.
    trained = getattr(eng.infill_format, "max_context_tokens", None)
    acc_context = min(base, trained) if trained else base
    return {
        "model": model_info(eng, label),
        "canvas_sweep": canvas_sweep(eng, contexts, sizes["canvases"], context=base, steps=sizes["steps"],
                                     repeats=sizes["repeats"], progress=progress),
        "context_sweep": context_sweep(eng, contexts, sizes["contexts"], steps=sizes["steps"],
                                       repeats=sizes["repeats"], budget_s=context_budget_s, progress=progress),
        "acceptance": acceptance(eng, contexts, sizes["acceptance"], context=acc_context, samples=sizes["samples"],
                                 progress=progress),
        "prefix_cache": prefix_cache(eng, contexts, sizes["prefix_context"], keystrokes=sizes["keystrokes"],
                                     progress=progress),
        "cancel": cancel_latency(eng, contexts, base, trials=sizes["cancel_trials"], progress=progress),
    }


def run_all(path: Path, label: str, quick: bool = False, progress: Progress = _noop,
            context_budget_s: float = 60.0) -> dict:
    """Load `path` once for the engine sweeps, then compare with transformers' generate on the same checkpoint."""
    sizes = SIZES["quick" if quick else "cpu"]
    eng = load(path)
    out = sweep(eng, label, sizes, progress, context_budget_s)
    del eng
    progress("transformers generate")
    out["vs_transformers"] = vs_transformers(path, *sizes["transformers"])
    return out


def print_tables(r: dict) -> None:
    m = r["model"]
    print(f"model: {m['label']}, {m['params_m']}M parameters, vocab {m['vocab']}, {m['device']} {m['dtype']}")
    print(f"{'canvas':>7}{'context':>9}{'ms/step':>9}{'tok/s':>8}")
    for row in r["canvas_sweep"]:
        print(f"{row['canvas']:>7}{row['context']:>9}{row['ms_per_step']:>9.2f}{row['tokens_per_s']:>8.0f}")
    for row in r["context_sweep"]["rows"]:
        print(f"{row['canvas']:>7}{row['context']:>9}{row['ms_per_step']:>9.2f}{row['tokens_per_s']:>8.0f}")
    if r["context_sweep"]["capped_at"]:
        cs = r["context_sweep"]
        print(f"context sweep capped before {cs['capped_at']} (budget {cs['budget_s']} s)")
    print(f"{'canvas':>7} {'mode':<14}{'steps':>6}{'tok/step':>9}{'tok/s':>8}")
    for row in r["acceptance"]:
        print(f"{row['canvas']:>7} {row['mode']:<14}{row['steps_per_canvas']:>6.0f}"
              f"{row['tokens_accepted_per_step']:>9.2f}{row['tokens_per_s']:>8.0f}")
    pc = r["prefix_cache"]
    print(f"encoder, {pc['context']}-token context: cold {pc['cold_encode_ms']:.1f} ms, keystroke with prefix cache "
          f"{pc['keystroke_encode_ms']:.1f} ms ({pc['reused_prefix_tokens']:.0f} tokens reused)")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, default=None)
    ap.add_argument("--quick", action="store_true", help="tiny sizes (seconds), for smoke tests")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (see bench/run.py)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        path, label = pick_model(Path(tmp), args.model)
        result = run_all(path, label, args.quick, progress=lambda s: print(f"... {s}", file=sys.stderr))
    print_tables(result)
    result["machine"] = machine()
    emit(result)


if __name__ == "__main__":
    main()
