"""Shared helpers for the benchmark scripts: the model picker, a child's environment, machine description, medians,
JSON last line."""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
from pathlib import Path


def pick_model(root: Path, model: Path | None, tokenizer: bool = False) -> tuple[Path, str]:
    """(checkpoint dir, label): dg_lsp.devtools.client.pick_model (an explicit path, else the shipped default model),
    else a random checkpoint of the default model's shape (bench.checkpoint.BENCH_SHAPE) built under `root`, with the
    tiny test tokenizer when `tokenizer` (the language server needs one)."""
    from dg_lsp.devtools.client import pick_model as pick

    def random_checkpoint() -> tuple[Path, str]:
        from bench.checkpoint import BENCH_SHAPE, build_bench_checkpoint
        from engine.testing.tiny import build_tiny_checkpoint

        if tokenizer:
            path = build_tiny_checkpoint(root / "lsp-bench", BENCH_SHAPE, canvas_length=64)
            return path, "RANDOM checkpoint of the default model's shape (no trained model; tiny tokenizer)"
        return build_bench_checkpoint(root, 64), "random bench checkpoint (BENCH_SHAPE, random weights)"

    return pick(model, random_checkpoint)


def checkout_env(**extra: str) -> dict[str, str]:
    """The environment of a child process (server, service) a benchmark starts: this one's, offline, this checkout
    first on PYTHONPATH (no `pip install -e .` needed), and `extra`."""
    root = str(Path(__file__).resolve().parents[1])
    return dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
                PYTHONPATH=os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p), **extra)


def machine() -> dict:
    import torch
    import transformers

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    return {
        "cpu": cpu, "cores": os.cpu_count(), "torch": torch.__version__, "transformers": transformers.__version__,
        "python": sys.version.split()[0],
        "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
        "torch_threads": torch.get_num_threads(),
    }


def median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def percentile(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    s = sorted(xs)
    k = (len(s) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def emit(result: dict) -> None:
    """The last line of every benchmark is one JSON object."""
    print(json.dumps(result, sort_keys=True))
