"""OpenAI `stop` on the engine service: the answer ends before the first match of any stop string (final text and
finish_reason "stop", plain and streamed, completions and chat); streamed drafts never show what the final answer
cuts; a malformed `stop` is a 400. The fake engine answers "filled:<context length>"."""

from __future__ import annotations

import pytest
from test_app import make, sse

from engine.service.stop import cut, visible


@pytest.mark.parametrize(("text", "stops", "want"), [
    ("a = 1\ndef f():", ["\ndef"], ("a = 1", True)),
    ("abc", ["x", "b", "c"], ("a", True)),  # the earliest match of any, not the first listed
    ("abcabc", ["bc"], ("a", True)),
    ("abc", ["abc"], ("", True)),
    ("abc", ["abcd"], ("abc", False)),
    ("abc", [], ("abc", False)),
    ("héllo 🎉 wörld", ["🎉"], ("héllo ", True)),
])
def test_cut_golden_cases(text, stops, want):
    assert cut(text, stops) == want


@pytest.mark.parametrize(("text", "stops", "want"), [
    ("x = 1\nde", ["\ndef"], "x = 1"),  # could still become "\ndef": held back
    ("x = 1\nd", ["\ndef"], "x = 1"),
    ("x = 1\n", ["\ndef"], "x = 1"),
    ("x = 1\ndx", ["\ndef"], "x = 1\ndx"),  # can no longer become one
    ("x = 1\ndef y", ["\ndef"], "x = 1"),  # a full match: cut
    ("aaab", ["aab"], "a"),
    ("aaaa", ["aab"], "aa"),  # the longest tail that starts a stop string
    ("ab", ["x", "bz", "abq"], ""),
    ("abc", [], "abc"),
])
def test_visible_holds_back_a_possible_stop_string(text, stops, want):
    assert visible(text, stops) == want


def test_stop_cuts_the_completion_and_finishes_with_stop(tmp_path):
    client, _, _ = make(tmp_path)
    r = client.post("/v1/completions", json={"prompt": [3, 4], "stop": ":"})
    choice = r.json()["choices"][0]
    assert r.status_code == 200 and choice["text"] == "filled" and choice["finish_reason"] == "stop"
    assert r.json()["usage"]["completion_tokens"] == len("filled")  # the fake: one token per character
    r = client.post("/v1/completions", json={"prompt": [3, 4], "stop": ["zz", "led", "ill"]})
    assert r.json()["choices"][0]["text"] == "f"
    r = client.post("/v1/completions", json={"prompt": [3, 4], "stop": ["zz"]})
    assert r.json()["choices"][0]["text"] == "filled:2"


def test_a_stop_string_past_the_max_tokens_cut_does_not_count(tmp_path):
    client, _, _ = make(tmp_path)
    r = client.post("/v1/completions", json={"prompt": [3, 4], "max_tokens": 4, "stop": "led"})
    choice = r.json()["choices"][0]
    assert choice["text"] == "fill" and choice["finish_reason"] == "length"


def test_streamed_answers_and_drafts_stop_too(tmp_path):
    client, _, _ = make(tmp_path)
    r = client.post("/v1/completions", json={"prompt": [3, 4], "stream": True, "stop": ["ill"],
                                             "dg": {"drafts": True}})
    events = sse(r.text)
    assert events[-1] == "[DONE]"
    # the fake's drafts are "f", "fi", "fil": "i" and "il" could grow into "ill", so they are held back
    assert [e["dg"]["draft"] for e in events[:-2]] == ["f", "f", "f"]
    final = events[-2]["choices"][0]
    assert final["text"] == "f" and final["finish_reason"] == "stop"
    assert "".join(e["choices"][0]["text"] for e in events[:-1]) == "f"


def test_chat_completions_honour_stop(tmp_path):
    client, _, _ = make(tmp_path, chat=True)
    msgs = [{"role": "user", "content": "fill it"}]
    r = client.post("/v1/chat/completions", json={"messages": msgs, "stop": [":"]})
    choice = r.json()["choices"][0]
    assert r.status_code == 200 and choice["message"]["content"] == "filled" and choice["finish_reason"] == "stop"
    events = sse(client.post("/v1/chat/completions", json={"messages": msgs, "stop": ":", "stream": True}).text)
    assert "".join(e["choices"][0]["delta"].get("content", "") for e in events[:-1]) == "filled"
    assert events[-2]["choices"][0]["finish_reason"] == "stop"


def test_null_and_empty_list_mean_no_stop(tmp_path):
    client, _, _ = make(tmp_path)
    for stop in (None, []):
        r = client.post("/v1/completions", json={"prompt": [3, 4], "stop": stop})
        assert r.json()["choices"][0]["text"] == "filled:2"


@pytest.mark.parametrize("stop", [7, "", ["a", ""], ["a", 1], ["a", "b", "c", "d", "e"], {"s": "a"}, "x" * 1025,
                                  True])
def test_a_malformed_stop_is_a_400_and_nothing_runs(tmp_path, stop):
    client, backend, _ = make(tmp_path)
    r = client.post("/v1/completions", json={"prompt": [3, 4], "stop": stop})
    assert r.status_code == 400 and r.json()["error"]["param"] == "stop"
    assert "stop must be a string or a list of at most 4" in r.json()["error"]["message"]
    assert backend.calls == []
