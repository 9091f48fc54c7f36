"""Walking up a tree-sitter tree (issue 21): `Node.parent` walks down from the root on every call, so following it
from a node nested d deep costs d² steps. A long base64 line in Rust (`Zm9v+/=` repeated) is a binary expression
nested thousands deep: the hole finder, the prompt's enclosing definitions and the syntax window each followed
`parent` up from the cursor and took seconds per request. They now take the chain from `holes.ancestors` (one walk
down); these tests pin that it is the chain `parent` gives, and that the deep document goes through the fill path."""

from __future__ import annotations

import pytest

from dg_lsp.documents import Document
from dg_lsp.fill.cache import MemoEncoder
from dg_lsp.fill.holes import ancestors, hole_at_cursor
from dg_lsp.fill.prompt import build_prompt
from dg_lsp.fill.syntax import prepare_check
from engine.tokens import InfillFormat

SOURCES = {
    "python": "def f(a):\n    if a:\n        return [a, (1 + 2) * 3, {'k': a}]\n    x = \nclass C:\n    y: int = (\n",
    "rust": "fn f(a: i32) -> i32 {\n    let v = vec![a, (1 + 2) * 3];\n    match a { 1 => {} _ => }\n}\nimpl S {",
    "javascript": "function f(a) {\n  return [a, (1 + 2) * 3, {k: a}];\n}\nconst o = { a: `${x}`, b: (",
    "cpp": "template <typename T>\nT f(T a) {\n    return a + (1 * 2);\n}\nnamespace n { class A : B {",
}


def parent_chain(node):
    out = []
    while node is not None:
        out.append(node)
        node = node.parent
    return out


@pytest.mark.parametrize("language", sorted(SOURCES))
def test_ancestors_is_the_chain_node_parent_gives(language):
    text = SOURCES[language] * 3
    doc = Document("file:///deep", language, 1, text)
    root = doc.snapshot().tree.root_node
    data = text.encode()
    for start in range(len(data) + 1):
        for end in (start, min(start + 1, len(data)), min(start + 7, len(data))):
            node = root.descendant_for_byte_range(start, end)
            assert ancestors(root, node) == parent_chain(node), (start, end)


def test_a_binary_expression_nested_thousands_deep_goes_through_the_fill_path():
    text = "use std::io;\nx(" + "Zm9v+/=" * 3_000 + ")\n"  # an error node over a left-nested binary expression
    snap = Document("file:///deep.rs", "rust", 1, text).snapshot()
    cursor = text.index("Zm9v") + 700
    leaf = snap.tree.root_node.descendant_for_byte_range(cursor, cursor + 1)
    assert len(ancestors(snap.tree.root_node, leaf)) > 1_000  # as deep as the test means
    hole = hole_at_cursor(snap, cursor)
    assert hole.start == cursor
    prompt = build_prompt(snap, hole, MemoEncoder(lambda s: [7] * (len(s) // 4 + 1)), InfillFormat(), 256)
    assert prompt.prefix.endswith(text[:cursor][-20:])
    assert prepare_check(snap, hole) is not None
