"""Text that is not valid Unicode (lone surrogates, which JSON can carry as `"\\ud800"` escapes or as raw bytes)
is a 400 naming the field, in every text field of both endpoints; never a 500 from the tokenizer. The fake engine
here tokenizes with the shipped checkpoint's real tokenizer, which cannot take such text."""

from __future__ import annotations

import pytest
import test_app
from service_harness import DEFAULT_MODEL
from test_app import make
from tokenizers import Tokenizer

TOK = Tokenizer.from_file(str(DEFAULT_MODEL / "tokenizer.json"))
MSG = [{"role": "user", "content": "fill it"}]


def served(tmp_path, chat: bool = False):
    client, backend, state = make(tmp_path, chat=chat)
    state.info = state.info.__class__(**{**vars(state.info),
                                         "encode": lambda t: TOK.encode(t, add_special_tokens=False).ids})
    return client, backend


# (endpoint, JSON body with a \ud800 escape, the param the error names, words of the message)
CASES = [
    ("/v1/completions", b'{"prompt": "x = \\ud800"}', "prompt", "prompt is not valid Unicode"),
    ("/v1/completions", b'{"prompt": "x = \\udc00 and more"}', "prompt", "U+DC00"),
    ("/v1/completions", b'{"prompt": "x = ", "suffix": "\\ud800\\n"}', "suffix", "suffix is not valid"),
    ("/v1/completions", b'{"prompt": [1], "stop": ["\\ud800"]}', "stop", "stop is not valid"),
    ("/v1/completions", b'{"prompt": [1], "model": "\\ud800"}', "model", "model is not valid"),
    ("/v1/completions", b'{"prompt": [1], "dg": {"client": "a\\ud800"}}', "dg.client", "dg.client is not valid"),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "x = \\ud800"}]}', "messages",
     "messages[0].content is not valid"),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": [{"type": "text", "text": "\\ud800"}]}]}',
     "messages", "messages[0].content is not valid"),
    ("/v1/chat/completions", b'{"messages": [{"role": "\\ud800", "content": "hi"}]}', "messages",
     "messages[0].role is not valid"),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "hi"}], "stop": "\\udfff"}', "stop",
     "stop is not valid"),
]


@pytest.mark.parametrize(("path", "body", "param", "words"), CASES)
def test_lone_surrogates_are_a_400_naming_the_field(tmp_path, path, body, param, words):
    client, backend = served(tmp_path, chat=True)
    r = client.post(path, content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == param and words in err["message"] and "lone surrogate" in err["message"]
    assert backend.calls == []
    ok = client.post(path, json={"prompt": "x = 1"} if "chat" not in path else {"messages": MSG})
    assert ok.status_code == 200, ok.text


def test_raw_surrogate_bytes_are_a_400_too(tmp_path):
    client, backend = served(tmp_path)
    r = client.post("/v1/completions", content=b'{"prompt": "x = \xed\xa0\x80"}',
                    headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and "lone surrogate" in r.json()["error"]["message"]
    assert backend.calls == []


def test_a_surrogate_through_chat_template_kwargs_is_a_400(tmp_path, monkeypatch):
    # a template that prints a kwarg renders the surrogate into the prompt
    monkeypatch.setattr(test_app, "CHAT_TEMPLATE", "{% for m in messages %}{{ m.content }}{% endfor %}{{ extra }}")
    client, backend = served(tmp_path, chat=True)
    r = client.post("/v1/chat/completions", content=b'{"messages": [{"role": "user", "content": "hi"}], '
                    b'"chat_template_kwargs": {"extra": "\\ud800"}}', headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "chat_template_kwargs"
    assert backend.calls == []


def test_paired_surrogates_are_text(tmp_path):
    client, backend = served(tmp_path)
    r = client.post("/v1/completions", content=b'{"prompt": "x = \\ud83c\\udf89"}',
                    headers={"Content-Type": "application/json"})
    assert r.status_code == 200, r.text
    assert backend.calls[-1] == [1, *TOK.encode("x = \U0001f389", add_special_tokens=False).ids]
