"""PNG plots of a bench.run result (matplotlib, Agg backend): step time vs canvas and context length, keystroke
latency distribution, parallel vs one-per-step tokens/s.

    python -m bench.plots RESULT.json [--out DIR]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from bench.common import emit  # noqa: E402


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def step_vs_canvas(engine: dict, path: Path) -> Path:
    rows = engine["canvas_sweep"]
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    ax.plot([r["canvas"] for r in rows], [r["ms_per_step"] for r in rows], "o-")
    ax.set_xscale("log", base=2)
    ax.set_xticks([r["canvas"] for r in rows], [str(r["canvas"]) for r in rows])
    ax.set_xlabel("canvas length (tokens)")
    ax.set_ylabel("ms per denoising step (median)")
    ax.set_ylim(bottom=0)
    ax.set_title(f"step time vs canvas, context {rows[0]['context']}\n{engine['model']['label']}", fontsize=9)
    ax.grid(alpha=0.3)
    return _save(fig, path)


def step_vs_context(engine: dict, path: Path) -> Path:
    sweep = engine["context_sweep"]
    rows = sweep["rows"]
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    ax.plot([r["context"] for r in rows], [r["ms_per_step"] for r in rows], "o-")
    ax.set_xscale("log", base=2)
    ax.set_xticks([r["context"] for r in rows], [str(r["context"]) for r in rows])
    ax.set_xlabel("context length (tokens, cached)")
    ax.set_ylabel("ms per denoising step (median)")
    ax.set_ylim(bottom=0)
    capped = f", capped before {sweep['capped_at']}" if sweep.get("capped_at") else ""
    ax.set_title(f"step time vs context, canvas {rows[0]['canvas']}{capped}\n{engine['model']['label']}", fontsize=9)
    ax.grid(alpha=0.3)
    return _save(fig, path)


def acceptance_bars(engine: dict, path: Path) -> Path:
    rows = engine["acceptance"]
    canvases = sorted({r["canvas"] for r in rows})
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    labels = {"parallel": "entropy-bound (parallel)", "one_per_step": "one token per step",
              "default_steps": "parallel, checkpoint's step budget"}
    modes = [m for m in labels if any(r["mode"] == m for r in rows)]
    width = 0.8 / len(modes)
    for j, mode in enumerate(modes):
        tps = [next(r["tokens_per_s"] for r in rows if r["canvas"] == c and r["mode"] == mode) for c in canvases]
        bars = ax.bar([i + (j - (len(modes) - 1) / 2) * width for i in range(len(canvases))], tps, width,
                      label=labels[mode])
        acc = [next(r["tokens_accepted_per_step"] for r in rows if r["canvas"] == c and r["mode"] == mode)
               for c in canvases]
        ax.bar_label(bars, [f"{a:.1f}/step" for a in acc], fontsize=7)
    ax.set_xticks(range(len(canvases)), [str(c) for c in canvases])
    ax.set_xlabel("canvas length (tokens)")
    ax.set_ylabel("canvas tokens / s")
    ax.set_title(f"parallel vs one-per-step acceptance\n{engine['model']['label']}", fontsize=9)
    ax.set_ylim(top=1.35 * max(r["tokens_per_s"] for r in rows))  # room for the legend above the bars
    ax.legend(fontsize=7, loc="upper left")
    return _save(fig, path)


def latency_distribution(series: dict[str, list[float]], path: Path, title: str = "keystroke to inline item") -> Path:
    """Histogram and CDF of keystroke-to-response ms, one series per setting."""
    fig, (h, c) = plt.subplots(1, 2, figsize=(9, 3.6))
    for name, xs in series.items():
        s = sorted(xs)
        h.hist(s, bins=min(30, max(5, len(s) // 2)), alpha=0.6, label=f"{name} (n={len(s)})")
        c.plot(s, [(i + 1) / len(s) for i in range(len(s))], label=name)
    h.set_xlabel("ms")
    h.set_ylabel("keystrokes")
    h.legend(fontsize=7)
    c.set_xlabel("ms")
    c.set_ylabel("fraction of keystrokes")
    c.grid(alpha=0.3)
    fig.suptitle(title, fontsize=10)
    return _save(fig, path)


def plot_all(result: dict, out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    eng = result["engine"]
    paths = [step_vs_canvas(eng, out / "step_vs_canvas.png"), step_vs_context(eng, out / "step_vs_context.png"),
             acceptance_bars(eng, out / "parallel_vs_one_per_step.png")]
    ed = result.get("editor") or {}
    if ed.get("samples_ms"):
        series = {"default settings (75 ms debounce)": ed["samples_ms"]}
        if ed.get("samples_debounce0_ms"):
            series["debounce 0, 4 denoising steps"] = ed["samples_debounce0_ms"]
        paths.append(latency_distribution(series, out / "keystroke_latency.png"))
    return paths


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("result", type=Path)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    paths = plot_all(json.loads(args.result.read_text()), args.out or args.result.parent)
    for p in paths:
        print(p)
    emit({"plots": [str(p) for p in paths]})


if __name__ == "__main__":
    main()
