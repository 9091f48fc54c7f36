"""Documents: incremental sync equals a from-scratch rebuild (text and tree); position encodings; clamping."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lsprotocol import types

from dg_lsp.documents import Document, DocumentStore, line_starts
from dg_lsp.documents import offset_at as _offset_at
from dg_lsp.documents import position_at as _position_at


def offset_at(text: str, line: int, character: int, encoding: str) -> int:
    return _offset_at(text, line, character, encoding, line_starts(text))


def position_at(text: str, offset: int, encoding: str) -> tuple[int, int]:
    return _position_at(text, offset, encoding, line_starts(text))

ENCODINGS = ("utf-8", "utf-16", "utf-32")
CODECS = {"utf-8": ("utf-8", 1), "utf-16": ("utf-16-le", 2), "utf-32": ("utf-32-le", 4)}

SEED_PY = 'import os\n\ndef f(x):  # café 日本語 😀\n    s = "🎉x"\n    return x + 1\n\nclass A:\n    pass\n'
SEED_JS = 'const s = "日本😀";\nfunction g(a, b) {\n  return a + b;\n}\n'


def ref_position(text: str, offset: int, encoding: str) -> tuple[int, int]:
    """Reference: encode the line head with the real codec."""
    codec, width = CODECS[encoding]
    head = text[:offset]
    line = head.count("\n")
    col = head[head.rfind("\n") + 1 :]
    return line, len(col.encode(codec)) // width


def nodes(tree) -> list[tuple]:
    out, cursor = [], tree.walk()
    while True:
        n = cursor.node
        out.append((n.type, n.start_byte, n.end_byte, n.start_point, n.end_point, n.is_missing))
        if cursor.goto_first_child():
            continue
        while not cursor.goto_next_sibling():
            if not cursor.goto_parent():
                return out


def assert_same_as_rebuild(doc: Document) -> None:
    assert doc.starts.tolist() == line_starts(doc.text).tolist()  # the line index, spliced per change
    assert doc.snapshot(0.0).offset_at(10**6, 0, "utf-16") == len(doc.text)
    fresh = Document(doc.uri, doc.language_id, doc.version, doc.text)
    mine, theirs = doc.snapshot().tree, fresh.snapshot().tree
    assert (mine is None) == (theirs is None)
    if theirs is not None:
        assert str(mine.root_node) == str(theirs.root_node)
        assert nodes(mine) == nodes(theirs)


# ---- position conversion ----


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_position_roundtrip_non_ascii(encoding):
    text = "a😀b\n日本語x\r\n\n🎉🎉\n"
    for offset in range(len(text) + 1):
        pos = position_at(text, offset, encoding)
        assert pos == ref_position(text, offset, encoding)
        if text[offset - 1 : offset] != "\r" or offset == 0:  # the "\r" of "\r\n" is not addressable
            assert offset_at(text, *pos, encoding) == offset


def test_known_columns():
    text = "x😀y\n日z"
    assert position_at(text, 3, "utf-8") == (0, 6)
    assert position_at(text, 3, "utf-16") == (0, 4)
    assert position_at(text, 3, "utf-32") == (0, 3)
    assert position_at(text, 5, "utf-8") == (1, 3)
    assert position_at(text, 5, "utf-16") == (1, 1)
    # a unit inside a character rounds down to the character's start
    assert offset_at(text, 0, 2, "utf-8") == 1
    assert offset_at(text, 0, 2, "utf-16") == 1
    assert offset_at(text, 1, 2, "utf-8") == 4


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_out_of_range_clamps(encoding):
    text = "ab\ncd😀\r\nlast"
    assert offset_at(text, 0, 99, encoding) == 2
    assert offset_at(text, 1, 99, encoding) == text.index("\r")
    assert offset_at(text, 2, 99, encoding) == len(text)
    assert offset_at(text, 50, 0, encoding) == len(text)
    assert offset_at(text, -3, -1, encoding) == 0
    assert offset_at("", 4, 4, encoding) == 0
    assert position_at(text, 10_000, encoding) == position_at(text, len(text), encoding)
    assert position_at(text, -5, encoding) == (0, 0)


# ---- incremental sync ----

PIECES = ["x", " ", "\n", "    ", "(", ")", ":", "{", "}", "=", "1", "def", "return", ",", '"', "#"]
piece_st = st.lists(st.sampled_from(PIECES + ["😀", "日本", "é"]), max_size=6).map("".join)
edit_st = st.tuples(st.floats(0, 1), st.floats(0, 1), piece_st, st.booleans())


def change(l0: int, c0: int, l1: int, c1: int, text: str) -> dict:
    rng = {"start": {"line": l0, "character": c0}, "end": {"line": l1, "character": c1}}
    return {"range": rng, "text": text}


def lsp_change(text: str, a: float, b: float, new: str, encoding: str, as_dict: bool):
    start, end = sorted((int(a * len(text)), int(b * len(text))))
    s, e = position_at(text, start, encoding), position_at(text, end, encoding)
    expected = text[:start] + new + text[end:]
    if as_dict:
        rng = {"start": {"line": s[0], "character": s[1]}, "end": {"line": e[0], "character": e[1]}}
        return {"range": rng, "text": new}, expected
    rng = types.Range(types.Position(*s), types.Position(*e))
    return types.TextDocumentContentChangePartial(range=rng, text=new), expected


@pytest.mark.parametrize("language_id,seed", [("python", SEED_PY), ("javascript", SEED_JS)])
@pytest.mark.parametrize("encoding", ENCODINGS)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(edits=st.lists(edit_st, min_size=1, max_size=8), batch=st.booleans())
def test_incremental_equals_rebuild(language_id, seed, encoding, edits, batch):
    doc = Document("file:///t", language_id, 1, seed)
    text = seed
    pending = []
    for i, (a, b, new, as_dict) in enumerate(edits):
        # Ranges in a batch refer to the text after the previous change of the same batch (LSP semantics).
        ev, text = lsp_change(text, a, b, new, encoding, as_dict)
        if batch:
            pending.append(ev)
        else:
            doc.apply_changes([ev], i + 2, encoding)
            assert doc.text == text
            assert_same_as_rebuild(doc)
    if batch:
        doc.apply_changes(pending, 99, encoding)
    assert doc.text == text
    assert_same_as_rebuild(doc)


def test_full_change_and_mixed_batch():
    doc = Document("file:///t", "python", 1, "x = 1\n")
    full = types.TextDocumentContentChangeWholeDocument(text="def 😀():\n    pass\n")
    part = change(1, 4, 1, 8, "return 2")
    doc.apply_changes([full, part], 2, "utf-16")
    assert doc.text == "def 😀():\n    return 2\n"
    assert doc.version == 2
    assert_same_as_rebuild(doc)


def test_snapshot_is_isolated_from_later_edits():
    store = DocumentStore()
    store.open("file:///a.py", "python", 1, "def f():\n    return 1\n")
    snap = store.snapshot("file:///a.py")
    before = str(snap.tree.root_node)
    store.change("file:///a.py", 2, [change(0, 0, 0, 0, "x = (\n")], "utf-16")
    assert snap.version == 1 and snap.text.startswith("def")
    assert str(snap.tree.root_node) == before and snap.tree.root_node.end_byte == len(snap.text)
    assert store.snapshot("file:///a.py").version == 2


def test_store_unknown_and_close():
    store = DocumentStore()
    assert store.get("file:///nope") is None and store.snapshot("file:///nope") is None
    store.change("file:///nope", 3, [{"text": "x"}], "utf-16")  # ignored, no raise
    store.open("file:///a.txt", "plaintext", 1, "hello")
    snap = store.snapshot("file:///a.txt")
    assert snap.language is None and snap.tree is None
    store.close("file:///a.txt")
    assert store.get("file:///a.txt") is None
    store.close("file:///a.txt")


@pytest.mark.parametrize("language_id,key", [
    ("python", "python"), ("javascriptreact", "javascript"), ("typescriptreact", "tsx"),
    ("typescript", "typescript"), ("rust", "rust"), ("go", "go"), ("java", "java"), ("c", "c"),
    ("cpp", "cpp"), ("markdown", None),
])
def test_languages(language_id, key):
    doc = Document("file:///x", language_id, 1, "x")
    assert doc.language == key
    assert (doc.snapshot().tree is not None) == (key is not None)


def test_snapshot_byte_char_offsets():
    snap = Document("file:///x", "python", 1, 's = "😀日"\nt = 1\n').snapshot()
    t_node = snap.tree.root_node.children[1]
    assert snap.text[slice(*snap.span(t_node))] == "t = 1"
    assert snap.byte_offset(snap.char_offset(t_node.start_byte)) == t_node.start_byte


def test_a_document_past_the_tree_size_cap_keeps_its_text_and_no_tree():
    line = "value = compute(a, b)  # 日本 😀\n"
    text = line * (10_000_000 // len(line.encode()))
    store = DocumentStore()
    store.open("file:///big.py", "python", 1, text)
    last = text.count("\n") - 1
    for v in range(2, 5):
        store.change("file:///big.py", v, [change(last, 3, last, 3, "Z")], "utf-16")
    snap = store.snapshot("file:///big.py")
    assert snap.tree is None and snap.language == "python"
    assert snap.text.count("Z") == 3 and snap.text.splitlines()[last].startswith("valZZZue")


# ---- the reparse: lazy, bounded, resumable ----

BIG = "".join(f"def f{i}(a, b):\n    x = [a, b, {i}]\n    return x\n\n" for i in range(3000))


def test_changes_do_not_reparse_until_a_tree_is_needed():
    doc = Document("file:///a.py", "python", 1, "def f():\n    return 1\n")
    doc.apply_changes([change(1, 11, 1, 12, "2")], 2)
    doc.apply_changes([change(1, 11, 1, 12, "3")], 3)
    stale = doc.snapshot(0.0)  # no parse: the last tree with both edits applied
    assert not stale.tree_fresh and stale.text.endswith("return 3\n")
    assert stale.tree.root_node.end_byte == len(stale.data)  # positions fit the new text
    assert doc.snapshot().tree_fresh
    assert_same_as_rebuild(doc)


def test_a_reparse_past_its_budget_resumes_where_it_stopped():
    doc = Document("file:///big.py", "python", 1, BIG)
    doc.apply_changes([change(10, 16, 10, 17, "")], 2)  # drop a "]": error recovery over the rest of the file
    rounds = 0
    while not doc.parse(0.0002):
        rounds += 1
        assert rounds < 10_000
        stale = doc.snapshot(0.0)
        assert not stale.tree_fresh and stale.tree is not None
    assert rounds >= 2  # it did take several slices
    assert doc.snapshot(0.0).tree_fresh
    assert_same_as_rebuild(doc)


def test_a_stopped_reparse_restarts_when_the_text_changed_meanwhile():
    doc = Document("file:///big.py", "python", 1, BIG)
    doc.apply_changes([change(10, 16, 10, 17, "")], 2)
    assert not doc.parse(0.0001)
    doc.apply_changes([change(20, 4, 20, 4, "y = (")], 3)  # the halted parse was of the older text
    assert not doc.snapshot(0.0).tree_fresh
    assert_same_as_rebuild(doc)  # `tree` finishes the parse, from the new text
