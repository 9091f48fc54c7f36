"""bench.parity's families section: each mask-diffusion family's logits against transformers (Qwen2 for Dream, Llama
for LLaDA, run with an all-zero additive 4-D mask; Dream's shifted right by one) and its fills against the
upstream sampling loops as tests/engine/family_oracles.py transcribes them (run from the repository root), fp32 CPU.

Per family: its three tiny published-layout configs (engine.testing.families), logits on windows of 1, 7, 33 and
96 tokens; ids for every sampler case (Dream: the four algs, argmax and seeded, infill and generation; LLaDA:
low_confidence and random remasking, blocks, Gumbel noise), two seeds each, on the first config."""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch

DREAM_CASES = [({"alg": "origin"}, 16), ({"alg": "origin", "temperature": 0.8, "top_p": 0.9}, 8),
               ({"alg": "maskgit_plus"}, 8), ({"alg": "maskgit_plus", "temperature": 0.7, "top_k": 20,
                                               "alg_temp": 0.5}, 8),
               ({"alg": "topk_margin"}, 6), ({"alg": "topk_margin", "temperature": 0.5}, 16),
               ({"alg": "entropy"}, 16), ({"alg": "entropy", "temperature": 0.2, "top_p": 0.95, "alg_temp": 0.3}, 5)]
LLADA_CASES = [({}, 16), ({"block_length": 8}, 8), ({"remasking": "random"}, 8), ({"temperature": 0.7}, 16),
               ({"temperature": 0.5, "block_length": 4, "remasking": "random"}, 8)]
LENGTHS = (1, 7, 33, 96)


def _ids_dream(eng, ref, settings: dict, steps: int, seed: int, infill: bool) -> tuple[list[int], list[int]]:
    from engine.denoising.sampler import cut_at_eos
    from engine.families.mask_engine import MaskEngine
    from tests.engine.family_oracles import dream_sample, full_attention

    mask = eng.config.text.mask_token_id
    prefix, suffix = eng.encode("def add(a, b):\n    return "), eng.encode("\n\nprint(add(1, 2))\n")
    tail = suffix if infill else []
    torch.manual_seed(seed)
    x = dream_sample(full_attention(ref), torch.tensor([prefix + [mask] * 16 + tail]), mask, steps,
                     **{"eps": 1e-3, **settings})
    want = cut_at_eos(x[0, len(prefix):len(prefix) + 16].tolist(), eng.config.eos_token_ids,
                      eng.config.text.pad_token_id)[0]
    got = MaskEngine.load(eng.family, eng.path, device="cpu", dtype="float32", sampler=settings).infill(
        prefix + ([mask] + suffix if infill else []), canvas_length=16, steps=steps, seed=seed).ids
    return want, got


def _ids_llada(eng, ref, settings: dict, steps: int, seed: int) -> tuple[list[int], list[int]]:
    from engine.denoising.sampler import cut_at_eos
    from engine.families.mask_engine import MaskEngine
    from tests.engine.family_oracles import full_attention, llada_generate

    prompt = eng.encode("def add(a, b):\n    return ")
    torch.manual_seed(seed)
    x = llada_generate(full_attention(ref), torch.tensor([prompt]), steps=steps, gen_length=16,
                       block_length=settings.get("block_length", 16), mask_id=eng.config.text.mask_token_id,
                       temperature=settings.get("temperature", 0.0),
                       remasking=settings.get("remasking", "low_confidence"))
    want = cut_at_eos(x[0, len(prompt):].tolist(), eng.config.eos_token_ids, eng.config.text.pad_token_id)[0]
    got = MaskEngine.load(eng.family, eng.path, device="cpu", dtype="float32", sampler=settings).infill(
        prompt, canvas_length=16, steps=steps, seed=seed).ids
    return want, got


def run_families(quick: bool = False) -> dict:
    from engine.engine import Engine
    from engine.testing.families import DREAM_VARIANTS, LLADA_VARIANTS, tiny_family
    from tests.engine.family_oracles import full_attention

    out = {}
    seeds = (0,) if quick else (0, 7)
    with tempfile.TemporaryDirectory() as tmp:
        for family, variants in (("dream", DREAM_VARIANTS), ("llada", LLADA_VARIANTS)):
            diffs, same, cases, lengths = [], 0, 0, []
            for vi, variant in enumerate(sorted(variants)):
                path, ref = tiny_family(Path(tmp) / f"{family}-{variant}", family, variant, seed=vi)
                eng = Engine.from_pretrained(path, device="cpu", dtype="float32")
                g = torch.Generator().manual_seed(vi)
                for n in LENGTHS[:2] if quick else LENGTHS:
                    ids = torch.randint(0, eng.vocab_size, (1, n), generator=g)
                    with torch.no_grad():
                        want = full_attention(ref)(ids)
                        if family == "dream":
                            want = torch.cat([want[:, :1], want[:, :-1]], dim=1)
                        diffs.append((eng.model(ids) - want).abs().max().item())
                if vi:
                    continue
                runs = ([(s, st, seed, inf) for s, st in DREAM_CASES for seed in seeds for inf in (True, False)]
                        if family == "dream" else [(s, st, seed, False) for s, st in LLADA_CASES for seed in seeds])
                for settings, steps, seed, infill in runs[:4] if quick else runs:
                    want, got = (_ids_dream(eng, ref, settings, steps, seed, infill) if family == "dream"
                                 else _ids_llada(eng, ref, settings, steps, seed))
                    cases += 1
                    same += want == got
                    lengths.append(len(want))
            out[family] = {"configs": len(variants), "logit_windows": len(diffs),
                           "max_abs_logit_diff": max(diffs), "cases": cases, "tokens_identical": same,
                           "mean_fill_tokens": sum(lengths) / max(len(lengths), 1)}
            print(f"{family:<8} configs {len(variants)}  max|dlogit| {max(diffs):.2e}  ids identical "
                  f"{same}/{cases}  (mean fill {out[family]['mean_fill_tokens']:.1f} tokens)")
    return out
