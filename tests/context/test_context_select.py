"""Selection per hole and its layout: a hole that calls another module's function gets its definition in the
prompt; FIM layouts with and without file-separator tokens; the chat section; the budget."""

from __future__ import annotations

import re
from pathlib import Path

from dg_lsp.context.index import WorkspaceIndex
from dg_lsp.context.layout import Snippet, chat_related, fim_ids
from dg_lsp.context.select import Selector, neighbourhood
from dg_lsp.documents import Document
from dg_lsp.fill.holes import hole_at_cursor
from dg_lsp.fill.prompt import build_prompt
from engine.prompts.chat import user_message
from engine.seam import HoleInfo
from engine.tokens import InfillFormat


def _lines(*lines: str) -> str:
    return "\n".join(lines) + "\n"


PROJECT = {
    "shop/__init__.py": "",
    "shop/money.py": _lines('"""Money."""', "from decimal import Decimal", "", 'TAX_RATE = Decimal("0.2")', "", "",
                            "def round_cents(amount):", '    """Round to whole cents."""',
                            '    return amount.quantize(Decimal("0.01"))', "", "",
                            "def add_tax(amount, rate=TAX_RATE):", '    """The amount with tax."""',
                            "    return round_cents(amount * (1 + rate))"),
    "shop/cart.py": _lines("from dataclasses import dataclass", "", "", "@dataclass", "class Item:",
                           '    """A line of a cart."""', "    name: str", "    price: float", "    qty: int = 1", "",
                           "    def total(self):", "        return self.price * self.qty", "", "",
                           "class Cart:", '    """Items to buy."""', "    def __init__(self):",
                           "        self.items = []", "", "    def add(self, item: Item) -> None:",
                           "        self.items.append(item)"),
    "shop/checkout.py": _lines("from shop.money import add_tax", "from shop import cart as carts", "", "",
                               "def checkout(c: carts.Cart):", "    subtotal = sum(i.total() for i in c.items)",
                               "    return add_tax(subtotal)"),
    "other/noise.py": "".join(f"def noise_{i}(x):\n    return x + {i}\n\n" for i in range(40)),
}


def chars(s: str) -> list[int]:
    """A tokenizer with no file separator: one id per character."""
    return [ord(c) for c in s]


def chars_with_sep(s: str) -> list[int]:
    """The same with `<|file_sep|>` as one token (id 1)."""
    out: list[int] = []
    for i, part in enumerate(s.split("<|file_sep|>")):
        out += ([1] if i else []) + [ord(c) for c in part]
    return out


def project(tmp_path: Path) -> tuple[WorkspaceIndex, Path]:
    for rel, text in PROJECT.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    ix = WorkspaceIndex([tmp_path])
    ix.build()
    return ix, tmp_path.resolve()


def test_neighbourhood_nearest_first_and_signatures():
    text = "def outer(cfg: Config):\n    x = 1\n" + "    y = 2\n" * 20 + "    z = helper(x)\n    w = "
    names = neighbourhood(text, len(text))
    assert names.index("helper") < names.index("Config")  # near the hole first, enclosing signature last
    assert "outer" in names and "def" not in names


def test_neighbourhood_memo_matches_a_fresh_scan():
    # typing on one line, moving to another, changing the lines above: the memo never answers for stale lines
    text = "class Shop:\n    def outer(self, cfg: Config):\n" + "        y = 2\n" * 30 + "        z = helper(y)\n"
    memo: list = []
    for k in range(12):
        typed = text + "        w = total(" + "abc"[: k % 4]
        assert neighbourhood(typed, len(typed), memo) == neighbourhood(typed, len(typed))
    moved = text.replace("def outer(self, cfg: Config)", "def inner(self, opts: Options)") + "        w = "
    names = neighbourhood(moved, len(moved), memo)
    assert names == neighbourhood(moved, len(moved)) and "Options" in names and "Config" not in names
    top = "x = 1\n"
    assert neighbourhood(top, len(top), memo) == neighbourhood(top, len(top))


def test_hole_calling_another_module_gets_its_definition(tmp_path):
    ix, root = project(tmp_path)
    path = str(root / "shop/checkout.py")
    text = PROJECT["shop/checkout.py"]
    offset = text.index("add_tax(subtotal)") + len("add_tax(")
    choice = Selector(ix).select(path, text, offset, 256, chars)
    shown = {(s.path, s.text.splitlines()[0]) for s in choice.snippets}
    assert ("shop/money.py", "def add_tax(amount, rate=TAX_RATE):") in shown  # through `from shop.money import`
    assert ("shop/cart.py", "class Cart:") in shown  # through `from shop import cart as carts` + `carts.Cart`
    assert not any(s.path.startswith("other/") for s in choice.snippets)
    cart = next(s for s in choice.snippets if s.text.startswith("class Cart"))
    assert "def add(self, item: Item) -> None: ..." in cart.text and '"""Items to buy."""' in cart.text
    assert choice.tokens <= 256


