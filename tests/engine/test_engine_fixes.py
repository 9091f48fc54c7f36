"""Checkpoints transformers loads differently from the common case, and generation_config.json as it reads it:
each against transformers' DiffusionGemma (logits and generated ids)."""

import json

import pytest
import torch
from transformers import DiffusionGemmaForBlockDiffusion
from transformers.cache_utils import DynamicCache

from engine.config import ConfigError, load_config
from engine.engine import Engine
from engine.model.transformer import KVCache
from engine.testing.tiny import ENGINE_FIX_VARIANTS, build_tiny_checkpoint
from engine.tools.check import weights_bytes


@pytest.fixture(scope="module")
def fix_checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("fixes")
    return {name: build_tiny_checkpoint(root / name, name, canvas_length=16, seed=10 + i)
            for i, name in enumerate(ENGINE_FIX_VARIANTS)}


def _logits(eng, ref, seed=3):
    g = torch.Generator().manual_seed(seed)
    ctx = torch.randint(3, eng.vocab_size, (1, 30), generator=g)  # longer than the sliding window
    canvas = torch.randint(0, eng.vocab_size, (1, 16), generator=g)
    sc = torch.randn(1, 16, eng.vocab_size, generator=g) * 4
    with torch.no_grad():
        cache = DynamicCache(config=ref.config.get_text_config(decoder=True))
        ref.model.encoder(input_ids=ctx, cache=cache)
        want = ref(decoder_input_ids=canvas, cache=cache, self_conditioning_logits=sc).logits
    soft = eng.model.soft_embedding(torch.softmax(sc, dim=-1, dtype=torch.float32))
    return eng.model.decode(canvas, eng.model.encode(ctx, KVCache()), soft), want


def _ref_ids(ref, ctx, seed, eos):
    torch.manual_seed(seed)
    seq = ref.generate(torch.tensor([ctx]), max_new_tokens=32, max_denoising_steps=6).sequences[0, len(ctx):]
    out = []
    for t in seq.tolist():
        if t in eos:
            break
        if t != ref.config.text_config.pad_token_id:
            out.append(t)
    return out


@pytest.mark.parametrize("variant", list(ENGINE_FIX_VARIANTS))
def test_logits_and_ids_match_transformers(fix_checkpoints, variant):
    path = fix_checkpoints[variant]
    eng = Engine.from_pretrained(path, device="cpu", dtype="float32")
    ref = DiffusionGemmaForBlockDiffusion.from_pretrained(path).eval()
    got, want = _logits(eng, ref)
    assert (got - want).abs().max().item() <= 1e-5
    assert want.abs().max() > 1.0
    g = torch.Generator().manual_seed(5)
    for seed in range(2):
        ctx = torch.randint(3, eng.vocab_size, (23,), generator=g).tolist()
        want_ids = _ref_ids(ref, ctx, seed, eng.config.eos_token_ids)
        assert eng.generate_ids(ctx, max_new_tokens=32, steps=6, seed=seed, reference_compatible=True) == want_ids


def test_exact_gelu_is_not_the_tanh_approximation(fix_checkpoints):
    eng = Engine.from_pretrained(fix_checkpoints["exact_gelu"], device="cpu", dtype="float32")
    ref = DiffusionGemmaForBlockDiffusion.from_pretrained(fix_checkpoints["exact_gelu"]).eval()
    for m in eng.model.modules():
        if hasattr(m, "approximate"):
            assert m.approximate == "none"
            m.approximate = "tanh"  # what the engine computed before: the logits move
    got, want = _logits(eng, ref)
    assert (got - want).abs().max().item() > 1e-4


def test_attention_biases_give_the_encoder_its_own_and_share_the_rest(fix_checkpoints):
    eng = Engine.from_pretrained(fix_checkpoints["attention_bias"], device="cpu", dtype="float32")
    model = eng.model
    assert model.enc_layers is not None and model.enc_embed_tokens is None
    dec, enc = dict(model.layers.named_parameters()), dict(model.enc_layers.named_parameters())
    own = sorted(k for k in dec if dec[k].data_ptr() != enc[k].data_ptr())
    assert own and all(k.endswith(".bias") for k in own)
    assert all(not torch.equal(dec[k], enc[k]) for k in own)
    untied = Engine.from_pretrained(fix_checkpoints["untied"], device="cpu", dtype="float32").model
    assert untied.lm_head is not None and untied.enc_embed_tokens is not None
    tied_bytes = weights_bytes(Engine.from_pretrained(fix_checkpoints["exact_gelu"], device="cpu").model)
    assert weights_bytes(model) < 1.05 * tied_bytes < weights_bytes(untied)  # shared tensors are counted once


