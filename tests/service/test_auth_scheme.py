"""The API key check: the Bearer scheme is case-insensitive (RFC 9110 section 11.1), so `bearer KEY` and `BEARER
KEY` are let in like `Bearer KEY`; anything else without the key is still 401 and never queued."""

from __future__ import annotations

import pytest
from test_app import KEY, make

from engine.service.app import bearer_token


@pytest.mark.parametrize("header", [f"Bearer {KEY}", f"bearer {KEY}", f"BEARER {KEY}", f"BeArEr {KEY}",
                                    f"Bearer   {KEY}", f" bearer {KEY} "])
def test_any_case_of_the_bearer_scheme_is_accepted(tmp_path, header):
    client, backend, _ = make(tmp_path, key=KEY)
    assert client.get("/health", headers={"Authorization": header}).status_code == 200
    r = client.post("/v1/completions", json={"prompt": [3]}, headers={"Authorization": header})
    assert r.status_code == 200 and r.json()["choices"][0]["text"] == "filled:1"


@pytest.mark.parametrize("header", ["", KEY, f"Basic {KEY}", f"bearer{KEY}", f"Bearer {KEY.upper()}",
                                    f"bearer {KEY}x", "bearer", "bearer ", f"Token {KEY}", f"{KEY} bearer"])
def test_without_the_key_it_is_still_401_and_nothing_is_queued(tmp_path, header):
    client, backend, state = make(tmp_path, key=KEY)
    r = client.post("/v1/completions", json={"prompt": [3]}, headers={"Authorization": header})
    assert r.status_code == 401 and r.json()["error"]["type"] == "AuthenticationError"
    assert r.headers["WWW-Authenticate"] == "Bearer"
    assert backend.calls == [] and state.scheduler.stats()["requests"]["done"] == 0


def test_bearer_token_reads_the_credentials():
    assert bearer_token(b"Bearer abc") == b"abc"
    assert bearer_token(b"bEaReR  abc") == b"abc"
    assert bearer_token(b"Basic abc") == b""
    assert bearer_token(b"abc") == b""
    assert bearer_token(b"") == b""
