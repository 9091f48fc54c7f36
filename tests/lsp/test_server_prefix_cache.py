"""The engine's prefix KV cache, as the server uses it across keystrokes: a fill served from the cache equals a
cold run (same context and seed), for a repeated context and for a context that grew by a few typed tokens."""

from __future__ import annotations

import pytest
import torch

from dg_lsp.fill.worker import SEED


@pytest.fixture(scope="module")
def make_engine(tiny_ckpt):
    from engine.engine import Engine

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # 2 shared cores: more threads only contend
    yield lambda: Engine.from_pretrained(tiny_ckpt, device="cpu")
    torch.set_num_threads(threads)


def fill(engine, prefix: str, suffix: str):
    ctx = engine.context_ids(prefix, suffix)
    return engine.infill(ctx, canvas_length=16, steps=6, seed=SEED, max_canvases=1)


PREFIX = "import os\n\ndef main(argv):\n    path = os.path.join(argv[0], 'x')\n    with open(path) as f:\n" * 3
SUFFIX = "\n\nif __name__ == '__main__':\n    main([])\n"


def test_repeated_context_reuses_the_cache_and_matches_cold(make_engine):
    warm = make_engine()
    cold_res = fill(make_engine(), PREFIX, SUFFIX)
    first = fill(warm, PREFIX, SUFFIX)
    again = fill(warm, PREFIX, SUFFIX)
    assert first.reused_prefix_tokens == 0
    assert again.reused_prefix_tokens > 0
    assert again.ids == first.ids == cold_res.ids


def test_typed_ahead_context_reuses_the_common_prefix_and_matches_cold(make_engine):
    warm = make_engine()
    fill(warm, PREFIX, SUFFIX)
    for typed in ("    ", "    data", "    data = f.read()"):
        cached = fill(warm, PREFIX + typed, SUFFIX)
        cold_res = fill(make_engine(), PREFIX + typed, SUFFIX)
        assert cached.reused_prefix_tokens > 0  # suffix-first layout: only the tail after the cursor changed
        assert cold_res.reused_prefix_tokens == 0
        assert cached.ids == cold_res.ids and cached.text == cold_res.text
