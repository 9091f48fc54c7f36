"""The model settings `promptFormat` and `weights`: parsed, checked, and a change of either reloads the model."""

import dataclasses
import json
import math
import re
from pathlib import Path

import pytest

from dg_lsp.config import KEYS, RULES, Settings, parse_settings


def test_prompt_format_and_weights_parse_and_need_a_reload():
    s, errors = parse_settings({"promptFormat": "chat", "weights": "int4"})
    assert errors == []
    assert (s.prompt_format, s.weights) == ("chat", "int4")
    assert s.engine_key() != Settings().engine_key()
    assert (Settings().prompt_format, Settings().weights) == ("auto", "auto")


@pytest.mark.parametrize(("key", "value"), [("promptFormat", "instruct"), ("weights", "int3"), ("weights", 4)])
def test_bad_model_settings_are_named_and_keep_their_defaults(key, value):
    s, errors = parse_settings({key: value})
    assert len(errors) == 1 and key in errors[0]
    assert s == Settings()


NEW_SETTINGS_GARBAGE = [("minConfidence", 2), ("minConfidence", "0.5"), ("minConfidence", True),
                        ("openaiDiffusion", "maybe"), ("rewriteFromSelection", "yes"), ("rewriteNoise", -0.1),
                        ("rewriteNoise", "half"), ("crossFileTokens", -1), ("crossFileTokens", 1.5),
                        ("indexMaxFiles", "all"), ("indexMaxFileBytes", None)]


@pytest.mark.parametrize(("key", "value"), NEW_SETTINGS_GARBAGE)
def test_garbage_in_this_sessions_settings_is_named_and_keeps_the_default(key, value):
    """minConfidence, openaiDiffusion, rewriteFromSelection/rewriteNoise, crossFileTokens and the index caps: a bad
    value is one error naming its key, and every setting keeps its default."""
    s, errors = parse_settings({key: value})
    assert len(errors) == 1 and key in errors[0], errors
    assert s == Settings()


# -- docs/PROTOCOL.md's settings table is the schema ------------------------------------------------------------------

def protocol_table() -> dict[str, tuple[str, str]]:
    """key -> (type column, default column) of docs/PROTOCOL.md's settings table."""
    text = (Path(__file__).resolve().parents[2] / "docs/PROTOCOL.md").read_text("utf-8")
    section = text.split("\n## Settings\n", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        if len(cells) == 4 and cells[0].startswith("`"):
            rows[cells[0].strip("`")] = (cells[1], cells[2])
    return rows


def allowed(doc: str, v) -> bool:
    """Is `v` in the range the table's type column `doc` states (read here, independently of dg_lsp.config)?
    Strings: non-empty, at most 4,096 characters; lists: at most 256 entries (the section's prose)."""
    if doc.endswith(" or null"):
        if v is None:
            return True
        doc = doc.removesuffix(" or null")
    is_num = isinstance(v, (int, float)) and not isinstance(v, bool)
    is_str = isinstance(v, str) and 0 < len(v) <= 4096
    if doc == "bool":
        return isinstance(v, bool)
    if doc == "string":
        return is_str
    if doc == "list of languageId":
        return isinstance(v, list) and len(v) <= 256 and all(isinstance(x, str) and 0 < len(x) <= 4096 for x in v)
    if m := re.fullmatch(r"int (-?\d+)\.\.(-?\d+)", doc):
        return isinstance(v, int) and not isinstance(v, bool) and int(m[1]) <= v <= int(m[2])
    if m := re.fullmatch(r"float ([\d.]+)\.\.([\d.]+)", doc):
        return is_num and float(m[1]) <= v <= float(m[2])
    if m := re.fullmatch(r"float \(([\d.]+), ([\d.]+)\]", doc):
        return is_num and float(m[1]) < v <= float(m[2])
    if re.fullmatch(r'"[^"]+"( \\\| "[^"]+")+', doc):
        return isinstance(v, str) and v in re.findall(r'"([^"]+)"', doc)
    raise AssertionError(f"the table's type {doc!r} is not one this test can read")


def test_the_code_and_the_protocol_table_agree():
    table = protocol_table()
    assert set(table) == set(KEYS)
    defaults = dataclasses.asdict(Settings())
    for key, (doc, default) in table.items():
        assert RULES[KEYS[key]].doc == doc, key
        assert json.loads(default) == defaults[KEYS[key]], key
        assert allowed(doc, json.loads(default)), key


HOSTILE = [None, True, False, 0, 1, -1, 7, 64, 256, 257, 1000, 1024, 0.5, 1.0, -0.5, 1000.5, 1e308, -1e308,
           float("nan"), float("inf"), float("-inf"), 10**30, -(10**30), "", "x", "auto", "cpu", "8", "http://h:1",
           "DG_KEY", "a" * 2_000_000,
           [], ["python"], [1], [""], ["x"] * 300, {}, {"a": 1}]
STRICTER = {"endpoint", "apiKeyEnv"}  # "string or null", with a format the prose states


@pytest.mark.parametrize("key", sorted(KEYS))
def test_every_key_walked_with_wrong_types_and_out_of_range_numbers(key):
    """Each value is accepted exactly when the table allows it (numbers finite and in range); a refused one is one
    short message naming the key, and the value in force (not the default) stays."""
    doc, _ = protocol_table()[key]
    field = KEYS[key]
    alt = next(v for v in [*re.findall(r'"([^"]+)"', doc), *HOSTILE]  # a value in force other than the default
               if allowed(doc, v) and not parse_settings({key: v})[1] and parse_settings({key: v})[0] != Settings())
    base, errors = parse_settings({key: alt})
    assert errors == []
    for v in HOSTILE:
        s, errors = parse_settings({key: v}, base)
        if not errors:
            assert allowed(doc, v), (key, v)
            got = getattr(s, field)
            assert not isinstance(got, float) or math.isfinite(got)
        else:
            assert key not in STRICTER and not allowed(doc, v) or key in STRICTER, (key, v)
            assert len(errors) == 1 and key in errors[0] and len(errors[0]) < 300, errors
            assert getattr(s, field) == getattr(base, field)


def test_unknown_keys_are_one_short_message():
    raw = {f"key{i}": i for i in range(10_000)} | {"k" * 2_000_000: "v" * 2_000_000, "steps": 3}
    s, errors = parse_settings({"settings": {"dg": raw}})
    assert s.steps == 3 and len(errors) == 1
    assert "10,001 unknown keys" in errors[0] and len(errors[0]) < 600


def test_entropy_bound_1e308_leaves_the_previous_bound():
    base, _ = parse_settings({"entropyBound": 0.5})
    s, errors = parse_settings({"settings": {"dg": {"entropyBound": 1e308}}}, base)
    assert s.entropy_bound == 0.5 and len(errors) == 1 and "entropyBound" in errors[0] and "0.5" in errors[0]
