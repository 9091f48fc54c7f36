"""Peak memory per configuration: each configuration runs in its own subprocess, so ru_maxrss is that
configuration's peak (plus CUDA max_memory_allocated on a GPU).

    python -m bench.memory [--model DIR] [--quick]
    python -m bench.memory --one '{"model": DIR, "kind": "engine", "context": 512, "canvas": 64}'   # one config
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

# kind: "load" (model resident, no fill), "engine" (one fill), "transformers" (one generate call)
CONFIGS = [
    {"kind": "load", "context": 0, "canvas": 0},
    {"kind": "engine", "context": 8192, "canvas": 64},
    {"kind": "engine", "context": 512, "canvas": 256},
    {"kind": "transformers", "context": 512, "canvas": 64},
]
QUICK_CONFIGS = [{"kind": "engine", "context": 64, "canvas": 16}]


def peak_rss_mb() -> float:
    """Peak resident set size of this process: VmHWM, which execve resets. (ru_maxrss is not enough here: Linux
    carries the parent's high-water mark across fork + exec, so a child of a big process reports the parent's.)"""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def one(cfg: dict) -> dict:
    """Run one configuration in this process and report its peak memory (call in a fresh process)."""
    import torch

    torch.set_num_threads(cfg.get("threads", 1))
    kind, n, c, steps = cfg["kind"], cfg["context"], cfg["canvas"], cfg.get("steps", 4)
    g = torch.Generator().manual_seed(0)
    cuda = torch.cuda.is_available()
    if kind == "transformers":
        from transformers import DiffusionGemmaForBlockDiffusion

        ref = DiffusionGemmaForBlockDiffusion.from_pretrained(cfg["model"]).eval()
        ref.config.canvas_length = c
        ids = torch.randint(6, ref.config.text_config.vocab_size, (1, n), generator=g)
        with torch.no_grad():
            ref.generate(ids, max_new_tokens=c, max_denoising_steps=steps, confidence_threshold=1e-9)
    else:
        from engine.engine import Engine

        eng = Engine.from_pretrained(cfg["model"], device="auto", dtype="auto")
        if kind == "engine":
            eng.infill(torch.randint(6, eng.vocab_size, (n,), generator=g).tolist(), canvas_length=c, steps=steps)
    out = {**cfg, "peak_rss_mb": round(peak_rss_mb(), 1)}
    if cuda:
        out["cuda_max_allocated_mb"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
    return out


def measure(model: Path, configs: list[dict], progress: Callable[[str], None] = lambda s: None,
            threads: int = 1) -> list[dict]:
    rows = []
    for cfg in configs:
        cfg = {**cfg, "model": str(model), "threads": threads}
        progress(f"memory {cfg['kind']} context {cfg['context']} canvas {cfg['canvas']}")
        proc = subprocess.run([sys.executable, "-m", "bench.memory", "--one", json.dumps(cfg)], capture_output=True,
                              text=True, cwd=Path(__file__).resolve().parent.parent, timeout=600)
        if proc.returncode:
            rows.append({**cfg, "error": proc.stderr.strip().splitlines()[-1:] or [f"exit {proc.returncode}"]})
            continue
        rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    return rows


def print_table(rows: list[dict]) -> None:
    print(f"{'kind':<14}{'context':>8}{'canvas':>8}{'peak RSS MB':>13}{'CUDA max MB':>13}")
    for r in rows:
        if "error" in r:
            print(f"{r['kind']:<14}{r['context']:>8}{r['canvas']:>8}  error: {r['error']}")
            continue
        cuda = r.get("cuda_max_allocated_mb")
        print(f"{r['kind']:<14}{r['context']:>8}{r['canvas']:>8}{r['peak_rss_mb']:>13.0f}"
              f"{'-' if cuda is None else f'{cuda:.0f}':>13}")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, default=None)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--one", help="JSON of one configuration; runs it in this process")
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(one(json.loads(args.one)), sort_keys=True))
        return
    from bench.common import emit, machine, pick_model

    with tempfile.TemporaryDirectory() as tmp:
        path, label = pick_model(Path(tmp), args.model)
        rows = measure(path, QUICK_CONFIGS if args.quick else CONFIGS,
                       progress=lambda s: print(f"... {s}", file=sys.stderr))
    print(f"model: {label}")
    print_table(rows)
    emit({"model": label, "memory": rows, "machine": machine()})


if __name__ == "__main__":
    main()
