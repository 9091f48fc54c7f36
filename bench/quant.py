"""Quantized weights: bytes per format of the 26B-A4B text shape, logit error and token agreement against the
unquantized model (tiny random checkpoints and the shipped model), the MoE kernel against its oracle, and the shipped
model's infill exact match / edit similarity at int8 and int4 beside fp32 with paired bootstrap intervals.

    python -m bench.quant [--holes 300] [--quick] [--threads 1]

Last line JSON: formats, bytes_ratio, max_rel_logit_err, token_agreement, kernel_max_rel_err, em_delta_int4(_ci), ...
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from bench.common import emit, machine  # noqa: E402
from engine.engine import Engine, default_model_path  # noqa: E402
from engine.model.transformer import KVCache  # noqa: E402
from engine.quant import memory  # noqa: E402
from engine.quant.formats import QUANTIZED, dequantize, quantize  # noqa: E402
from engine.quant.kernel_check import cases, max_rel_err, run_kernel  # noqa: E402

GB = 1e9
PROMPTS = [("def add(a, b):\n    return ", "\n"), ("for i in range(10):\n    ", "\nprint(total)\n"),
           ("class Point:\n    def __init__(self, x, y):\n        ", "\n"), ("import os\n", "\n\ndef main():\n"),
           ("with open(path) as f:\n    ", "\n"), ("if __name__ == '__main__':\n    ", "\n")]


def logits(engine: Engine, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    v = engine.vocab_size
    ctx, canvas = torch.randint(0, v, (1, 48), generator=g), torch.randint(0, v, (1, 32), generator=g)
    with torch.inference_mode():
        return engine.model.decode(canvas, engine.model.encode(ctx, KVCache()), None)


def logit_err(path: Path, fmt: str, seeds: int = 4) -> float:
    ref = Engine.from_pretrained(path, device="cpu", dtype="float32", weights="bf16")
    q = Engine.from_pretrained(path, device="cpu", dtype="float32", weights=fmt)
    return max(float((logits(q, s) - logits(ref, s)).abs().max() / logits(ref, s).abs().max()) for s in range(seeds))


def token_agreement(path: Path, fmt: str, prompts: int = len(PROMPTS)) -> float:
    """Share of positions where the quantized model fills the same token as fp32, two canvases per prompt (the
    first `prompts` prompts), reference-compatible mode (the sampler's own draws, same seed)."""
    ref = Engine.from_pretrained(path, device="cpu", dtype="float32", weights="bf16")
    q = Engine.from_pretrained(path, device="cpu", dtype="float32", weights=fmt)
    same = total = 0
    for i, (prefix, suffix) in enumerate(PROMPTS[:prompts]):
        kw = dict(canvas_length=16, max_canvases=2, steps=16, seed=i, reference_compatible=True)
        a, b = ref.infill_text(prefix, suffix, **kw).ids, q.infill_text(prefix, suffix, **kw).ids
        same += sum(x == y for x, y in zip(a, b, strict=False))
        total += max(len(a), len(b))
    return same / max(total, 1)


def int4_variants(path: Path) -> dict:
    """Symmetric vs asymmetric int4 groups on the shipped model: weight error of the experts and logit error."""
    from engine.loader import load_model
    from engine.quant.plan import WeightPlan

    ref = Engine.from_pretrained(path, device="cpu", dtype="float32", weights="bf16")
    out = {}
    for name, sym in (("symmetric", True), ("asymmetric", False)):
        num = den = 0.0
        for layer in ref.model.layers:
            for w in (layer.moe.gate_up_proj, layer.moe.down_proj, layer.self_attn.q_proj.weight):
                num += float((dequantize(quantize(w, "int4", symmetric=sym)) - w).pow(2).sum())
                den += float(w.pow(2).sum())
        plan = WeightPlan("int4", torch.device("cpu"), torch.float32, symmetric=sym)
        q = load_model(path, ref.config.text, torch.device("cpu"), torch.float32, plan)
        errs = []
        for s in range(4):
            a = logits(ref, s)
            ref_model, ref.model = ref.model, q
            b = logits(ref, s)
            ref.model = ref_model
            errs.append(float((b - a).abs().max() / a.abs().max()))
        out[name] = {"weight_rel_mse": num / den, "max_rel_logit_err": max(errs)}
    return out


def cpu_seconds() -> float:
    """CPU time of this process and its finished children (the Triton interpreter child)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def paired_bootstrap(a: list[float], b: list[float], n: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    """Mean of b - a over paired items and its 95% percentile interval."""
    rng = random.Random(seed)
    d = [y - x for x, y in zip(a, b, strict=True)]
    means = sorted(sum(d[rng.randrange(len(d))] for _ in d) / len(d) for _ in range(n))
    return sum(d) / len(d), means[int(0.025 * n)], means[int(0.975 * n) - 1]


def quality(path: Path, holes: int, seed: int = 0) -> dict:
    """Held-out holes at the true canvas length, filled at fp32, int8 and int4 (same holes, same seeds). The three
    engines fill each hole in turn, so a progress line every 50 holes carries paired figures so far."""
    import json

    from engine.tokens import InfillFormat
    from engine.train.data import DataConfig
    from engine.train.evaluate import Filler, held_out_holes, run_holes

    infill = json.loads((path / "infill.json").read_text())
    fmt = InfillFormat(canvas_lengths=tuple(infill["canvas_lengths"]))
    data_cfg = DataConfig(context_tokens=infill.get("max_context_tokens", 128),
                          suffix_tokens=infill.get("max_suffix_tokens", 32), canvas_lengths=fmt.canvas_lengths,
                          canvas_weights=tuple(1.0 for _ in fmt.canvas_lengths))
    fillers = {w: Filler(path, None, None, w) for w in ("bf16", "int8", "int4")}
    cases = held_out_holes(fillers["bf16"].tok, fmt, data_cfg, holes, seed)  # the same holes for each format
    rows: dict[str, list[dict]] = {w: [] for w in fillers}
    t0 = time.time()
    for i, case in enumerate(cases):
        for w, filler in fillers.items():
            rows[w] += run_holes(filler, [case], fmt, seed + i, lengths=("true",))[1]  # fill seed: seed + i
        if (i + 1) % 50 == 0 or i + 1 == len(cases):
            em = {w: round(sum(r["true"]["exact"] for r in rs) / len(rs), 3) for w, rs in rows.items()}
            print(f"  {i + 1}/{len(cases)} holes, {time.time() - t0:.0f} s: EM {em}", flush=True)
    out: dict = {"holes": holes}
    base_em = [float(r["true"]["exact"]) for r in rows["bf16"]]
    base_es = [float(r["true"]["es"]) for r in rows["bf16"]]
    out["em_fp32"], out["es_fp32"] = sum(base_em) / holes, sum(base_es) / holes
    for weights in ("int8", "int4"):
        em = [float(r["true"]["exact"]) for r in rows[weights]]
        es = [float(r["true"]["es"]) for r in rows[weights]]
        d, lo, hi = paired_bootstrap(base_em, em)
        out[f"em_{weights}"], out[f"em_delta_{weights}"], out[f"em_delta_{weights}_ci"] = sum(em) / holes, d, [lo, hi]
        d, lo, hi = paired_bootstrap(base_es, es)
        out[f"es_{weights}"], out[f"es_delta_{weights}"], out[f"es_delta_{weights}_ci"] = sum(es) / holes, d, [lo, hi]
        out[f"fills_identical_{weights}"] = sum(a["true"]["fill"] == b["true"]["fill"]
                                                for a, b in zip(rows["bf16"], rows[weights], strict=True)) / holes
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--holes", type=int, default=300)
    ap.add_argument("--quick", action="store_true", help="4 holes, 1 agreement prompt, 1 logit seed (a code-path "
                    "check in seconds, not a measurement)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1: a shared machine)")
    args = ap.parse_args(argv)
    torch.set_num_threads(max(1, args.threads))
    torch.manual_seed(0)
    t0 = time.time()
    phases: dict[str, float] = {}

    def lap(name: str, start: float) -> None:
        phases[name] = round(time.time() - start, 1)
        print(f"[{name}: {phases[name]} s wall, {cpu_seconds():.0f} s CPU so far]", flush=True)
    shipped = default_model_path()

    cfg = memory.gemma4_26b_a4b()
    counts = memory.param_counts(cfg)
    per = memory.bytes_by_format(cfg)
    print(f"26B-A4B text shape ({counts['total'] / 1e9:.2f}B total, {counts['active'] / 1e9:.2f}B active), "
          "weight bytes from the shape:")
    for f, b in per.items():
        print(f"  {f:<5} {b / GB:6.2f} GB  ratio {b / per['bf16']:.3f}")

    t = time.time()
    variants = int4_variants(shipped)
    print("int4 groups on the shipped model:", variants)
    lap("int4_variants", t)

    t = time.time()
    seeds, prompts = (1, 1) if args.quick else (4, len(PROMPTS))
    with tempfile.TemporaryDirectory() as d:
        from engine.testing.tiny import build_tiny_checkpoint

        tiny = build_tiny_checkpoint(Path(d) / "mixed", "mixed", canvas_length=16, seed=0)
        err = {f"tiny_{f}": logit_err(tiny, f, seeds) for f in QUANTIZED}
    err.update({f"shipped_{f}": logit_err(shipped, f, seeds) for f in QUANTIZED})
    agree = {f"shipped_{f}": token_agreement(shipped, f, prompts) for f in QUANTIZED}
    print("max relative logit error vs unquantized:", {k: round(v, 4) for k, v in err.items()})
    print(f"token agreement with fp32 (2 canvases x {prompts} prompts, reference-compatible):",
          {k: round(v, 3) for k, v in agree.items()})
    lap("logit_err_and_agreement", t)

    t = time.time()
    inputs = cases(seed=0)
    kerr = max_rel_err(inputs, run_kernel(inputs))
    print("kernel vs eager oracle (Triton interpreter):", {k: f"{v:.1e}" for k, v in kerr.items()})
    lap("kernel", t)

    t = time.time()
    q = quality(shipped, 4 if args.quick else args.holes)
    lap("quality", t)
    print(f"shipped model, {q['holes']} held-out holes at the true canvas length: EM fp32 {q['em_fp32']:.3f}, "
          f"int8 {q['em_int8']:.3f} (delta {q['em_delta_int8']:+.3f}, 95% CI {q['em_delta_int8_ci']}), "
          f"int4 {q['em_int4']:.3f} (delta {q['em_delta_int4']:+.3f}, 95% CI {q['em_delta_int4_ci']}); "
          f"ES fp32 {q['es_fp32']:.3f}, int8 {q['es_int8']:.3f}, int4 {q['es_int4']:.3f}")
    emit({
        "formats": list(per),
        "bytes_26b_a4b_gb": {f: round(b / GB, 2) for f, b in per.items()},
        "bytes_ratio": {f: round(per[f] / per["bf16"], 4) for f in QUANTIZED},
        "int4_variants": variants,
        "max_rel_logit_err": err,
        "token_agreement": agree,
        "kernel_max_rel_err": max(kerr.values()),
        "kernel_rel_err": kerr,
        **q,
        "machine": machine(),
        "phase_seconds": phases,
        "seconds": round(time.time() - t0, 1),
        "cpu_seconds": round(cpu_seconds(), 1),  # ours and the kernel child's: the wall time includes others' load
    })


if __name__ == "__main__":
    main()
