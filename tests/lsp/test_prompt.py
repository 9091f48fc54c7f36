"""Canvas: lengths follow the hole kind; budget cutting keeps suffix, imports and signatures within budget."""

from __future__ import annotations

import pytest

from dg_lsp.documents import Document
from dg_lsp.fill.holes import Hole, hole_at_cursor
from dg_lsp.fill.prompt import CHARS_PER_TOKEN, build_prompt, canvas_length_for, canvases_for
from engine.tokens import InfillFormat, train_bpe

CORPUS = [
    "import os\nimport sys\n\ndef add(a, b):\n    return a + b\n",
    "class Point:\n    def __init__(self, x, y):\n        self.x = x\n        self.y = y\n",
    "function add(a, b) {\n  return a + b;\n}\nconst xs = [1, 2, 3].map((x) => x * 2);\n",
    "# unicode: café 日本語 😀\nvalue = {'key': [1, 2.5, None, True]}\n",
]
FMT = InfillFormat()


@pytest.fixture(scope="module")
def encode():
    tok = train_bpe(CORPUS * 4, vocab_size=400)
    return lambda s: tok.encode(s).ids


def words(s: str) -> list[int]:
    """A fake tokenizer: one id per whitespace-separated word (plus one per newline)."""
    return [len(w) for w in s.replace("\n", " \n ").split(" ") if w]


def h(kind: str, replaced: str = "", max_lines: int = 1) -> Hole:
    return Hole(kind, 0, len(replaced), "", max_lines, replaced)


def test_canvas_length_follows_kind():
    lengths = (16, 32, 64)
    assert canvas_length_for(h("rest_of_line"), words, lengths) == 16
    assert canvas_length_for(h("line"), words, lengths) == 16
    assert canvas_length_for(h("bracket_expr"), words, lengths) == 16
    assert canvas_length_for(h("bracket_expr", max_lines=8), words, lengths) == 32
    assert canvas_length_for(h("statement", max_lines=8), words, lengths) == 32
    assert canvas_length_for(h("block_body", max_lines=24), words, lengths) == 64
    # selection: ~1.5x the replaced tokens + margin, rounded up to a trained length
    assert canvas_length_for(h("selection", "a " * 4), words, lengths) == 16  # 6 + 8 = 14
    assert canvas_length_for(h("selection", "a " * 10), words, lengths) == 32  # 15 + 8 = 23
    assert canvas_length_for(h("selection", "a " * 30), words, lengths) == 64  # 45 + 8 = 53
    assert canvas_length_for(h("selection", "a " * 200), words, lengths) == 64  # clamped to the largest
    assert canvases_for(h("selection", "a " * 200), words, 64) == 5  # 308 tokens -> 5 canvases
    assert canvases_for(h("rest_of_line"), words, 16) == 1


def test_canvas_length_rounds_up_to_other_trained_lengths():
    lengths = (96, 8, 24, 48)  # unsorted on purpose
    assert canvas_length_for(h("rest_of_line"), words, lengths) == 24
    assert canvas_length_for(h("statement"), words, lengths) == 48
    assert canvas_length_for(h("block_body"), words, lengths) == 96
    assert canvas_length_for(h("block_body"), words, (16,)) == 16


def big_python(n_defs: int = 300, body_lines: int = 200) -> str:
    body = "".join(f"        x{i} = compute({i}, 'abc')\n" for i in range(body_lines))
    return (
        "import os\nimport sys\nfrom typing import Any\n\n"
        + "".join(f"def g{i}(v):\n    return v + {i}\n\n" for i in range(n_defs))
        + "class Foo:\n    def method(self, a: int) -> int:\n"
        + body
        + "        y = \n"
        + body
        + "\ndef tail():\n    pass\n"
    )


def check_request(snap, hole, req, encode, budget):
    text = snap.text
    assert len(req.prefix_ids) + len(req.suffix_ids) <= budget
    assert req.prefix_ids == encode(req.prefix) and req.suffix_ids == encode(req.suffix)
    assert req.context_ids == FMT.context(req.prefix_ids, req.suffix_ids)
    assert text[: hole.start].endswith(req.prefix.splitlines(keepends=True)[-1])
    assert text[hole.end :].startswith(req.suffix)


@pytest.mark.parametrize("budget", [128, 512, 2048])
def test_budget_keeps_suffix_and_nearest_lines(encode, budget):
    text = big_python()
    snap = Document("file:///a.py", "python", 1, text).snapshot()
    hole = hole_at_cursor(snap, text.index("        y = ") + len("        y = "))
    req = build_prompt(snap, hole, encode, FMT, budget)
    check_request(snap, hole, req, encode, budget)
    assert req.suffix.startswith("\n        x0 = compute(0, 'abc')\n")  # the suffix's nearest lines
    assert req.prefix.endswith("        x199 = compute(199, 'abc')\n        y = ")
    assert len(req.suffix_ids) >= budget // 8
    assert len(req.prefix_ids) + len(req.suffix_ids) >= 0.8 * budget  # the budget is used
    # every kept line is a whole line of the file
    lines = set(text.splitlines(keepends=True))
    assert all(line in lines for line in req.prefix.splitlines(keepends=True)[:-1])


