"""bench.next_edit's tasks and scoring, without a server: tasks mined from a small file are the edits a reader
expects; the held-out task set has the size and mix the issue asks for and replays through the server's own
document code to the state the task says; answers are applied in UTF-16 columns and judged as the docs say."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pytest

from bench.next_edit_mine import Source
from bench.next_edit_score import apply_edits, contract_errors, score
from bench.next_edit_tasks import build_tasks, param_tasks, pattern_tasks, rename_tasks
from dg_lsp.documents import Document

CODE = '''\
def area(width, height):
    w = width * 2
    return w * height


def report(out, rows):
    total = 0
    out.write("head", mode="fast", level=1)
    out.write("body", mode="fast", level=2)
    out.write("tail", mode="fast", level=3)
    return total


def outer(items):
    size = len(items)

    def show(x):
        return x

    show(items)
    return show(items[0])
'''


@pytest.fixture
def src(tmp_path: Path) -> Source:
    (tmp_path / "m.py").write_text(CODE)
    return Source.read("m.py", tmp_path / "m.py")


def built(cands, kind: str, sub: str):
    return [c.build() for c in cands if (c.kind, c.subkind) == (kind, sub)]


def test_rename_renames_the_other_occurrences_and_its_done_twin_needs_nothing(src):
    cands = rename_tasks(src, random.Random(0))
    ren = {t.meta["old"]: t for t in built(cands, "rename", "local")}
    t = ren["w"]
    new = t.meta["new"]
    assert f"    {new} = width * 2\n    return w * height\n" in t.after
    assert f"    {new} = width * 2\n    return {new} * height\n" in t.expected
    done = next(d for d in built(cands, "no_edit", "rename_done") if d.meta["old"] == "w")
    assert done.after == done.expected == t.expected and "return w * height" in done.before


def test_pattern_changes_the_first_literal_and_expects_the_rest(src):
    tasks = built(pattern_tasks(src, random.Random(0)), "pattern", "const")
    (t,) = tasks
    new = t.meta["new"]
    assert t.meta["old"] == '"fast"' and new != '"fast"'
    assert t.after.count(f"mode={new}") == 1 and t.expected.count(f"mode={new}") == 3
    assert t.expected.replace(f"mode={new}", 'mode="fast"') == CODE


def test_add_param_passes_a_name_the_caller_has(src):
    (t,) = built(param_tasks(src, random.Random(0)), "add_param", "def_site")
    assert t.meta == {"function": "show", "param": "size", "calls": 2}
    assert "def show(x, size):" in t.after and "show(items)\n" in t.after
    assert "show(items, size)\n    return show(items[0], size)" in t.expected


@pytest.fixture(scope="module")
def held_out():
    return build_tasks(120, 0)


def test_held_out_tasks_have_the_size_and_mix_the_issue_asks(held_out):
    kinds = Counter(t.kind for t in held_out)
    assert len(held_out) >= 100 and len({t.id for t in held_out}) == len(held_out)
    assert kinds["no_edit"] * 4 >= len(held_out)
    assert {"rename", "add_param", "pattern", "no_edit"} <= set(kinds)
    assert all(t.no_edit or t.after != t.expected for t in held_out)


def test_the_keystrokes_bring_the_servers_document_to_the_tasks_state(held_out):
    for t in held_out:
        doc = Document("file:///t.py", "python", 1, t.before)
        for v, (l0, c0, l1, c1, text) in enumerate(t.changes, 2):
            doc.apply_changes([{"range": {"start": {"line": l0, "character": c0}, "end": {"line": l1, "character": c1}},
                                "text": text}], v)
        assert doc.text == t.after, t.id
        assert t.window[0] <= t.cursor[0] < t.window[1]


def edit(line0, ch0, line1, ch1, text, version=2, uri="file:///a.py"):
    return {"text": text,
            "range": {"start": {"line": line0, "character": ch0}, "end": {"line": line1, "character": ch1}},
            "textDocument": {"uri": uri, "version": version},
            "command": {"title": "Accept next edit", "command": "dg.acceptNextEdit",
                        "arguments": [{"uri": uri, "version": version, "documentOpen": 1, "id": "ne-1"}]}}


def test_edits_apply_in_utf16_columns():
    text = "s = '😀' + a\nb = a\n"
    assert apply_edits(text, [edit(0, 11, 0, 12, "x"), edit(1, 4, 1, 5, "x")]) == "s = '😀' + x\nb = x\n"


def test_contract_errors_name_what_is_wrong():
    assert contract_errors({"edits": [edit(0, 0, 0, 1, "x")]}, "file:///a.py", 2) == []
    assert contract_errors(None, "file:///a.py", 2)
    assert any("echo" in e for e in contract_errors({"edits": [edit(0, 0, 0, 1, "x", version=3)]},
                                                    "file:///a.py", 2))
    bad = edit(0, 0, 0, 1, "x")
    bad["command"] = {"command": "other"}
    assert any("dg.acceptNextEdit" in e for e in contract_errors({"edits": [bad]}, "file:///a.py", 2))
    overlap = [edit(0, 2, 0, 4, "x"), edit(0, 0, 0, 3, "y")]
    assert any("overlap" in e for e in contract_errors({"edits": overlap}, "file:///a.py", 2))


def test_score_tells_exact_reversal_and_syntax_break(src):
    (t,) = [x for x in built(rename_tasks(src, random.Random(0)), "rename", "local") if x.meta["old"] == "w"]
    new = t.meta["new"]
    right = score(t, {"edits": [edit(2, 11, 2, 12, new)]}, 1.0)
    assert right["exact"] and right["shown"] and not right["reversal"] and not right["syntax_break"]
    back = score(t, {"edits": [edit(1, 4, 1, 4 + len(new), "w")]}, 1.0)
    assert back["reversal"] and not back["exact"]
    broken = score(t, {"edits": [edit(2, 4, 2, 10, "return (")]}, 1.0)
    assert broken["syntax_break"]
    silent = score(t, {"edits": []}, 1.0)
    assert not silent["shown"] and not silent["exact"]
