"""The Dream family (Dream, Dream-Coder, DiffuCoder, Open-dCoder): its checkpoints load from the published layout,
its logits are transformers' Qwen2 run without a causal mask (shifted right by one), and its fills are the ids of
Dream's own sampling loop (tests/engine/family_oracles.py transcribes it) for every alg, argmax and seeded."""

from __future__ import annotations

import json

import pytest
import torch

from engine.config import ConfigError
from engine.denoising.sampler import cut_at_eos
from engine.engine import Engine
from engine.families.mask_engine import MaskEngine
from engine.families.registry import family_of
from engine.testing.families import DREAM_VARIANTS, tiny_family
from tests.engine.family_oracles import dream_sample, full_attention


@pytest.fixture(scope="module")
def dream(tmp_path_factory):
    path, ref = tiny_family(tmp_path_factory.mktemp("dream") / "Dream-tiny", "dream", "gqa_untied", seed=3)
    return Engine.from_pretrained(path, device="cpu", dtype="float32"), ref


@pytest.mark.parametrize("variant", sorted(DREAM_VARIANTS))
def test_logits_are_qwen2_without_a_causal_mask_shifted_by_one(tmp_path, variant):
    path, ref = tiny_family(tmp_path / variant, "dream", variant, seed=1)
    eng = Engine.from_pretrained(path, device="cpu", dtype="float32")
    assert isinstance(eng, MaskEngine) and eng.family.name == "dream"
    ids = torch.randint(0, eng.vocab_size, (1, 41), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        want = full_attention(ref)(ids)
        want = torch.cat([want[:, :1], want[:, :-1]], dim=1)
        got = eng.model(ids)
    assert (got - want).abs().max().item() <= 1e-5
    causal = ref(ids).logits  # what a causal load would give: must differ, or the test could not tell
    assert (torch.cat([causal[:, :1], causal[:, :-1]], dim=1) - got).abs().max().item() > 1e-3


def test_the_mask_id_comes_from_the_tokenizer_files(tmp_path):
    path, _ = tiny_family(tmp_path / "d", "dream", "mha_tied")
    tok = json.loads((path / "tokenizer.json").read_text())
    want = next(t["id"] for t in tok["added_tokens"] if t["content"] == "<|mask|>")
    assert Engine.from_pretrained(path, device="cpu").config.text.mask_token_id == want
    cfg = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps(dict(cfg, mask_token_id=want - 1)))
    with pytest.raises(ConfigError, match="mask"):
        Engine.from_pretrained(path, device="cpu")


def test_open_dcoder_qwen2_config_is_recognised_and_never_causal(tmp_path):
    path, ref = tiny_family(tmp_path / "model", "dream", "mha_tied", layout="open_dcoder")
    assert family_of(path).name == "dream"
    eng = Engine.from_pretrained(path, device="cpu", dtype="float32")
    ids = torch.randint(0, eng.vocab_size, (1, 23), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = full_attention(ref)(ids)
        assert (eng.model(ids) - torch.cat([want[:, :1], want[:, :-1]], 1)).abs().max().item() <= 1e-5
    # the same config without a mask token is a causal Qwen2: refused by name
    (path / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|endoftext|>"}))
    with pytest.raises(ConfigError, match="causal Qwen2"):
        Engine.from_pretrained(path, device="cpu")


CASES = [  # (sampler settings, steps): argmax and seeded draws for every alg
    ({"alg": "origin"}, 16), ({"alg": "origin", "temperature": 0.8, "top_p": 0.9}, 8),
    ({"alg": "maskgit_plus"}, 8), ({"alg": "maskgit_plus", "temperature": 0.7, "top_k": 20, "alg_temp": 0.5}, 8),
    ({"alg": "topk_margin"}, 6), ({"alg": "topk_margin", "temperature": 0.5}, 16),
    ({"alg": "entropy"}, 16), ({"alg": "entropy", "temperature": 0.2, "top_p": 0.95, "alg_temp": 0.3}, 5),
]


@pytest.mark.parametrize("settings,steps", CASES)
@pytest.mark.parametrize("where", ["infill", "generate"])
def test_fills_are_the_ids_of_dreams_own_loop(dream, settings, steps, where):
    eng, ref = dream
    mask = eng.config.text.mask_token_id
    prefix, suffix = eng.encode("def add(a, b):\n    return "), eng.encode("\n\nprint(add(1, 2))\n")
    context = prefix + [mask] + suffix if where == "infill" else prefix
    sampled = MaskEngine.load(eng.family, eng.path, device="cpu", dtype="float32", sampler=settings)
    for seed in (0, 7):
        window = torch.tensor([prefix + [mask] * 16 + (suffix if where == "infill" else [])])
        torch.manual_seed(seed)
        x = dream_sample(full_attention(ref), window, mask, steps, **{"eps": 1e-3, **settings})
        want = cut_at_eos(x[0, len(prefix):len(prefix) + 16].tolist(), eng.config.eos_token_ids,
                          eng.config.text.pad_token_id)[0]
        got = sampled.infill(context, canvas_length=16, steps=steps, seed=seed)
        assert got.ids == want and got.steps == steps
        assert (x == mask).sum() == 0


def test_generation_config_gives_the_defaults_and_the_setting_wins(tmp_path):
    path, _ = tiny_family(tmp_path / "d", "dream", "gqa_untied",
                          generation={"alg": "entropy", "temperature": 0.2, "top_p": 0.95, "steps": 4})
    eng = Engine.from_pretrained(path, device="cpu", sampler={"top_p": 0.5})
    s = eng.settings_in_force()
    assert (s["alg"]["value"], s["alg"]["source"]) == ("entropy", "generation_config.json")
    assert (s["top_p"]["value"], s["top_p"]["source"]) == (0.5, "setting")
    assert eng.infill(eng.context_ids("x = ", "\n"), canvas_length=16).steps == 4
    with pytest.raises(ConfigError, match="entropy_bound"):
        Engine.from_pretrained(path, device="cpu", sampler={"entropy_bound": 0.1})
    with pytest.raises(ConfigError, match="alg must be one of"):
        Engine.from_pretrained(path, device="cpu", sampler={"alg": "greedy"})


def test_another_formats_reader_plugs_in_with_hf_named_tensors_and_a_config_dict(tmp_path):
    """What a GGUF reader hands over (HF tensor names, a config.json-like dict, the mask and eos ids from its
    metadata) builds the same network as the checkpoint directory."""
    from safetensors.torch import load_file

    from engine.families import qwen2_dream
    from engine.families.checkpoint import load_dense

    path, _ = tiny_family(tmp_path / "d", "dream", "gqa8_theta")
    eng = Engine.from_pretrained(path, device="cpu", dtype="float32")
    raw = json.loads((path / "config.json").read_text())
    tensors = {k: v for f in sorted(path.glob("model-*.safetensors")) for k, v in load_file(f).items()}
    source = [(name, tuple(t.shape), lambda t=t: t) for name, t in tensors.items()]
    cfg = qwen2_dream.FAMILY.dense_config(raw, eng.config.text.mask_token_id, eng.config.eos_token_ids)
    model = load_dense(source, cfg, qwen2_dream.FAMILY.rename, torch.device("cpu"), torch.float32)
    ids = torch.randint(0, cfg.vocab_size, (1, 19), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert torch.equal(model(ids), eng.model(ids))
    with pytest.raises(ConfigError, match="missing"):
        load_dense(source[1:], cfg, qwen2_dream.FAMILY.rename, torch.device("cpu"), torch.float32)
