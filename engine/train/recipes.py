"""Short timed runs of the training choices in REFERENCE §6, written to a comparison table (engine/train/RECIPES.md)."""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

from engine.train.data import DataConfig
from engine.train.model_config import SHAPES
from engine.train.objective import ObjectiveConfig
from engine.train.train import TrainConfig, train

# name -> (shape, vocab, context tokens, noise draws, ar weight, batch size (contexts))
RECIPES = {
    "A: small, 4k vocab, ctx 128, 4 draws (main run)": ("small", 4096, 128, 4, 0.0, 16),
    "B: A with 1 noise draw": ("small", 4096, 128, 1, 0.0, 16),
    "C: A with ctx 256": ("small", 4096, 256, 4, 0.0, 16),
    "D: A with 8k vocab": ("small", 8192, 128, 4, 0.0, 16),
    "E: A with base model (7.5M)": ("base", 4096, 128, 4, 0.0, 16),
    "F: A with encoder AR loss 0.5": ("small", 4096, 128, 4, 0.5, 16),
}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", type=Path, default=Path("runs/recipes"))
    ap.add_argument("--tokenizers", type=Path, default=Path("runs"), help="holds tok4k/ and tok8k/")
    ap.add_argument("--cpu-minutes", type=float, default=2.5, help="CPU time per recipe (fair on a shared machine)")
    ap.add_argument("--only", nargs="*", help="subset of recipe names")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    results = {}
    results_path = args.out / "results.json"
    if results_path.exists():
        results = json.loads(results_path.read_text())
    for name, (shape, vocab, ctx, draws, ar, bs) in RECIPES.items():
        if (args.only and name not in args.only) or name in results:
            continue
        slug = "".join(c if c.isalnum() else "_" for c in name)
        cfg = TrainConfig(
            run_dir=str(args.out / slug),
            tokenizer_dir=str(args.tokenizers / f"tok{vocab // 1024}k"),
            shape=dataclasses.replace(SHAPES[shape], vocab_size=vocab),
            data=DataConfig(context_tokens=ctx, suffix_tokens=ctx // 4, batch_size=bs),
            objective=ObjectiveConfig(noise_draws=draws, ar_weight=ar),
            threads=args.threads, warmup_steps=10,
        )
        results[name] = train(cfg, 10 * args.cpu_minutes, resume=False, quiet=True, cpu_minutes=args.cpu_minutes)
        args.out.mkdir(parents=True, exist_ok=True)
        results_path.write_text(json.dumps(results, indent=1))
    print(table(results, args.cpu_minutes, args.threads))


def table(results: dict, cpu_minutes: float, threads: int) -> str:
    rows = [f"Each recipe: {cpu_minutes:g} CPU-minutes of its own process ({threads} thread(s); `python -m "
            "engine.train.recipes`), lr 2e-3 after 10 warm-up steps, 16 contexts per step. The machine was shared "
            "with other jobs, so speed is per CPU-second, not per wall second. tokens = context + all noisy "
            "canvases. Held-out loss: canvas cross-entropy on held-out files (fixed noise, no self-conditioning); "
            "bits/char: per middle character (comparable across vocabularies).", "",
            "| recipe | steps | tokens / CPU-s | canvas tokens / CPU-s | train loss (ema) | held-out loss | "
            "held-out bits/char |", "|---|---|---|---|---|---|---|"]
    for name, r in results.items():
        tps, cps = r["tokens"] / r["cpu_s"], r["canvas_tokens"] / r["cpu_s"]
        rows.append(f"| {name} | {r['step']} | {tps:.0f} | {cps:.0f} | {r['ema_loss']:.3f} | {r['eval_loss']:.3f} | "
                    f"{r['eval_bpc']:.3f} |")
    return "\n".join(rows)


if __name__ == "__main__":
    main()
