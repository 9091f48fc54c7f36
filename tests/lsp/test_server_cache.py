"""The fill caches: LRU eviction, typed-ahead reuse and the tokenizer memo (pure functions, no server)."""

from __future__ import annotations

import functools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dg_lsp.fill.cache import LRU, MemoEncoder, Shown, fill_key, typed_ahead
from engine.tokens import splits_before_newline


def test_lru_evicts_least_recently_used():
    c: LRU[str] = LRU(2)
    c.put("a", "1")
    c.put("b", "2")
    assert c.get("a") == "1"  # a is now the most recent
    c.put("c", "3")
    assert c.get("b") is None and c.get("a") == "1" and c.get("c") == "3"
    assert (c.hits, c.misses, len(c)) == (3, 1, 2)
    with pytest.raises(ValueError):
        LRU(0)


def test_fill_key_covers_sampling_inputs():
    k = fill_key([1, 2, 3], 16, None, None, 0)
    assert k == fill_key([1, 2, 3], 16, None, None, 0)
    assert len({k, fill_key([1, 2, 4], 16, None, None, 0), fill_key([1, 2, 3], 32, None, None, 0),
                fill_key([1, 2, 3], 16, 8, None, 0), fill_key([1, 2, 3], 16, None, 0.5, 0),
                fill_key([1, 2, 3], 16, None, None, 1)}) == 6


TEXT = "def f(x):\n    return \n\nprint(f(2))\n"
CUR = TEXT.index("return ") + len("return ")


def shown(fill: str = "x * 2") -> Shown:
    return Shown(TEXT, CUR, fill, CUR)


@pytest.mark.parametrize("typed,rest", [("", "x * 2"), ("x", " * 2"), ("x * ", "2"), ("x * 2", "")])
def test_typed_ahead_returns_the_rest(typed, rest):
    text = TEXT[:CUR] + typed + TEXT[CUR:]
    assert typed_ahead(shown(), text, CUR + len(typed)) == rest


@pytest.mark.parametrize("text,cursor", [
    (TEXT[:CUR] + "y" + TEXT[CUR:], CUR + 1),             # typed something else
    (TEXT[:CUR] + "x" + TEXT[CUR:], CUR),                 # cursor not after the typed text
    (TEXT[:CUR - 1] + TEXT[CUR:], CUR - 1),               # deleted a character
    ("#" + TEXT[:CUR] + "x" + TEXT[CUR:], CUR + 2),       # edited elsewhere before the cursor
    (TEXT[:CUR] + "x" + TEXT[CUR:] + "#", CUR + 1),       # edited elsewhere after the cursor
    (TEXT[:CUR] + "x * 2 " + TEXT[CUR:], CUR + 6),        # typed past the fill
])
def test_typed_ahead_rejects_other_edits(text, cursor):
    assert typed_ahead(shown(), text, cursor) is None


def test_memo_encoder_repeats_are_free_and_copies():
    calls = []

    def encode(text: str) -> list[int]:
        calls.append(text)
        return [ord(c) for c in text]

    enc = MemoEncoder(encode, capacity=2)
    first = enc("ab")
    first.append(0)  # callers may mutate what they get
    assert enc("ab") == [97, 98] and calls == ["ab"]
    enc("c")
    enc("d")
    assert enc("ab") == [97, 98] and calls == ["ab", "c", "d", "ab"]


# ---- tokenizing a prompt in two parts at a newline -------------------------------------------------------------

_ALPHABET = "ab_Z09 \t\n\r():'\"#.,+-=\\\u00e9\u65e5\U0001f600<>/"


@functools.cache
def _tokenizers() -> dict:
    from tokenizers import Tokenizer

    from engine.engine import default_model_path
    from engine.testing.tiny import tiny_tokenizer

    out = {"tiny": tiny_tokenizer()}
    shipped = default_model_path() / "tokenizer.json"
    if shipped.is_file():
        out["shipped"] = Tokenizer.from_file(str(shipped))
    return out


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(alphabet=_ALPHABET, max_size=30), min_size=1, max_size=6),
       st.sampled_from(["", "<eos>", "<fim_suffix>"]))
def test_split_tokenizing_equals_one_call(lines, special):
    """MemoEncoder with split_before_newline gives exactly the ids of one encode call, for every text (memo hits
    and misses alike), with the tokenizers for which engine.tokens.splits_before_newline holds."""
    text = special.join(lines[:1]) + "\n".join(lines)
    for name, tok in _tokenizers().items():
        assert splits_before_newline(tok), name
        encode = lambda t, tok=tok: tok.encode(t, add_special_tokens=False).ids  # noqa: E731
        memo = MemoEncoder(encode, split_before_newline=True)
        for prefix in (text, text[: len(text) // 2], text + "x"):  # misses, then a hit on the head
            assert memo(prefix) == encode(prefix), (name, prefix)


def test_split_tokenizing_of_a_typed_line_reuses_the_head():
    calls: list[str] = []
    tok = _tokenizers()["tiny"]

    def encode(t: str) -> list[int]:
        calls.append(t)
        return tok.encode(t, add_special_tokens=False).ids

    memo = MemoEncoder(encode, split_before_newline=True)
    head = "def f(a):\n    return a\n\nx = f(1)"
    memo(head + "\nprint(x")
    calls.clear()
    assert memo(head + "\nprint(x)") == encode(head + "\nprint(x)")
    assert calls[0] == "\nprint(x)"  # only the typed line was tokenized


def test_splits_before_newline_only_for_gpt2_style_byte_level_bpe():
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

    tok = _tokenizers()["tiny"]
    assert splits_before_newline(tok)
    spaced = Tokenizer.from_str(tok.to_str())
    spaced.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    assert not splits_before_newline(spaced)
    meta = Tokenizer(models.BPE())
    meta.pre_tokenizer = pre_tokenizers.Metaspace()
    assert not splits_before_newline(meta)
    normalized = Tokenizer.from_str(tok.to_str())
    normalized.normalizer = normalizers.NFKC()
    assert not splits_before_newline(normalized)
