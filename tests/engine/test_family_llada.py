"""The LLaDA family: its checkpoints load from the published OLMo-style layout, its logits are transformers' Llama
run without a causal mask (names mapped, not shifted), and its fills are the ids of LLaDA's own `generate`
(tests/engine/family_oracles.py transcribes it): low_confidence and random remasking, blocks, float64 Gumbel."""

from __future__ import annotations

import json

import pytest
import torch

from engine.config import ConfigError
from engine.denoising.sampler import cut_at_eos
from engine.engine import Engine
from engine.families.mask_engine import MaskEngine
from engine.testing.families import LLADA_VARIANTS, tiny_family
from tests.engine.family_oracles import full_attention, llada_generate


@pytest.fixture(scope="module")
def llada(tmp_path_factory):
    path, ref = tiny_family(tmp_path_factory.mktemp("llada") / "LLaDA-tiny", "llada", "mha", seed=5)
    return Engine.from_pretrained(path, device="cpu", dtype="float32"), ref


@pytest.mark.parametrize("variant", sorted(LLADA_VARIANTS))
def test_logits_are_llama_without_a_causal_mask(tmp_path, variant):
    path, ref = tiny_family(tmp_path / variant, "llada", variant, seed=2)
    eng = Engine.from_pretrained(path, device="cpu", dtype="float32")
    assert isinstance(eng, MaskEngine) and eng.family.name == "llada"
    ids = torch.randint(0, eng.vocab_size, (1, 37), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        got, want = eng.model(ids), full_attention(ref)(ids)
    assert (got - want).abs().max().item() <= 1e-5
    assert (ref(ids).logits - got).abs().max().item() > 1e-3  # a causal forward would be told apart


CASES = [  # (sampler settings, steps, canvas)
    ({}, 16, 16), ({"block_length": 8}, 8, 16), ({"remasking": "random"}, 8, 16),
    ({"temperature": 0.7}, 16, 16), ({"temperature": 0.5, "block_length": 4, "remasking": "random"}, 8, 16),
    ({"temperature": 1.0, "block_length": 16}, 4, 32),
]


@pytest.mark.parametrize("settings,steps,canvas", CASES)
def test_fills_are_the_ids_of_lladas_own_generate(llada, settings, steps, canvas):
    eng, ref = llada
    mask = eng.config.text.mask_token_id
    prompt = eng.encode("def add(a, b):\n    return ")
    sampled = MaskEngine.load(eng.family, eng.path, device="cpu", dtype="float32", sampler=settings)
    for seed in (0, 3):
        torch.manual_seed(seed)
        x = llada_generate(full_attention(ref), torch.tensor([prompt]), steps=steps, gen_length=canvas,
                           block_length=settings.get("block_length", canvas), mask_id=mask,
                           temperature=settings.get("temperature", 0.0),
                           remasking=settings.get("remasking", "low_confidence"))
        want = cut_at_eos(x[0, len(prompt):].tolist(), eng.config.eos_token_ids, eng.config.text.pad_token_id)[0]
        got = sampled.infill(prompt, canvas_length=canvas, steps=steps, seed=seed)
        assert got.ids == want and got.steps == steps


def test_infill_fills_only_the_hole_block_by_block(llada):
    eng, _ = llada
    mask = eng.config.text.mask_token_id
    prefix, suffix = eng.encode("x = "), eng.encode("\nprint(x)\n")
    seen = []
    res = MaskEngine.load(eng.family, eng.path, device="cpu", sampler={"block_length": 8}).infill(
        prefix + [mask] + suffix, canvas_length=16, steps=16, on_step=lambda d: seen.append(len(d.ids)))
    assert res.steps == 16 == len(seen) and not res.cancelled and mask not in res.ids
    assert res.confidence is not None and 0 < res.confidence <= 1


def test_what_llada_cannot_do_is_refused_by_name(tmp_path, llada):
    eng, _ = llada
    with pytest.raises(ConfigError, match="block_length 5 must divide"):
        MaskEngine.load(eng.family, eng.path, device="cpu", sampler={"block_length": 5}).infill([3],
                                                                                                 canvas_length=16)
    with pytest.raises(ValueError, match="no entropy bound"):
        eng.infill([3], canvas_length=16, entropy_bound=0.1)
    with pytest.raises(ValueError, match="does not support weights 'int4'"):
        Engine.from_pretrained(eng.path, device="cpu", weights="int4")
    with pytest.raises(ValueError, match="does not support prompt format 'chat'"):
        Engine.from_pretrained(eng.path, device="cpu", prompt_format="chat")
    path, _ = tiny_family(tmp_path / "alibi", "llada", "mha")
    cfg = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps(dict(cfg, alibi=True)))
    with pytest.raises(ConfigError, match="alibi"):
        Engine.from_pretrained(path, device="cpu")
