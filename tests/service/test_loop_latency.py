"""A real engine service keeps answering `/health` while it takes the largest prompts its body limit admits (1 MB of
text as a prompt, as prompt + suffix, as a chat message, and a body full of token ids): parsing, rendering and
tokenizing run off the event loop, so an editor's health check (0.5 s timeout) never gives up on a busy service.

The bound here is functional (1 s, far above the 100 ms goal, against load on a shared machine); the figure itself
is measured by `python -m bench.service_loop`."""

from __future__ import annotations

import pytest

from bench.service_loop import code_like, measure


def test_health_answers_while_1_mb_prompts_are_tokenized():
    # bench.service_loop.measure: a service on the shipped model (served with a minimal chat template), 1 MB prompts
    result = measure(chars=1_000_000, rounds=1)
    rows = {r["request"]: r for r in result["requests"]}
    assert set(rows) == {"text", "text+suffix", "chat", "ids"}  # text, prompt + suffix, a chat message, token ids
    # each prompt is far over the 32768-token limit: the service tokenizes all of it, then answers 413
    assert {r["status"] for r in rows.values()} == {413}, rows
    assert all(rows[k]["polls"] >= 3 for k in ("text", "text+suffix", "chat")), rows  # polled while busy
    assert result["health_failed"] == 0
    assert result["service_health_max_ms"] < 1000, result


def test_a_real_service_honours_stop(service):
    stops = [" ", "\n", "(", "."]
    with service.http() as c:
        r = c.post("/v1/completions", json={"prompt": "def add(a, b):\n    return", "max_tokens": 16, "stop": stops})
    assert r.status_code == 200, r.text
    text = r.json()["choices"][0]["text"]
    assert not any(s in text for s in stops), text


@pytest.fixture(scope="module")
def engine():
    from engine.engine import Engine, default_model_path

    return Engine.from_pretrained(default_model_path(), device="cpu")


@pytest.mark.parametrize("text", ["", "def f(x):\n    return x + 1\n", "a\r\nb\rc\n", "héllo wörld 日本語 🎉 ∑",
                                  "  \t  x" * 50, "x" * 5000, code_like(20_000, seed=2)])
def test_engine_encode_gives_the_tokenizers_own_ids(engine, text):
    """Engine.encode tokenizes with encode_batch_fast (other threads run meanwhile); the ids are Tokenizer.encode's."""
    assert engine.encode(text) == engine.tokenizer.encode(text, add_special_tokens=False).ids
