"""Infill metrics and the hole evaluation shared by bench/quality.py and sampler tuning: fills, baselines, scores."""

from __future__ import annotations

import random
import time
from collections import defaultdict
from pathlib import Path

from engine.tokens import InfillFormat
from engine.train.corpus import scan, split
from engine.train.data import DataConfig, HoleDataset
from engine.train.holes import KINDS, error_count, python_parser

SERVER_CANVAS = {"rest_of_line": 16, "statement": 32, "block_body": 64, "bracket": 16}


def edit_similarity(a: str, b: str) -> float:
    """1 - Levenshtein(a, b) / max(len): 1.0 for identical strings."""
    if a == b:
        return 1.0
    if not a or not b:
        return 0.0
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return 1 - prev[-1] / max(len(a), len(b))


def exact(fill: str, middle: str) -> bool:
    return fill.rstrip() == middle.rstrip()


def true_canvas(n_middle: int, lengths: tuple[int, ...]) -> int:
    """Smallest trained canvas that holds the true middle and its <eos>."""
    return next((c for c in sorted(lengths) if c >= n_middle + 1), max(lengths))


def server_canvas(kind: str, middle: str) -> int:
    """The rule of thumb a server without the answer would use."""
    if kind in SERVER_CANVAS:
        return SERVER_CANVAS[kind]
    lines = middle.count("\n") + 1
    return 16 if lines == 1 else 32 if lines <= 3 else 64


def copy_line_fill(prefix: str) -> str:
    """Baseline: the line above the cursor's line; without its indentation when the cursor sits at the start of the
    line's text, else from the cursor's column to its end."""
    lines = prefix.split("\n")
    if len(lines) < 2:
        return ""
    if not lines[-1].strip():
        return lines[-2].strip()
    return lines[-2][len(lines[-1]) :]


class Filler:
    """Fill a canvas from context ids: our engine when it exists, else transformers' `generate`."""

    def __init__(self, model_dir: Path, steps: int | None, entropy_bound: float | None, weights: str = "bf16") -> None:
        self.steps, self.entropy_bound = steps, entropy_bound
        self.backend = "engine" if (Path(__file__).resolve().parents[1] / "engine.py").exists() else "transformers"
        if self.backend == "engine":
            from engine.engine import Engine

            # weights: bf16 = unquantized (fp32 here), or int8 / int4 / fp8 (engine.quant)
            self.engine = Engine.from_pretrained(model_dir, device="cpu", dtype="float32", weights=weights)
            self.tok = self.engine.tokenizer
        else:
            import torch
            from tokenizers import Tokenizer
            from transformers import DiffusionGemmaForBlockDiffusion

            self.torch = torch
            self.model = DiffusionGemmaForBlockDiffusion.from_pretrained(model_dir).eval()
            self.tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))

    def fill(self, context: list[int], canvas_length: int, seed: int) -> str:
        return self.fill_scored(context, canvas_length, seed)[0]

    def fill_scored(self, context: list[int], canvas_length: int, seed: int) -> tuple[str, float | None]:
        """The fill and its confidence (engine.seam.fill_confidence; None through transformers)."""
        if self.backend == "engine":
            res = self.engine.infill(
                context, canvas_length=canvas_length, steps=self.steps, entropy_bound=self.entropy_bound, seed=seed
            )
            return res.text, res.confidence
        return self._fill_reference(context, canvas_length, seed), None

    def _fill_reference(self, context: list[int], canvas_length: int, seed: int) -> str:
        torch = self.torch
        torch.manual_seed(seed)
        self.model.config.canvas_length = canvas_length
        kw = {"max_denoising_steps": self.steps} if self.steps else {}
        with torch.no_grad():
            out = self.model.generate(input_ids=torch.tensor([context]), max_new_tokens=canvas_length, **kw)
        ids = out.sequences[0, len(context) :].tolist() if hasattr(out, "sequences") else out[0, len(context) :]
        ids = ids[: ids.index(1)] if 1 in ids else ids
        return self.tok.decode([i for i in ids if i != 0], skip_special_tokens=False)


def held_out_holes(tok, fmt: InfillFormat, data_cfg: DataConfig, n: int, seed: int):
    files = split(scan())[1]
    ds = HoleDataset(files, tok, fmt, data_cfg, seed=seed)
    rng = random.Random(seed)
    holes = []
    for _ in range(n):
        ex, index, hole = ds.sample(rng, max(fmt.canvas_lengths) - 1)
        holes.append((ex, ds.holes_of(index).text, hole, files[index].rel))
    return holes


def run_holes(
    filler: Filler, holes, fmt: InfillFormat, seed: int, lengths: tuple[str, ...] = ("true", "server")
) -> tuple[dict, list[dict]]:
    """Fill every hole at the true and/or server canvas length; score the fills and the two baselines."""
    parser = python_parser()
    rows = []
    t_fill: dict[int, list[float]] = defaultdict(list)
    base_errors: dict[str, int] = {}
    for i, (ex, text, hole, rel) in enumerate(holes):
        prefix, middle, suffix = hole.split(text)
        if rel not in base_errors:
            base_errors[rel] = error_count(parser, text)
        row = {"kind": hole.kind, "file": rel, "start": hole.start, "middle": middle}
        canvas = {"true": true_canvas(len(ex.middle), fmt.canvas_lengths), "server": server_canvas(hole.kind, middle)}
        fills = {"empty": "", "copy_line": copy_line_fill(prefix)}
        confidence: dict[str, float | None] = {}
        for name in lengths:
            c = canvas[name]
            t0 = time.perf_counter()
            fills[name], confidence[name] = filler.fill_scored(ex.context, c, seed + i)
            t_fill[c].append(time.perf_counter() - t0)
        for name, fill in fills.items():
            row[name] = {
                "fill": fill,
                "exact": exact(fill, middle),
                "es": edit_similarity(fill, middle),
                "parse_ok": error_count(parser, prefix + fill + suffix) <= base_errors[rel],
                "confidence": confidence.get(name),
            }
        rows.append(row)
    latency = {c: sum(v) / len(v) for c, v in sorted(t_fill.items())}
    return latency, rows


def summarize(rows: list[dict]) -> dict:
    out = {}
    for kind in [*KINDS, "overall"]:
        sel = [r for r in rows if kind == "overall" or r["kind"] == kind]
        if not sel:
            continue
        out[kind] = {"n": len(sel)}
        for name in [n for n in ("true", "server", "empty", "copy_line") if n in sel[0]]:
            out[kind][name] = {m: sum(float(r[name][m]) for r in sel) / len(sel) for m in ("exact", "es", "parse_ok")}
    return out
