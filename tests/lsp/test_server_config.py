"""Settings parsing: every key, a bad value is named and the value in force stays, merging over current."""

from __future__ import annotations

import pytest
from lsprotocol import types as T
from server_harness import inline_params, open_doc, start_server, stop_server, wait_for

from dg_lsp.config import KEYS, Settings, parse_settings


def test_defaults_match_protocol_table():
    s = Settings()
    assert (s.enabled, s.model_path, s.device, s.dtype) == (True, None, "auto", "auto")
    assert (s.steps, s.entropy_bound) == (None, None)
    assert (s.debounce_ms, s.languages, s.context_tokens, s.drafts) == (75, None, 1024, False)


@pytest.mark.parametrize("raw", [
    {"settings": {"dg": {"steps": 8, "languages": ["python"]}}},
    {"dg": {"steps": 8, "languages": ["python"]}},
    {"steps": 8, "languages": ["python"]},
])
def test_wrappers_are_equivalent(raw):
    s, errors = parse_settings(raw)
    assert errors == []
    assert s.steps == 8 and s.languages == ("python",)
    assert s.language_enabled("python") and not s.language_enabled("rust")


def test_all_keys():
    raw = {"enabled": False, "modelPath": "/m", "device": "cpu", "dtype": "bfloat16", "steps": 256,
           "entropyBound": 1, "debounceMs": 0, "languages": None, "contextTokens": 64, "drafts": True}
    s, errors = parse_settings(raw)
    assert errors == []
    assert s == Settings(False, "/m", "cpu", "bfloat16", 256, 1.0, 0, None, 64, True)
    assert not s.language_enabled("python")  # disabled wins


@pytest.mark.parametrize("key,value", [
    ("steps", 0), ("steps", 257), ("steps", "8"), ("steps", True), ("device", "tpu"), ("dtype", "int8"),
    ("entropyBound", 0), ("entropyBound", -1.0), ("entropyBound", float("inf")), ("debounceMs", 5000),
    ("contextTokens", 10), ("languages", "python"), ("languages", [1]), ("drafts", "yes"), ("enabled", 1),
    ("modelPath", ""), ("modelPath", 3),
])
def test_bad_value_gives_message_and_keeps_the_value_in_force(key, value):
    base, _ = parse_settings({"debounceMs": 10, "drafts": True, "steps": 4, "entropyBound": 0.5, "device": "cpu",
                              "languages": ["go"], "modelPath": "/m", "enabled": False})
    raw = {key: value, "contextTokens": 2048} if key != "contextTokens" else {key: value}
    s, errors = parse_settings(raw, base)
    assert len(errors) == 1 and key in errors[0]
    field = KEYS[key]
    assert getattr(s, field) == getattr(base, field)  # the previous value, not the default
    if key != "contextTokens":
        assert s.context_tokens == 2048  # the good key next to it still applies


def test_unknown_key_and_non_object():
    s, errors = parse_settings({"stepz": 3})
    assert s == Settings() and len(errors) == 1 and "stepz" in errors[0]
    s, errors = parse_settings([1, 2])
    assert s == Settings() and len(errors) == 1
    assert parse_settings(None) == (Settings(), [])
    assert parse_settings({"settings": None}) == (Settings(), [])


def test_merge_keeps_current_values():
    base, _ = parse_settings({"drafts": True, "steps": 8})
    s, errors = parse_settings({"settings": {"dg": {"debounceMs": 0}}}, base)
    assert errors == [] and s.drafts and s.steps == 8 and s.debounce_ms == 0
    assert s.engine_key() == base.engine_key()
    s2, _ = parse_settings({"device": "cpu"}, s)
    assert s2.engine_key() != s.engine_key()


def test_dataclass_checks_itself():
    with pytest.raises(ValueError):
        Settings(steps=0)


# -- over the wire: initializationOptions and workspace/didChangeConfiguration ----------------------------------------

def _warnings(client, before: int) -> list[str]:
    return [m.message for m in client.messages[before:] if m.type == T.MessageType.Warning]


async def _fills_answer(client, uri: str) -> None:
    """An inline completion and a completion are answered (not -32603) on the tiny model."""
    await client.text_document_inline_completion_async(inline_params(uri, 1, 4))
    await client.text_document_completion_async(T.CompletionParams(
        text_document=T.TextDocumentIdentifier(uri=uri), position=T.Position(1, 4)))


async def test_entropy_bound_1e308_is_refused_and_fills_go_on(tiny_ckpt):
    """Issue 33 case 1: `entropyBound: 1e308` was accepted, and every later fill answered -32603 (the engine's bound
    overflowed float32). Now it is refused with one warning, and the bound in force (0.5) stays."""
    client = await start_server(tiny_ckpt, {"debounceMs": 0, "steps": 2, "entropyBound": 0.5})
    try:
        uri = "file:///bound.py"
        open_doc(client, uri, "def f(x):\n    \n")
        before = len(client.messages)
        client.workspace_did_change_configuration(T.DidChangeConfigurationParams(
            settings={"settings": {"dg": {"entropyBound": 1e308}}}))
        got = await wait_for(lambda: _warnings(client, before), timeout=20)
        assert len(got) == 1 and "entropyBound" in got[0] and "keeping 0.5" in got[0], got
        await _fills_answer(client, uri)
        client.workspace_did_change_configuration(T.DidChangeConfigurationParams(  # an editor resends every key
            settings={"settings": {"dg": {"entropyBound": 1e308, "debounceMs": 0}}}))
        await _fills_answer(client, uri)
        assert len(_warnings(client, before)) == 1  # said once: not per request, nor per resent configuration
    finally:
        await stop_server(client)


async def test_hostile_configurations_are_named_briefly_and_fills_go_on(tiny_ckpt):
    """Every key 1e308, -1e308, a huge integer, a list or an object, with 10,000 unknown keys and a 2 MB string, as
    initializationOptions and then as configuration changes: one message per refused key and one for all unknown
    keys, none echoing 2 MB, and fills go on. (NaN and Infinity are not JSON: the server's parser refuses them.)"""
    unknown = {f"key{i}": i for i in range(10_000)}
    init = {k: 1e308 for k in KEYS} | unknown | {"modelPath": "m" * 2_000_000, "debounceMs": 0}
    client = await start_server(tiny_ckpt, init)
    try:
        first = _warnings(client, 0)
        assert sum("unknown key" in m for m in first) == 1, len(first)
        assert len(first) <= len(KEYS) + 1 and all(len(m) < 600 for m in first)
        uri = "file:///hostile.py"
        open_doc(client, uri, "def f(x):\n    \n")
        await _fills_answer(client, uri)
        for n, bad in enumerate((-1e308, 10**40, [1e308], {"a": None})):
            before = len(client.messages)
            client.workspace_did_change_configuration(T.DidChangeConfigurationParams(settings={"settings": {"dg": {
                f"new{n}": 1} | {k: bad for k in KEYS} | unknown | {"endpoint": "e" * 2_000_000}}}))
            await wait_for(lambda b=before: any("unknown key" in m for m in _warnings(client, b)), timeout=30)
            got = _warnings(client, before)
            assert sum("unknown key" in m for m in got) == 1 and all(len(m) < 600 for m in got)
            await _fills_answer(client, uri)
    finally:
        await stop_server(client)