def test_module_prefix_shows_its_functions_and_budget_limits(tmp_path):
    ix, root = project(tmp_path)
    text = "from shop import money\n\ndef f(x):\n    return money."
    path = str(root / "shop/new.py")
    choice = Selector(ix).select(path, text, len(text), 1024, chars)
    assert {s.text.splitlines()[0] for s in choice.snippets} >= {"def add_tax(amount, rate=TAX_RATE):",
                                                                  "def round_cents(amount):"}
    assert Selector(ix).select(path, text, len(text), 40, chars).snippets == []  # nothing fits in 40 chars
    assert Selector(ix).select(path, text, len(text), 0, chars).snippets == []


def test_similar_windows_from_open_documents(tmp_path):
    ix, root = project(tmp_path)
    other = "def parse_rows(rows, sep):\n    for row in rows:\n        cells = row.split(sep)\n        yield cells\n"
    text = "def load(rows, sep):\n    for row in rows:\n        cells = "
    choice = Selector(ix).select(str(root / "a.py"), text, len(text), 512, chars, [("/x/b.py", 1, other)])
    assert any(s.why == "similar" and "row.split(sep)" in s.text for s in choice.snippets)


SNIPS = [Snippet("b/z.py", 4, "def z(): ...", "python", "import"),
         Snippet("a/y.py", 9, "def y2(): ...", "python", "import"),
         Snippet("a/y.py", 1, "def y1(): ...", "python", "name")]


def test_fim_layout_with_and_without_file_separator():
    with_sep = fim_ids(SNIPS, "c.py", "python", chars_with_sep)
    text = "".join("|" if i == 1 else chr(i) for i in with_sep)
    assert text == "|a/y.py\ndef y1(): ...\ndef y2(): ...\n|b/z.py\ndef z(): ...\n|c.py\n"  # stable: path, line
    plain = "".join(map(chr, fim_ids(SNIPS, "c.py", "python", chars)))
    assert plain == "# a/y.py\ndef y1(): ...\ndef y2(): ...\n\n# b/z.py\ndef z(): ...\n\n# c.py\n"
    js = "".join(map(chr, fim_ids([Snippet("u.ts", 0, "function u()", "typescript", "import")], "v.ts",
                                  "typescript", chars)))
    assert js.startswith("// u.ts\n") and js.endswith("// v.ts\n")
    assert fim_ids([], "c.py", "python", chars) == []
    assert fim_ids(list(reversed(SNIPS)), "c.py", "python", chars) == fim_ids(SNIPS, "c.py", "python", chars)


def test_build_prompt_puts_context_first_within_the_budget():
    text = "import os\n\ndef f(x):\n    return y1(x)\n" * 40
    snap = Document("file:///c.py", "python", 1, text).snapshot()
    hole = hole_at_cursor(snap, len(text) - 3)
    fmt = InfillFormat()
    budget = 400
    plain = build_prompt(snap, hole, chars, fmt, budget)
    req = build_prompt(snap, hole, chars, fmt, budget, SNIPS, "c.py")
    head = fim_ids(SNIPS, "c.py", "python", chars)
    assert req.context_ids == fmt.context(head + req.prefix_ids, req.suffix_ids)
    assert len(head) + len(req.prefix_ids) + len(req.suffix_ids) <= budget
    assert req.cross_file == ("b/z.py", "a/y.py") and req.cross_file_tokens == len(head)
    assert len(req.prefix_ids) < len(plain.prefix_ids)  # the file's own text gave way


class ChatFmt:
    """A chat-named format that records the HoleInfo it gets."""

    name = "chat"
    canvas_lengths = (16, 32, 64)
    canvas_headroom = 0  # engine.seam.PromptFormat: no extra canvas tokens
    max_context_tokens = None
    seen: list[HoleInfo] = []

    def context_budget(self, requested: int) -> int:
        return requested

    def context(self, prefix_ids, suffix_ids, hole=None):
        self.seen.append(hole)
        return [*prefix_ids, 0, *suffix_ids]

    def answer(self, text, prefix="", suffix=""):
        return text


def test_chat_gets_a_related_code_section():
    snap = Document("file:///c.py", "python", 1, "x = y1(\n").snapshot()
    fmt = ChatFmt()
    req = build_prompt(snap, hole_at_cursor(snap, 7), chars, fmt, 400, SNIPS, "c.py")
    info = fmt.seen[-1]
    assert info.related == chat_related(SNIPS) == (("a/y.py", "def y1(): ...\ndef y2(): ..."),
                                                   ("b/z.py", "def z(): ..."))
    assert req.context_ids[: len(req.prefix_ids)] == req.prefix_ids  # no FIM head for chat
    msg = user_message("x = y1(", "\n", info, "```")
    assert re.search(r"Related code from other files:\n\n`a/y.py`:\n```python\ndef y1\(\): \.\.\.", msg)
    assert msg.index("Related code") < msg.index("This is the file")
    plain = HoleInfo(kind="line", language="python", filename="c.py")
    assert "Related code" not in user_message("a", "b", plain, "```")
