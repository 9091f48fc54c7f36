"""The shipped default model: size budget, loads in transformers and in our engine with matching logits."""

import json
from pathlib import Path

import pytest
import torch

DEFAULT = Path(__file__).resolve().parents[2] / "engine" / "default_model"
pytestmark = pytest.mark.skipif(not (DEFAULT / "model.safetensors").exists(), reason="no default model exported")

PREFIX = "def mean(xs):\n    total = sum(xs)\n    return "
SUFFIX = "\n\n\nprint(mean([1, 2, 3]))\n"


def test_files_and_size():
    names = {p.name for p in DEFAULT.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "infill.json", "generation_config.json"} <= names
    assert sum(p.stat().st_size for p in DEFAULT.iterdir()) <= 40 * 1024 * 1024
    cfg = json.loads((DEFAULT / "config.json").read_text())
    assert cfg["vision_config"]["hidden_size"] <= 64  # a tiny vision sub-config, not the 167M default tower
    assert json.loads((DEFAULT / "infill.json").read_text())["layout"] == "suffix_first"


def test_transformers_and_engine_logits_match():
    from tokenizers import Tokenizer
    from transformers import DiffusionGemmaForBlockDiffusion
    from transformers.cache_utils import DynamicCache

    from engine.tokens import InfillFormat

    tok = Tokenizer.from_file(str(DEFAULT / "tokenizer.json"))
    fmt = InfillFormat.load(DEFAULT, tok)
    ctx = torch.tensor([fmt.context(tok.encode(PREFIX).ids, tok.encode(SUFFIX).ids)])
    ref = DiffusionGemmaForBlockDiffusion.from_pretrained(DEFAULT).eval()
    v = ref.config.text_config.vocab_size
    canvas = torch.randint(0, v, (1, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        cache = DynamicCache(config=ref.config.get_text_config(decoder=True))
        ref.model.encoder(input_ids=ctx, cache=cache)
        want = ref(decoder_input_ids=canvas, cache=cache).logits
        ref.config.canvas_length = 16
        torch.manual_seed(0)
        out = ref.generate(ctx, max_new_tokens=16)
    assert out.sequences.shape == (1, ctx.shape[1] + 16)
    try:
        from engine.engine import Engine
        from engine.model.transformer import KVCache
    except ImportError:
        pytest.skip("engine not available")
    eng = Engine.from_pretrained(DEFAULT, device="cpu", dtype="float32")
    got = eng.model.decode(canvas, eng.model.encode(ctx, KVCache()), None)
    assert (got - want).abs().max().item() <= 1e-3
    assert want.abs().max() > 1.0
    res = eng.infill(ctx[0].tolist(), canvas_length=16, seed=0)
    assert isinstance(res.text, str)
