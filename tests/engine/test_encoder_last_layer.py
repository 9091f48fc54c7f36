"""The encoder stops at the last layer's keys and values: that layer's attention, MLP and MoE feed nothing the
cache holds, so they are not run, and every layer's K/V are still transformers' (which runs the whole stack)."""

import torch
from transformers import DiffusionGemmaForBlockDiffusion
from transformers.cache_utils import DynamicCache

from engine.engine import Engine
from engine.model.kv_cache import KVCache


def test_encoder_skips_the_last_layer_body_and_keeps_every_layers_kv(tiny_mixed):
    eng = Engine.from_pretrained(tiny_mixed, device="cpu")
    ref = DiffusionGemmaForBlockDiffusion.from_pretrained(tiny_mixed).eval()
    m = eng.model
    calls = []
    for i, layer in enumerate(m.layers):
        layer.register_forward_hook(lambda mod, args, out, i=i: calls.append(i))
    ids = torch.randint(3, eng.vocab_size, (1, 29), generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        cache = m.encode(ids, KVCache())
        want = DynamicCache(config=ref.config.get_text_config(decoder=True))
        ref.model.encoder(input_ids=ids, cache=want)
    assert calls == list(range(len(m.layers) - 1))
    assert len(cache.keys) == len(m.layers) == len(want.layers)
    for i, layer in enumerate(want.layers):
        n = layer.keys.shape[2]  # sliding layers: the reference keeps its last window - 1 tokens
        assert torch.equal(cache.keys[i][:, :, -n:], layer.keys)
        assert torch.equal(cache.values[i][:, :, -n:], layer.values)
