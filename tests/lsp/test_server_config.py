"""Settings parsing: every key, bad values fall back to the default with a message, merging over current."""

from __future__ import annotations

import pytest

from dg_lsp.config import Settings, parse_settings


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
def test_bad_value_gives_message_and_default(key, value):
    base, _ = parse_settings({"debounceMs": 10, "drafts": True, "steps": 4})
    raw = {key: value, "contextTokens": 2048} if key != "contextTokens" else {key: value}
    s, errors = parse_settings(raw, base)
    assert len(errors) == 1 and key in errors[0]
    default = Settings()
    field = {"entropyBound": "entropy_bound", "debounceMs": "debounce_ms", "contextTokens": "context_tokens",
             "modelPath": "model_path"}.get(key, key)
    assert getattr(s, field) == getattr(default, field)
    if key != "contextTokens":
        assert s.context_tokens == 2048  # the good key next to it still applies


def test_unknown_key_and_non_object():
    s, errors = parse_settings({"stepz": 3})
    assert s == Settings() and "stepz" in errors[0]
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