def test_text_level_untie_flag_loads_tied_as_transformers_does(fix_checkpoints):
    path = fix_checkpoints["text_untied_flag"]
    assert json.loads((path / "config.json").read_text())["text_config"]["tie_word_embeddings"] is False
    eng = Engine.from_pretrained(path, device="cpu")
    assert eng.model.lm_head is None and eng.model.enc_layers is None


def test_eos_from_generation_config_stops_where_transformers_stops(tmp_path):
    path = build_tiny_checkpoint(tmp_path / "eos", "mixed", canvas_length=16, seed=3)
    ctx, seed = list(range(5, 30)), 1
    ref = DiffusionGemmaForBlockDiffusion.from_pretrained(path).eval()
    free = _ref_ids(ref, ctx, seed, (1,))
    stop_id = free[3]  # an id the model emits, after three others
    assert stop_id not in free[:3]
    gen_file = path / "generation_config.json"
    gen_file.write_text(json.dumps(dict(json.loads(gen_file.read_text()), eos_token_id=[1, stop_id])))
    eng = Engine.from_pretrained(path, device="cpu")
    ref = DiffusionGemmaForBlockDiffusion.from_pretrained(path).eval()
    assert eng.config.eos_token_ids == (1, stop_id)
    assert eng.settings_in_force()["eos_token_ids"] == {"value": [1, stop_id], "source": "generation_config.json"}
    want = _ref_ids(ref, ctx, seed, (1, stop_id))
    assert want == free[:3]
    assert eng.generate_ids(ctx, max_new_tokens=32, steps=6, seed=seed, reference_compatible=True) == want
    assert eng.infill(ctx, canvas_length=16, steps=6, seed=seed, max_canvases=2, reference_compatible=True).ids == want


def test_settings_override_the_generation_config(tmp_path):
    path = build_tiny_checkpoint(tmp_path / "gen", "mixed", canvas_length=16, generation={
        "max_denoising_steps": 7, "t_min": 0.2, "sampler_config": {"_cls_name": "EntropyBoundSamplerConfig",
                                                                   "entropy_bound": 0.3}})
    eng = Engine.from_pretrained(path, device="cpu")
    force = eng.settings_in_force()
    assert force["steps"] == {"value": 7, "source": "generation_config.json"}
    assert force["entropy_bound"] == {"value": 0.3, "source": "generation_config.json"}
    assert force["t_max"] == {"value": 0.8, "source": "default"}
    assert force["eos_token_ids"]["source"] == "config.json"
    given = load_config(path, {"steps": 3, "entropy_bound": None}).settings_in_force()  # None: not set
    assert given["steps"] == {"value": 3, "source": "setting"}
    assert given["entropy_bound"] == {"value": 0.3, "source": "generation_config.json"}
    tuned = Engine.from_pretrained(path, device="cpu", sampler={"steps": 2, "t_max": 0.9})
    assert tuned.settings_in_force()["steps"] == {"value": 2, "source": "setting"}
    assert tuned.settings_in_force()["t_min"] == {"value": 0.2, "source": "generation_config.json"}
    never = dict(stability_threshold=0, confidence_threshold=1e-12)  # no early stop: all steps run
    assert Engine.from_pretrained(path, device="cpu").infill([2, 5, 9], canvas_length=16).steps <= 7
    assert Engine.from_pretrained(path, device="cpu", sampler={"steps": 2, **never}).infill(
        [2, 5, 9], canvas_length=16).steps == 2
    with pytest.raises(ConfigError, match="unknown sampler settings"):
        Engine.from_pretrained(path, device="cpu", sampler={"temperature": 1.0})


@pytest.mark.parametrize("body, match", [
    ({"sampler_config": {"_cls_name": "TopKSamplerConfig"}}, "not supported"),
    ({"max_denoising_steps": 2.5}, "integer"),
    ({"t_min": 0.9, "t_max": 0.5}, "t_min"),
    ({"eos_token_id": "<eos>"}, "eos_token_id"),
])
def test_bad_generation_config_is_a_clear_error(tmp_path, body, match):
    path = build_tiny_checkpoint(tmp_path / "bad", "mixed", canvas_length=16, generation=body)
    with pytest.raises(ConfigError, match=match):
        Engine.from_pretrained(path, device="cpu")