def test_budget_keeps_imports_and_signatures(encode):
    text = big_python(body_lines=10)
    snap = Document("file:///a.py", "python", 1, text).snapshot()
    hole = hole_at_cursor(snap, text.index("        y = ") + len("        y = "))
    req = build_prompt(snap, hole, encode, FMT, 1024)
    check_request(snap, hole, req, encode, 1024)
    assert req.prefix.startswith("import os\nimport sys\nfrom typing import Any\n")
    assert "class Foo:\n    def method(self, a: int) -> int:\n" in req.prefix
    assert "def g0(v)" not in req.prefix  # the middle of the file was cut, not the head


def test_signatures_survive_a_tight_budget(encode):
    text = big_python()
    snap = Document("file:///a.py", "python", 1, text).snapshot()
    hole = hole_at_cursor(snap, text.index("        y = ") + len("        y = "))
    req = build_prompt(snap, hole, encode, FMT, 200)
    assert "class Foo:\n    def method(self, a: int) -> int:\n        x19" in req.prefix


def test_small_file_is_kept_whole(encode):
    text = "import os\n\ndef f(x):\n    return x + 1\n\nprint(f(2))\n"
    snap = Document("file:///a.py", "python", 1, text).snapshot()
    hole = hole_at_cursor(snap, text.index("x + 1") + 1)
    req = build_prompt(snap, hole, encode, FMT, 1024)
    assert req.prefix == text[: hole.start] and req.suffix == text[hole.end :]
    assert req.canvas_length == 16 and req.max_canvases == 1


def test_non_ascii_and_no_grammar(encode):
    text = "# 日本語 😀 café\n" * 300 + "value = 'é😀|日'\n" * 300
    for language_id in ("python", "plaintext"):
        snap = Document("file:///x", language_id, 1, text.replace("|", "")).snapshot()
        cursor = text.index("|")
        hole = hole_at_cursor(snap, cursor)
        req = build_prompt(snap, hole, encode, FMT, 256)
        check_request(snap, hole, req, encode, 256)
        assert req.prefix.endswith("value = 'é😀") and req.suffix.startswith("日'\n")


def test_tiny_budgets_and_edges(encode):
    text = "def f():\n    return " + "x" * 500 + "\n"
    snap = Document("file:///a.py", "python", 1, text).snapshot()
    hole = hole_at_cursor(snap, len(text) - 1)
    for budget in (0, 1, 4, 16):
        req = build_prompt(snap, hole, encode, FMT, budget)
        assert len(req.prefix_ids) + len(req.suffix_ids) <= budget
    empty = Document("file:///e.py", "python", 1, "").snapshot()
    req = build_prompt(empty, hole_at_cursor(empty, 0), encode, FMT, 64)
    assert req.prefix == req.suffix == "" and req.context_ids == FMT.context([], [])


def test_only_the_kept_parts_are_tokenized(encode):
    text = big_python(n_defs=2000)  # ~5,000 lines
    snap = Document("file:///a.py", "python", 1, text).snapshot()
    hole = hole_at_cursor(snap, text.index("        y = ") + len("        y = "))
    seen: list[int] = []

    def counting(s: str) -> list[int]:
        seen.append(len(s))
        return encode(s)

    build_prompt(snap, hole, counting, FMT, 1024)
    assert max(seen) <= 1024 * CHARS_PER_TOKEN + 200
    assert len(seen) <= 10


def test_context_is_stable_while_typing_in_a_big_file(encode):
    """Suffix-first prompts let the engine reuse the KV cache up to the first changed token: typing on one
    line of a big file must leave almost the whole context unchanged from one keystroke to the next."""
    body = "".join(f"def f{i}(x):\n    y = x * {i}\n    return y + {i}\n\n" for i in range(400))
    cursor_line = "value = compute("
    typed = "alpha, beta, gamma, delta"
    reuse = []
    prev = None
    for k in range(len(typed) + 1):
        text = body[: len(body) // 2] + cursor_line + typed[:k] + "\n" + body[len(body) // 2:]
        snap = Document("file:///big.py", "python", k + 1, text).snapshot()
        offset = len(body) // 2 + len(cursor_line) + k
        req = build_prompt(snap, hole_at_cursor(snap, offset), encode, FMT, 512)
        ids = req.context_ids
        if prev is not None:
            lcp = next((i for i, (a, b) in enumerate(zip(prev, ids, strict=False)) if a != b),
                       min(len(prev), len(ids)))
            reuse.append(lcp / len(ids))
        prev = ids
    assert len(prev) > 400  # the budget is really in use
    assert sorted(reuse)[len(reuse) // 10] > 0.8  # 90% of keystrokes reuse more than 80% of the context
