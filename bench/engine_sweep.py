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

from bench.common import emit, machine, median

os.environ.setdefault("HF_HUB_OFFLINE", "1")

CANVASES = (16, 32, 64, 128, 256)
CONTEXTS = (256, 512, 1024, 2048, 4096, 8192)
STDLIB_FILES = ("argparse.py", "typing.py", "inspect.py", "subprocess.py", "tarfile.py", "dataclasses.py")

Progress = Callable[[str], None]


def _noop(_: str) -> None:
    pass


def pick_model(root: Path, model: Path | None = None) -> tuple[Path, str]:
    """(checkpoint dir, label). Order: an explicit path, the shipped default model, the random bench checkpoint."""
    from engine.engine import default_model_path

    if model is not None:
        return model, f"checkpoint {model.name}"
    default = default_model_path()
    if (default / "model.safetensors").is_file():
        return default, "default model (trained)"
    from bench.engine_speed import build_bench_checkpoint

    return build_bench_checkpoint(root, 64), "random bench checkpoint (BENCH_SHAPE, random weights)"


def load(path: Path):
    from engine.engine import Engine

    return Engine.from_pretrained(path, device="auto", dtype="auto")


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


def step_time(eng, ctx: list[int], canvas: int, steps: int, repeats: int) -> dict:
    """Decoder time per step with the context already cached (a warm run encodes it and is excluded). On CUDA the
    row also carries the configuration's peak allocated memory."""
    cuda = eng.device.type == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats(eng.device)
    eng.infill(ctx, canvas_length=canvas, steps=steps, seed=0)
    per_step, decode, n_steps = [], [], []
    for i in range(repeats):
        res = eng.infill(ctx, canvas_length=canvas, steps=steps, seed=1 + i)
        per_step.append(res.timings["decode_ms"] / max(res.steps, 1))
        decode.append(res.timings["decode_ms"])
        n_steps.append(res.steps)
    row = {"ms_per_step": round(median(per_step), 3), "steps": median(n_steps), "canvas_ms": round(median(decode), 2),
           "tokens_per_s": round(canvas * 1e3 / median(decode), 1)}
    if cuda:
        row["cuda_max_allocated_mb"] = round(torch.cuda.max_memory_allocated(eng.device) / 2**20, 1)
    return row


def canvas_sweep(eng, contexts: Contexts, canvases=CANVASES, context: int = 512, steps: int = 16,
                 repeats: int = 3, progress: Progress = _noop) -> list[dict]:
    rows = []
    for c in canvases:
        progress(f"canvas {c}")
        rows.append({"canvas": c, "context": context, **step_time(eng, contexts.get(context), c, steps, repeats)})
    return rows


def context_sweep(eng, contexts: Contexts, lengths=CONTEXTS, canvas: int = 64, steps: int = 16, repeats: int = 3,
                  budget_s: float = 60.0, progress: Progress = _noop) -> dict:
    """Step time per context length. Stops (and says so) once the sweep has used `budget_s` seconds."""
    rows, capped, t0 = [], None, time.perf_counter()
    for n in lengths:
        if time.perf_counter() - t0 > budget_s:
            capped = n
            break
        progress(f"context {n}")
        eng.clear_prefix_cache()
        rows.append({"context": n, "canvas": canvas, **step_time(eng, contexts.get(n), canvas, steps, repeats)})
    return {"rows": rows, "capped_at": capped, "budget_s": budget_s}


def acceptance(eng, contexts: Contexts, canvases=(16, 32, 64), context: int = 512, samples: int = 3,
               progress: Progress = _noop) -> list[dict]:
    """Parallel (entropy-bound) vs one-per-step acceptance at the checkpoint's sampler settings and the same step
    budget (= canvas length, enough for one-per-step to fill the canvas); the stopping rule may end either early."""
    rows = []
    for c in canvases:
        for mode in ("parallel", "one_per_step"):
            progress(f"acceptance {mode} canvas {c}")
            ctxs = [contexts.get(context, index=100 + i) for i in range(samples)]
            eng.infill(ctxs[0], canvas_length=c, steps=c, seed=0, one_per_step=mode == "one_per_step")  # warm-up
            steps, acc, ms = [], [], []
            for i, ctx in enumerate(ctxs):
                eng.infill(ctx, canvas_length=c, steps=1)  # cache the context: time the denoising only
                res = eng.infill(ctx, canvas_length=c, steps=c, seed=i, one_per_step=mode == "one_per_step")
                steps.append(res.steps)
                acc.append(res.tokens_accepted_per_step)
                ms.append(res.timings["decode_ms"])
            rows.append({"canvas": c, "mode": mode, "steps_per_canvas": median(steps),
                         "tokens_accepted_per_step": round(median(acc), 3), "canvas_ms": round(median(ms), 2),
                         "tokens_per_s": round(c * 1e3 / median(ms), 1)})
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


def vs_transformers(path: Path, context: int = 512, canvas: int = 64, steps: int = 16, repeats: int = 3) -> dict:
    """The same checkpoint under transformers' generate, interleaved with the engine (bench/engine_speed.py)."""
    from bench.engine_speed import run

    return run(path, context, canvas, steps, repeats)


# name -> sizes: canvas sweep, context sweep, steps per canvas, repeats, acceptance canvases, prefix-cache context,
# transformers comparison (context, canvas, steps, repeats)
SIZES = {
    "quick": dict(canvases=(16, 32), contexts=(64, 128), steps=2, repeats=1, acceptance=(16,), samples=1,
                  prefix_context=128, keystrokes=2, transformers=(64, 16, 2, 1)),
    "cpu": dict(canvases=CANVASES, contexts=CONTEXTS, steps=16, repeats=3, acceptance=(16, 32, 64), samples=3,
                prefix_context=4096, keystrokes=5, transformers=(512, 64, 16, 3)),
    "gpu": dict(canvases=CANVASES, contexts=(*CONTEXTS, 16384, 32768), steps=16, repeats=5, acceptance=(16, 64, 256),
                samples=3, prefix_context=32768, keystrokes=5, transformers=(512, 256, 16, 3)),
}


def sweep(eng, label: str, sizes: dict, progress: Progress = _noop, context_budget_s: float = 60.0) -> dict:
    """Every engine-only measurement on a loaded engine."""
    contexts = Contexts(eng)
    base = min(512, sizes["contexts"][-1])
    return {
        "model": model_info(eng, label),
        "canvas_sweep": canvas_sweep(eng, contexts, sizes["canvases"], context=base, steps=sizes["steps"],
                                     repeats=sizes["repeats"], progress=progress),
        "context_sweep": context_sweep(eng, contexts, sizes["contexts"], steps=sizes["steps"],
                                       repeats=sizes["repeats"], budget_s=context_budget_s, progress=progress),
        "acceptance": acceptance(eng, contexts, sizes["acceptance"], context=base, samples=sizes["samples"],
                                 progress=progress),
        "prefix_cache": prefix_cache(eng, contexts, sizes["prefix_context"], keystrokes=sizes["keystrokes"],
                                     progress=progress),
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
