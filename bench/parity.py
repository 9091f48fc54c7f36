"""Engine vs transformers' DiffusionGemmaForBlockDiffusion on tiny random checkpoints: logits and generated ids.

Configs: the tiny shapes (engine.testing.TINY_VARIANTS), the configs transformers loads differently
(ENGINE_FIX_VARIANTS: exact gelu, attention biases, an untied encoder, the text-level tie flag) and the
published-layout checkpoint (engine.testing_published), whose prompts are chat-rendered holes and whose
generation_config.json (two eos ids, its sampler settings) both sides read.

    python -m bench.parity [--cases 4]
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


def _logit_diff(eng, ref, g: torch.Generator, n_ctx: int) -> float:
    from transformers.cache_utils import DynamicCache

    from engine.model import KVCache

    c = eng.config.canvas_length
    ctx = torch.randint(3, eng.vocab_size, (1, n_ctx), generator=g)
    canvas = torch.randint(0, eng.vocab_size, (1, c), generator=g)
    sc = torch.randn(1, c, eng.vocab_size, generator=g) * 4
    with torch.no_grad():
        cache = DynamicCache(config=ref.config.get_text_config(decoder=True))
        ref.model.encoder(input_ids=ctx, cache=cache)
        want = ref(decoder_input_ids=canvas, cache=cache, self_conditioning_logits=sc).logits
    soft = eng.model.soft_embedding(torch.softmax(sc, dim=-1, dtype=torch.float32))
    return (eng.model.decode(canvas, eng.model.encode(ctx, KVCache()), soft) - want).abs().max().item()


def _ids(eng, ref, ctx: list[int], seed: int, steps: int | None) -> tuple[list[int], list[int]]:
    """(transformers' ids cut at any eos, the engine's) for 2 canvases; steps None: generation_config.json's."""
    eos, pad = eng.config.eos_token_ids, eng.config.text.pad_token_id
    kw = {} if steps is None else {"max_denoising_steps": steps}
    torch.manual_seed(seed)
    n = 2 * eng.config.canvas_length
    seq = ref.generate(torch.tensor([ctx]), max_new_tokens=n, **kw).sequences[0, len(ctx):].tolist()
    stop = next((i for i, t in enumerate(seq) if t in eos), len(seq))
    want = [t for t in seq[:stop] if t != pad]
    got = eng.generate_ids(ctx, max_new_tokens=n, steps=steps, seed=seed, reference_compatible=True)
    return want, got


def run(cases: int) -> dict:
    from transformers import DiffusionGemmaForBlockDiffusion

    from engine.engine import Engine
    from engine.seam import HoleInfo
    from engine.testing import ENGINE_FIX_VARIANTS, TINY_VARIANTS, build_tiny_checkpoint
    from engine.testing_published import build_published_checkpoint

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        configs = [(v, lambda p, v=v, i=i: build_tiny_checkpoint(p, v, canvas_length=16, seed=i))
                   for i, v in enumerate([*TINY_VARIANTS, *ENGINE_FIX_VARIANTS])]
        configs.append(("published_layout", lambda p: build_published_checkpoint(p)))
        for vi, (name, build) in enumerate(configs):
            path = build(Path(tmp) / name)
            eng = Engine.from_pretrained(path, device="cpu", dtype="float32")
            ref = DiffusionGemmaForBlockDiffusion.from_pretrained(path, dtype=torch.float32).eval()
            g = torch.Generator().manual_seed(1000 + vi)
            for case in range(cases):
                n_ctx = 8 + 13 * case
                diff = _logit_diff(eng, ref, g, n_ctx)
                if name == "published_layout":  # chat-rendered holes, the checkpoint's own sampler settings
                    prefix, suffix, kind = HOLES[case % len(HOLES)]
                    hole = HoleInfo(kind=kind, language="python", filename="example.py")
                    ctx = eng.prompt_format.context(eng.encode(prefix), eng.encode(suffix), hole)
                    want, got = _ids(eng, ref, ctx, case, None)
                else:
                    ctx = torch.randint(3, eng.vocab_size, (n_ctx,), generator=g).tolist()
                    want, got = _ids(eng, ref, ctx, case, 6)
                rows.append((name, len(ctx), diff, len(want), got == want))
    print(f"{'config':<18}{'context':>8}{'max|dlogit|':>14}{'new ids':>9}{'identical':>11}")
    for name, n_ctx, diff, n, same in rows:
        print(f"{name:<18}{n_ctx:>8}{diff:>14.2e}{n:>9}{str(same):>11}")
    return {"configs": len(configs), "cases": len(rows), "max_abs_logit_diff": max(r[2] for r in rows),
            "tokens_identical": sum(r[4] for r in rows), "published_layout_identical": sum(
                r[4] for r in rows if r[0] == "published_layout")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=4, help="prompts per config")
    args = ap.parse_args()
    torch.set_num_threads(min(2, torch.get_num_threads()))
    from bench.common import emit

    emit(run(args.cases))


if __name__ == "__main__":
    main()
