"""The CPU benchmark suite (`make bench`): engine sweeps, editor latency, memory, the machine; writes
bench/results/<date>-<host>.json, PNG plots and bench/results/latest.md.

    python -m bench.run [--out DIR] [--model DIR] [--quick] [--editor auto|quick|full|skip] [--skip-memory]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bench import engine_sweep, memory, plots  # noqa: E402
from bench.common import emit, machine, pick_model  # noqa: E402
from bench.report import markdown  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
EDITOR_FULL_BEFORE_S = 200  # --editor auto: the full replay took ~5 min with the random checkpoint here
EDITOR_KEYS = ("server_overhead_ms_p95", "e2e_ms_p50", "e2e_ms_p95", "steps_after_cancel_max")


def editor_latency(model: Path | None, quick: bool) -> dict:
    """bench/lsp_latency.py's measurement (it starts the real server over stdio), plus the per-keystroke
    samples of each of its replay phases for the latency histogram. Never raises: a broken editor run is reported
    in the table and must not lose the engine numbers."""
    if not (ROOT / "bench" / "lsp_latency.py").is_file():
        return {"skipped": "bench/lsp_latency.py is not in this checkout yet"}
    try:
        return _editor_latency(model, quick)
    except Exception as e:
        return {"skipped": f"bench.lsp_latency failed: {type(e).__name__}: {e}"}


def _editor_latency(model: Path | None, quick: bool) -> dict:
    import asyncio

    from bench import lsp_latency as lat

    phases: list[list[dict]] = []
    replay = lat.replay

    async def recording(*a, **k):  # each replay phase's rows: warm-up, overhead (debounce 0, 4 steps), defaults
        rows = await replay(*a, **k)
        phases.append(rows)
        return rows

    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        if model is None or not (model / "tokenizer.json").is_file():
            model = None  # the server needs a tokenizer: let lsp_latency pick or build its own checkpoint
        path, label = pick_model(Path(tmp), model, tokenizer=True)
        lat.replay = recording
        try:
            out = asyncio.run(lat.run(path, label, lat.pick_file(None), quick, False))
        finally:
            lat.replay = replay
    print(lat.table(out))
    out.setdefault("samples_ms", out.get("e2e_samples_ms") or [round(r["ms"], 2) for r in phases[-1]])
    if len(phases) >= 3:
        out["samples_debounce0_ms"] = [round(r["ms"], 2) for r in phases[-2]]
    out["wall_s"] = round(time.perf_counter() - t0, 1)
    return out


def result_path(out: Path, now: datetime.datetime) -> Path:
    return out / f"{now:%Y-%m-%d}-{platform.node() or 'host'}.json"


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=None,
                    help="default bench/results (--quick: a temporary folder, never over the published results)")
    ap.add_argument("--model", type=Path, default=None, help="checkpoint dir (default: shipped model, else random)")
    ap.add_argument("--quick", action="store_true", help="tiny sizes (seconds), for smoke tests")
    ap.add_argument("--editor", choices=("auto", "quick", "full", "skip"), default="auto",
                    help="editor replay size: full (~200 keystrokes; 0.5-5 min on 2 shared cores, by model) or quick "
                         f"(~40); auto: full if the sections before it took under {EDITOR_FULL_BEFORE_S} s, so the "
                         "suite stays under 10 minutes")
    ap.add_argument("--skip-memory", action="store_true")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads (1: on a shared 2-core machine, 2 threads stall on each other's barriers)")
    ap.add_argument("--context-budget-s", type=float, default=90.0,
                    help="time after which the context sweep stops adding longer contexts")
    args = ap.parse_args(argv)

    import torch
    from rich.console import Console
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    torch.set_num_threads(args.threads)
    now, t0 = datetime.datetime.now(), time.perf_counter()
    console = Console(stderr=True)
    result: dict = {"date": now.isoformat(timespec="seconds"), "host": platform.node(), "machine": machine(),
                    "command": "python -m bench.run " + " ".join(argv if argv is not None else sys.argv[1:])}
    sections = ["engine", *([] if args.skip_memory else ["memory"]), *([] if args.editor == "skip" else ["editor"])]
    with tempfile.TemporaryDirectory() as tmp, Progress(SpinnerColumn(), TextColumn("{task.description}"),
                                                        TimeElapsedColumn(), console=console) as bar:
        overall = bar.add_task("bench", total=len(sections))
        step = bar.add_task("", total=None)

        def say(s: str) -> None:
            bar.update(step, description=f"  {s}")
            if not console.is_terminal:  # a log file gets one line per step instead of a live display
                console.log(s)

        path, label = pick_model(Path(tmp), args.model)
        for section in sections:
            bar.update(overall, description=f"[bold]{section}")
            s0 = time.perf_counter()
            if section == "engine":
                result["engine"] = engine_sweep.run_all(path, label, args.quick, progress=say,
                                                        context_budget_s=args.context_budget_s)
            elif section == "memory":
                configs = memory.QUICK_CONFIGS if args.quick else memory.CONFIGS
                result["memory"] = {"model": label, "rows": memory.measure(path, configs, progress=say,
                                                                            threads=args.threads)}
            else:
                say("bench.lsp_latency (replayed typing through the real server)")
                quick = args.quick or args.editor == "quick" or (
                    args.editor == "auto" and time.perf_counter() - t0 > EDITOR_FULL_BEFORE_S)
                result["editor"] = editor_latency(path, quick)  # the server picks its own threads
            result.setdefault("section_s", {})[section] = round(time.perf_counter() - s0, 1)
            bar.advance(overall)
    result["runtime_s"] = round(time.perf_counter() - t0, 1)

    if args.out is None and args.quick:
        with tempfile.TemporaryDirectory(prefix="dg-bench-quick-") as tmp:
            return write(result, label, Path(tmp))
    return write(result, label, args.out or ROOT / "bench" / "results")


def write(result: dict, label: str, out: Path) -> dict:
    """The JSON, plots and latest.md into `out`; prints the table and the last-line JSON; returns `result`."""
    out.mkdir(parents=True, exist_ok=True)
    json_path = result_path(out, datetime.datetime.fromisoformat(result["date"]))
    result["plots"] = [p.name for p in plots.plot_all(result, out)]
    json_path.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    md = markdown(result, json_path.name)
    (out / "latest.md").write_text(md)
    print(md)
    summary = {"json": str(json_path), "runtime_s": result["runtime_s"], "model": label,
               "speedup_vs_transformers": result["engine"]["vs_transformers"]["speedup_vs_transformers"],
               "plots": result["plots"]}
    for key in EDITOR_KEYS:
        if key in result.get("editor", {}):
            summary[key] = result["editor"][key]
    emit(summary)
    return result


if __name__ == "__main__":
    main()
