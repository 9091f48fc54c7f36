"""Pick the default model's sampler settings on held-out holes drawn with a seed the bench does not use."""

from __future__ import annotations

import argparse
import itertools
import json
import shutil
import tempfile
from pathlib import Path

from engine.tokens import InfillFormat
from engine.train.data import DataConfig
from engine.train.evaluate import Filler, held_out_holes, run_holes, summarize
from engine.train.export import DEFAULT_GENERATION, generation_config


def evaluate_settings(model_dir: Path, gen: dict, n: int, seed: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp) / "m"
        shutil.copytree(model_dir, d)
        generation_config(gen, {"bos_token_id": 2, "eos_token_id": 1, "pad_token_id": 0}).save_pretrained(d)
        filler = Filler(d, None, None)
        infill = json.loads((d / "infill.json").read_text())
        fmt = InfillFormat(canvas_lengths=tuple(infill["canvas_lengths"]))
        data_cfg = DataConfig(
            context_tokens=infill["max_context_tokens"],
            suffix_tokens=infill["max_suffix_tokens"],
            canvas_lengths=fmt.canvas_lengths,
            canvas_weights=tuple(1.0 for _ in fmt.canvas_lengths),
        )
        holes = held_out_holes(filler.tok, fmt, data_cfg, n, seed)
        latency, rows = run_holes(filler, holes, fmt, seed, lengths=("true",))
    o = summarize(rows)["overall"]["true"]
    return {**o, "latency_ms": {c: round(t * 1000) for c, t in latency.items()}}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", type=Path, required=True)
    ap.add_argument("--holes", type=int, default=60)
    ap.add_argument("--seed", type=int, default=1, help="not the bench's seed (0)")
    ap.add_argument("--steps", type=int, nargs="+", default=[8, 16])
    ap.add_argument("--entropy-bound", type=float, nargs="+", default=[0.1, 1.0])
    ap.add_argument("--t-max", type=float, nargs="+", default=[0.3, 0.8])
    args = ap.parse_args(argv)
    best = None
    for steps, eb, t_max in itertools.product(args.steps, args.entropy_bound, args.t_max):
        gen = dict(
            DEFAULT_GENERATION,
            max_denoising_steps=steps,
            entropy_bound=eb,
            t_max=t_max,
            t_min=min(DEFAULT_GENERATION["t_min"], t_max / 2),
        )
        r = evaluate_settings(args.model, gen, args.holes, args.seed)
        score = r["es"] + r["exact"]
        print(json.dumps({"gen": gen, **r}), flush=True)
        if best is None or score > best[0]:
            best = (score, gen)
    print("best:", json.dumps(best[1]))


if __name__ == "__main__":
    main()
