"""The fill caches: LRU eviction and typed-ahead reuse (pure functions, no server)."""

from __future__ import annotations

import pytest

from dg_lsp.cache import LRU, MemoEncoder, Shown, fill_key, typed_ahead


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
