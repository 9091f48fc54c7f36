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
    "ref: 8k vocab, ctx 256, 1 draw": ("base", 8192, 256, 1, 0.0, 16),
    "4k vocab, ctx 256, 1 draw": ("base", 4096, 256, 1, 0.0, 16),
    "4k vocab, ctx 128, 1 draw": ("base", 4096, 128, 1, 0.0, 16),
    "4k vocab, ctx 128, 4 draws": ("base", 4096, 128, 4, 0.0, 16),
    "4k, ctx 128, 4 draws, AR 0.5": ("base", 4096, 128, 4, 0.5, 16),
    "small model, 4k, ctx 128, 4 draws": ("small", 4096, 128, 4, 0.0, 16),
    "wide model, 4k, ctx 128, 4 draws": ("wide", 4096, 128, 4, 0.0, 16),
}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", type=Path, default=Path("runs/recipes"))
    ap.add_argument("--tokenizers", type=Path, default=Path("runs"), help="holds tok4k/ and tok8k/")
    ap.add_argument("--minutes", type=float, default=3.0)
    ap.add_argument("--only", nargs="*", help="subset of recipe names")
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
        )
        results[name] = train(cfg, args.minutes, resume=False, quiet=True)
        args.out.mkdir(parents=True, exist_ok=True)
        results_path.write_text(json.dumps(results, indent=1))
    print(table(results, args.minutes))


def table(results: dict, minutes: float) -> str:
    rows = [
        f"Each run: {minutes:g} minutes on this machine's 2 CPU cores (`python -m engine.train.recipes`), "
        "lr 2e-3 with 100 warm-up steps. tokens/s counts context + all noisy canvases; eval loss is on held-out "
        "files (fixed noise, no self-conditioning); bits/char is per middle character (comparable across "
        "vocabularies).",
        "",
        "| recipe | steps | tokens/s | canvas tok/s | train loss (ema) | held-out loss | held-out bits/char |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, r in results.items():
        rows.append(
            f"| {name} | {r['step']} | {r['tokens_per_s']:.0f} | {r['canvas_tokens_per_s']:.0f} | "
            f"{r['ema_loss']:.3f} | {r['eval_loss']:.3f} | {r['eval_bpc']:.3f} |"
        )
    return "\n".join(rows)


if __name__ == "__main__":
    main()
