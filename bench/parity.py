"""Engine vs transformers' DiffusionGemmaForBlockDiffusion on tiny random checkpoints: logits and generated ids.

Configs: the tiny shapes (engine.testing.tiny.TINY_VARIANTS), the configs transformers loads differently
(ENGINE_FIX_VARIANTS: exact gelu, attention biases, an untied encoder, the text-level tie flag) and the
published-layout checkpoint (engine.testing.published), whose prompts are chat-rendered holes and whose
generation_config.json (two eos ids, its sampler settings) both sides read.

Two parts per config: `--cases` prompts of 8, 21, 34, ... tokens (logits, then 2 canvases of ids), and a sweep over
every context length in `--lengths` (default 1-64: one token up, where one-row GEMMs take other kernels), each
with its logits and one canvas of ids in reference-compatible mode (`--sweep-steps` denoising steps).
`max_abs_logit_diff` covers both parts, `context_lengths` is the sweep's [first, last]. `gguf`: the same cases and
sweep for F32 and Q8_0 GGUFs against their safetensors twin (bench.parity_gguf).

    python -m bench.parity [--cases 4] [--lengths 1-64] [--sweep-steps 4] [--quick]

`families`: the mask-diffusion families (Dream, LLaDA) against transformers and the upstream loops
(bench.parity_families): {"dream": {"max_abs_logit_diff", "tokens_identical", "cases", ...}, "llada": {...}}.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")

HOLES = [
    ("def add(a, b):\n    return ", "\n", "rest_of_line"),
    ("import os\n\n", "\nprint(1)\n", "statement"),
    ("for i in range(3):\n", "", "block_body"),
    ("x = [", "]\n", "bracket_expr"),
    ("class A:\n    def f(self):\n", "\n\nA().f()\n", "block_body"),
    ("if x:\n    y = ", "\nelse:\n    y = 0\n", "rest_of_line"),
]


def _random_case(eng, g: torch.Generator, n_ctx: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """context (1, n_ctx), canvas (1, C) ids and self-conditioning logits (1, C, V)."""
    c, v = eng.config.canvas_length, eng.vocab_size
    return (torch.randint(3, v, (1, n_ctx), generator=g), torch.randint(0, v, (1, c), generator=g),
            torch.randn(1, c, v, generator=g) * 4)


def _configs(quick: bool) -> list[tuple[str, object]]:
    from engine.testing.published import build_published_checkpoint
    from engine.testing.tiny import ENGINE_FIX_VARIANTS, TINY_VARIANTS, build_tiny_checkpoint

    names = ["mixed"] if quick else [*TINY_VARIANTS, *ENGINE_FIX_VARIANTS]
    configs = [(v, lambda p, v=v, i=i: build_tiny_checkpoint(p, v, canvas_length=16, seed=i))
               for i, v in enumerate(names)]
    configs.append(("published_layout", lambda p: build_published_checkpoint(p)))
    return configs


def run(cases: int, lengths: range, sweep_steps: int, quick: bool = False) -> dict:
    from transformers import DiffusionGemmaForBlockDiffusion

    from bench.parity_gguf import run_gguf
    from engine.engine import Engine
    from engine.seam import HoleInfo
    from engine.testing.tiny import generated_ids, logit_diff

    rows, sweep = [], []
    configs = _configs(quick)
    with tempfile.TemporaryDirectory() as tmp:
        for vi, (name, build) in enumerate(configs):
            path = build(Path(tmp) / name)
            eng = Engine.from_pretrained(path, device="cpu", dtype="float32")
            ref = DiffusionGemmaForBlockDiffusion.from_pretrained(path, dtype=torch.float32).eval()
            g = torch.Generator().manual_seed(1000 + vi)
            for case in range(cases):
                n_ctx = 8 + 13 * case
                diff = logit_diff(eng, ref, *_random_case(eng, g, n_ctx))
                if name == "published_layout":  # chat-rendered holes, the checkpoint's own sampler settings
                    prefix, suffix, kind = HOLES[case % len(HOLES)]
                    hole = HoleInfo(kind=kind, language="python", filename="example.py")
                    ctx = eng.prompt_format.context(eng.encode(prefix), eng.encode(suffix), hole)
                    want, got = generated_ids(eng, ref, ctx, case, 2 * eng.config.canvas_length, None)
                else:
                    ctx = torch.randint(3, eng.vocab_size, (n_ctx,), generator=g).tolist()
                    want, got = generated_ids(eng, ref, ctx, case, 2 * eng.config.canvas_length, 6)
                rows.append((name, len(ctx), diff, len(want), got == want))
            gs = torch.Generator().manual_seed(2000 + vi)  # the sweep's own draws: the cases above stay as they were
            for n_ctx in lengths:
                diff = logit_diff(eng, ref, *_random_case(eng, gs, n_ctx))
                ctx = torch.randint(3, eng.vocab_size, (n_ctx,), generator=gs).tolist()
                want, got = generated_ids(eng, ref, ctx, n_ctx, eng.config.canvas_length, sweep_steps)
                sweep.append((name, n_ctx, diff, got == want))
        gguf = run_gguf(Path(tmp), cases, lengths, sweep_steps)  # its table comes first
    print(f"{'config':<18}{'context':>8}{'max|dlogit|':>14}{'new ids':>9}{'identical':>11}")
    for name, n_ctx, diff, n, same in rows:
        print(f"{name:<18}{n_ctx:>8}{diff:>14.2e}{n:>9}{str(same):>11}")
    print(f"\nsweep: contexts of {lengths.start}..{lengths.stop - 1} tokens, one canvas, {sweep_steps} steps")
    print(f"{'config':<18}{'max|dlogit|':>14}{'identical':>11}  lengths not exact")
    for name, _ in configs:
        mine = [r for r in sweep if r[0] == name]
        bad = [r[1] for r in mine if r[2] or not r[3]]
        print(f"{name:<18}{max((r[2] for r in mine), default=0.0):>14.2e}"
              f"{f'{sum(r[3] for r in mine)}/{len(mine)}':>11}  {bad or '-'}")
    every = [r[2] for r in rows] + [r[2] for r in sweep]
    return {"configs": len(configs), "cases": len(rows), "max_abs_logit_diff": max(every, default=0.0),
            "tokens_identical": sum(r[4] for r in rows), "published_layout_identical": sum(
                r[4] for r in rows if r[0] == "published_layout"),
            "context_lengths": [lengths.start, lengths.stop - 1], "sweep_cases": len(sweep),
            "sweep_max_abs_logit_diff": max((r[2] for r in sweep), default=0.0),
            "sweep_tokens_identical": sum(r[3] for r in sweep),
            "sweep_not_exact": sorted({(r[0], r[1]) for r in sweep if r[2] or not r[3]}), "quick": quick,
            "gguf": gguf}


def _lengths(text: str) -> range:
    lo, _, hi = text.partition("-")
    first, last = int(lo), int(hi or lo)
    if not 1 <= first <= last:
        raise argparse.ArgumentTypeError(f"need 1 <= first <= last, got {text!r}")
    return range(first, last + 1)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=None, help="prompts per config (default 4; quick 1)")
    ap.add_argument("--lengths", type=_lengths, default=None,
                    help="context lengths of the sweep, FIRST-LAST (default 1-64; quick 1-3)")
    ap.add_argument("--sweep-steps", type=int, default=None, help="denoising steps per sweep canvas (4; quick 2)")
    ap.add_argument("--quick", action="store_true", help="tiny sizes (seconds): the mixed and published configs")
    args = ap.parse_args(argv)
    torch.set_num_threads(min(2, torch.get_num_threads()))
    from bench.common import emit

    q = args.quick
    result = run(args.cases if args.cases is not None else (1 if q else 4),
                 args.lengths or range(1, 4 if q else 65),
                 args.sweep_steps if args.sweep_steps is not None else (2 if q else 4), quick=q)
    from bench.parity_families import run_families  # the mask-diffusion families (Dream, LLaDA)

    result["families"] = run_families(quick=q)
    emit(result)
    return result


if __name__ == "__main__":
    main()
