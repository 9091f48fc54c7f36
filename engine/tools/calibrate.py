"""`dg-lsp calibrate --model DIR`: the confidence gate's threshold for one checkpoint, measured on held-out holes.

Each hole (held-out standard-library Python files, the hole kinds of engine.train.holes; a hole set disjoint from
`bench.quality`'s by seed) is filled the way the server would: the checkpoint's prompt format lays the prefix and
suffix out, the canvas is the server's rule of thumb for the hole kind (plus the format's headroom), and the
format's `answer` maps the canvas back to code. Each fill's `confidence` (engine.seam.fill_confidence) is kept beside
whether it was right. The table gives, for each threshold, the share of fills shown and exact match / edit
similarity among them; the recommendation is the lowest threshold (the most fills shown) at which exact match among
the shown is at least 3x the ungated one and edit similarity beats copying the line above by 0.05.

    dg-lsp calibrate --model DIR [--holes 1000] [--seed 1] [--write]   (--write: into DIR/infill.json)
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from engine.tools.command import Parser, Refused, checked_model, log_path, run, write_atomic

PROG = "dg-lsp calibrate"

THRESHOLDS = tuple(round(0.05 * i, 2) for i in range(20))
EM_RATIO, ES_MARGIN = 3.0, 0.05  # what the recommended threshold must reach (see the module docstring)
FALLBACK_SHOWN = 0.05  # if no threshold reaches both, the best ES among those still showing this share


def gate_table(rows: Sequence[dict[str, Any]], thresholds: Sequence[float] = THRESHOLDS) -> list[dict[str, Any]]:
    """rows: {"confidence", "exact", "es"} per fill -> per threshold {threshold, shown, exact_match,
    edit_similarity} (the last two among the fills shown; None when none is)."""
    out = []
    for t in thresholds:
        shown = [r for r in rows if r["confidence"] is not None and r["confidence"] >= t]
        out.append({"threshold": t, "shown": round(len(shown) / max(len(rows), 1), 4),
                    "exact_match": round(sum(r["exact"] for r in shown) / len(shown), 4) if shown else None,
                    "edit_similarity": round(sum(r["es"] for r in shown) / len(shown), 4) if shown else None})
    return out


def recommend(table: list[dict[str, Any]], ungated_em: float, copy_line_es: float) -> dict[str, Any]:
    """The row of `table` to ship as the default (see the module docstring), with "why"."""
    for row in table:  # thresholds ascending: the first that qualifies shows the most
        if row["shown"] and row["exact_match"] >= EM_RATIO * ungated_em and \
                row["edit_similarity"] >= copy_line_es + ES_MARGIN:
            return {**row, "why": f"lowest threshold with EM >= {EM_RATIO:g}x ungated and ES >= copy-line + "
                                  f"{ES_MARGIN:g}"}
    usable = [r for r in table if r["shown"] >= FALLBACK_SHOWN and r["edit_similarity"] is not None]
    best = max(usable, key=lambda r: r["edit_similarity"]) if usable else table[0]
    return {**best, "why": "no threshold reached both targets: the best edit similarity among those showing "
                           f">= {FALLBACK_SHOWN:.0%}"}


def fill_holes(engine: Any, n: int, seed: int) -> list[dict[str, Any]]:
    """Fill `n` held-out holes through `engine` (an engine.engine.Engine) as the server would; one row per hole:
    kind, fill, middle, confidence, exact, es, and the copy-line baseline's exact/es."""
    from engine.seam import HoleInfo
    from engine.train.corpus import scan, split
    from engine.train.data import DataConfig
    from engine.train.evaluate import copy_line_fill, edit_similarity, exact, server_canvas
    from engine.train.holes import FileHoles, pick_kind, python_parser

    fmt = engine.prompt_format
    files = split(scan())[1]
    rng, parser, kinds = random.Random(seed), python_parser(), DataConfig().kind_weights
    budget = fmt.context_budget(1024)
    headroom = fmt.canvas_headroom
    rows: list[dict[str, Any]] = []
    cache: dict[int, FileHoles] = {}
    while len(rows) < n:
        index = rng.choices(range(len(files)), weights=[f.size for f in files])[0]
        fh = cache.setdefault(index, FileHoles(files[index].read(), parser))
        kind = pick_kind(rng, kinds)
        hole = fh.sample(kind, rng)
        if hole is None:
            continue
        prefix, middle, suffix = hole.split(fh.text)
        if not middle.strip() or len(middle) > 400:
            continue
        prefix_ids, suffix_ids = engine.encode(prefix), engine.encode(suffix)
        suffix_ids = suffix_ids[: budget // 4]
        prefix_ids = prefix_ids[max(0, len(prefix_ids) - (budget - len(suffix_ids))):]
        info = HoleInfo(kind=kind, language="python", filename=Path(files[index].rel).name,
                        lines=middle.count("\n") + 1)
        want = server_canvas(kind, middle) + headroom
        canvas = next((c for c in sorted(fmt.canvas_lengths) if c >= want), max(fmt.canvas_lengths))
        res = engine.infill(fmt.context(prefix_ids, suffix_ids, info), canvas_length=canvas, seed=seed + len(rows))
        fill = fmt.answer(res.text, prefix, suffix)
        copy = copy_line_fill(prefix)
        rows.append({"kind": kind, "fill": fill, "middle": middle, "confidence": res.confidence,
                     "exact": exact(fill, middle), "es": edit_similarity(fill, middle),
                     "copy_exact": exact(copy, middle), "copy_es": edit_similarity(copy, middle)})
    return rows


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    n = max(len(rows), 1)
    em = sum(r["exact"] for r in rows) / n
    copy_es = sum(r["copy_es"] for r in rows) / n
    table = gate_table(rows)
    return {"holes": len(rows), "exact_match": round(em, 4),
            "edit_similarity": round(sum(r["es"] for r in rows) / n, 4),
            "copy_line_exact_match": round(sum(r["copy_exact"] for r in rows) / n, 4),
            "copy_line_edit_similarity": round(copy_es, 4), "table": table,
            "recommended": recommend(table, em, copy_es)}


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: at least 1")
    return value


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = Parser(prog=PROG, description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--model", type=Path, default=None, help="checkpoint directory (default: the shipped model)")
    ap.add_argument("--holes", type=positive_int, default=1000)
    ap.add_argument("--seed", type=int, default=1, help="hole draw (bench.quality uses seed 0: keep them apart)")
    ap.add_argument("--weights", default="auto", choices=["auto", "bf16", "int8", "int4", "fp8"])
    ap.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    ap.add_argument("--write", action="store_true", help="store the recommended threshold in the checkpoint's "
                    "infill.json as min_confidence")
    ap.add_argument("--log-file", metavar="PATH", type=Path, default=None,
                    help="where a failure's traceback goes (default ~/.cache/dg-lsp/logs/calibrate.log)")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    log_file = args.log_file or log_path("calibrate")
    return run(PROG, lambda: calibrate(args), log_file)


def calibrate(args: argparse.Namespace) -> int:
    from engine.engine import Engine

    model = checked_model(None if args.model is None else str(args.model), args.device)
    if args.write and not model.is_dir():
        raise Refused(f"--write: {model} is not a checkpoint folder (infill.json goes into one)")
    engine = Engine.from_pretrained(model, device=args.device, weights=args.weights)
    s = summary(fill_holes(engine, args.holes, args.seed))
    print(f"{model}: {s['holes']} held-out holes (seed {args.seed}); ungated EM {s['exact_match']:.3f}, "
          f"ES {s['edit_similarity']:.3f}; copy-line EM {s['copy_line_exact_match']:.3f}, "
          f"ES {s['copy_line_edit_similarity']:.3f}", file=sys.stderr)
    print(f"{'minConfidence':>13} {'shown':>6} {'EM shown':>8} {'ES shown':>8}", file=sys.stderr)
    for row in s["table"]:
        em, es = row["exact_match"], row["edit_similarity"]
        print(f"{row['threshold']:>13.2f} {row['shown']:>6.3f} {'-' if em is None else f'{em:.3f}':>8} "
              f"{'-' if es is None else f'{es:.3f}':>8}", file=sys.stderr)
    rec = s["recommended"]
    print(f"recommended minConfidence {rec['threshold']:.2f} ({rec['why']}): shows {rec['shown']:.1%}",
          file=sys.stderr)
    if args.write:
        path = Path(model) / "infill.json"
        infill = json.loads(path.read_text()) if path.is_file() else {}
        infill["min_confidence"] = rec["threshold"]
        infill["min_confidence_calibration"] = {k: s[k] for k in ("holes", "exact_match", "edit_similarity",
                                                                     "copy_line_edit_similarity")} | {
            "seed": args.seed, "shown": rec["shown"], "shown_exact_match": rec["exact_match"],
            "shown_edit_similarity": rec["edit_similarity"]}
        write_atomic(path, json.dumps(infill, indent=2) + "\n")
        print(f"wrote min_confidence {rec['threshold']} to {path}", file=sys.stderr)
    print(json.dumps({k: v for k, v in s.items() if k != "table"} | {"table": s["table"]}))
    return 0
