"""The session's workspace context on a running event loop: built in the background, kept current from document
and watched-file events, and handing each hole its snippets."""

from __future__ import annotations

import asyncio

from dg_lsp.context.workspace import Workspace, check_summary
from dg_lsp.documents import DocumentStore


async def settle(ws: Workspace) -> None:
    for _ in range(2000):
        await asyncio.sleep(0.002)
        if ws.index is not None and not ws.busy:
            return
    raise AssertionError("the index never finished")


async def test_events_keep_the_index_current(tmp_path):
    (tmp_path / "lib.py").write_text("def on_disk(a):\n    pass\n")
    (tmp_path / "old.py").write_text("def going(): pass\n")
    store = DocumentStore()
    ws = Workspace(store)
    lib_uri = (tmp_path / "lib.py").as_uri()
    store.open(lib_uri, "python", 1, "def edited(a, b):\n    pass\n")  # unsaved text in the editor
    ws.opened(lib_uri)
    ws.start([tmp_path], 100, 1 << 20, wait=lambda: 0.0)
    await settle(ws)
    assert "edited" in ws.index.by_name and "on_disk" not in ws.index.by_name
    store.change(lib_uri, 2, [{"text": "def edited_again(): pass\n"}])
    ws.changed(lib_uri)
    await settle(ws)
    assert "edited_again" in ws.index.by_name
    store.close(lib_uri)
    ws.closed(lib_uri)  # closed without saving: the file on disk again
    await settle(ws)
    assert "on_disk" in ws.index.by_name and "edited_again" not in ws.index.by_name
    (tmp_path / "new.py").write_text("def created(): pass\n")
    (tmp_path / "old.py").unlink()
    ws.files_changed([((tmp_path / "new.py").as_uri(), 1), ((tmp_path / "old.py").as_uri(), 3)])
    await settle(ws)
    assert "created" in ws.index.by_name and "going" not in ws.index.by_name
    assert ws.status()["state"] == "ready" and ws.status()["files"] == 2
    ws.stop()
    assert ws.status() == {"state": "off"}


async def test_related_for_an_open_document(tmp_path):
    (tmp_path / "util.py").write_text('def slugify(text):\n    """URL-safe text."""\n')
    text = "from util import slugify\n\ndef page(title):\n    return slugify("
    store = DocumentStore()
    ws = Workspace(store)
    uri = (tmp_path / "page.py").as_uri()
    store.open(uri, "python", 1, text)
    ws.opened(uri)
    ws.start([tmp_path], 100, 1 << 20, wait=lambda: 0.0)
    await settle(ws)
    snippets, current = ws.related(store.snapshot(uri), len(text), lambda s: s.split(), 100)
    assert current == "page.py"
    assert [(s.path, s.text.splitlines()[0]) for s in snippets] == [("util.py", "def slugify(text):")]
    ws.stop()


def test_check_summary(tmp_path):
    (tmp_path / "a.py").write_text("from b import g\n\ndef f():\n    return g()\n")
    (tmp_path / "b.py").write_text("def g():\n    return 1\n")
    out = check_summary(tmp_path)
    assert out["files"] == 2 and out["definitions"] == 2
    assert out["sample"]["file"] == "a.py" and out["sample"]["files"] == ["b.py"]


async def test_index_state_is_ready_with_pending_updates_after_the_first_build(tmp_path):
    """Issue 33 case 4: after every keystroke the state read "building" (the open document waits 0.5 s to be
    reindexed), so it never meant anything. Now "building" is the first build only; then "ready" + `pending`."""
    (tmp_path / "lib.py").write_text("def on_disk(a):\n    pass\n")
    store = DocumentStore()
    ws = Workspace(store)
    uri = (tmp_path / "lib.py").as_uri()
    store.open(uri, "python", 1, "def on_disk(a):\n    pass\n")
    ws.opened(uri)
    ws.start([tmp_path], 100, 1 << 20, wait=lambda: 0.0)
    assert ws.status()["state"] == "building"
    await settle(ws)
    assert ws.status()["state"] == "ready" and ws.status()["pending"] == 0
    store.change(uri, 2, [{"text": "def typed(): pass\n"}])
    ws.changed(uri)  # a keystroke: reindexed once quiet for 0.5 s
    got = ws.status()
    assert got["state"] == "ready" and got["pending"] == 1 and got["files"] == 1
    await settle(ws)
    assert ws.status()["pending"] == 0 and "typed" in ws.index.by_name
    ws.start([tmp_path], 100, 1 << 20, wait=lambda: 0.0)  # a new index (a settings change): its first build again
    assert ws.status()["state"] == "building"
    ws.stop()


async def test_related_says_which_definitions_went_in(tmp_path):
    (tmp_path / "util.py").write_text('def slugify(text):\n    """URL-safe text."""\n')
    text = "from util import slugify\n\ndef page(title):\n    return slugify("
    store = DocumentStore()
    ws = Workspace(store)
    uri = (tmp_path / "page.py").as_uri()
    store.open(uri, "python", 1, text)
    ws.opened(uri)
    ws.start([tmp_path], 100, 1 << 20, wait=lambda: 0.0)
    await settle(ws)
    snippets, _ = ws.related(store.snapshot(uri), len(text), lambda s: s.split(), 100)
    assert [s.item() for s in snippets] == [{"path": "util.py", "line": 0, "name": "slugify", "kind": "whole"}]
    ws.stop()
