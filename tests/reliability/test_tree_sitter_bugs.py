"""py-tree-sitter's own faults that the server works around (issue 21), each kept as a minimal reproduction run in a
subprocess, next to a check that dg_lsp avoids the faulty call.

1. `Node.first_child_for_byte` / `first_named_child_for_byte` return the null node, wrapped, when no child ends after
   the byte (a leaf, such as the content of a long string or comment); any use of that Node dereferences NULL. The
   server died this way (SIGSEGV) on an inline request inside a token longer than 4,000 characters: the syntax
   window is cut inside the line there (`syntax._node_end_before`), on the node around the cut, a string's content.
2. The read callback's return value is never released (`parser_read_wrapper` takes a buffer view of it, releases the
   view, not the object): every chunk a callback-parse reads lives until the process ends. `languages.parse_until`
   returns one reused bytearray per thread instead of fresh bytes.

If an upgrade fixes one of them, its reproduction says so (the test still passes; the workaround may then go).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

NULL_NODE = """
import tree_sitter, tree_sitter_python
tree = tree_sitter.Parser(tree_sitter.Language(tree_sitter_python.language())).parse(b"x = 'aaaa'\\n")
leaf = tree.root_node.descendant_for_byte_range(6, 7)  # the string's content: no children
child = leaf.{method}(6)
print("returned", child is None, flush=True)
print(child.type if child is not None else None, flush=True)  # SIGSEGV here while the bug lasts
"""


@pytest.mark.parametrize("method", ["first_child_for_byte", "first_named_child_for_byte"])
def test_first_child_for_byte_on_a_leaf_is_a_null_node_that_crashes_on_use(method):
    proc = subprocess.run([sys.executable, "-c", NULL_NODE.format(method=method)], capture_output=True, text=True,
                          timeout=60)
    if proc.returncode == -signal.SIGSEGV:  # the library bug, as of py-tree-sitter 0.26.1
        assert proc.stdout.splitlines()[0] == "returned False"  # a Node, not None: the bug is the missing null check
    else:  # fixed upstream: the call returns None
        assert proc.returncode == 0 and proc.stdout.split() == ["returned", "True", "None"], proc


READ_LEAK = """
import sys, tree_sitter, tree_sitter_python
parser = tree_sitter.Parser(tree_sitter.Language(tree_sitter_python.language()))
data = b"def f(a):\\n    return [a, 1]\\n" * 2000
chunks = []
def read(byte, _point):
    chunks.append(data[byte:byte + 512])
    return chunks[-1]
parser.parse(read, progress_callback=lambda *_: False)
# references: `chunks`, the name `c` below and getrefcount's argument; anything above 3 is the wrapper's leak
print(max(sys.getrefcount(c) for c in chunks[:-1]) - 3)
"""


def test_a_read_callback_parse_keeps_every_chunk_it_read():
    proc = subprocess.run([sys.executable, "-c", READ_LEAK], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert int(proc.stdout) >= 0  # > 0 while the bug lasts (1 leaked reference per chunk in 0.26.1)


def test_our_callback_parse_leaks_nothing():
    """`parse_until` with a deadline (the callback route of a sliced parse) keeps no Python block per parse."""
    script = textwrap.dedent("""
        import gc, sys, time
        from dg_lsp.languages import parse_until, parser
        data = b"def f(a):\\n    return [a, 'x', 1]\\n" * 20000
        def parse():
            p, tree = parser("python"), None
            while tree is None:
                tree = parse_until(p, data, None, time.perf_counter() + 0.001)
        parse(); gc.collect()
        before = sys.getallocatedblocks()
        for _ in range(10):
            parse()
        gc.collect()
        print(sys.getallocatedblocks() - before)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert proc.returncode == 0, proc.stderr
    assert int(proc.stdout) < 200  # fresh bytes per chunk: ~700 blocks per parse of these 700 KB


_FAULTY = re.compile(r"\.(first_child_for_byte|first_named_child_for_byte)\(")


def test_dg_lsp_never_calls_the_faulty_node_methods():
    hits = [f"{path.relative_to(ROOT)}:{i}" for path in sorted((ROOT / "dg_lsp").rglob("*.py"))
            for i, line in enumerate(path.read_text().splitlines(), 1)
            if _FAULTY.search(line) and not line.lstrip().startswith("#")]
    assert not hits, f"py-tree-sitter calls that can crash the process (see this module's docstring): {hits}"


LONG_TOKEN = """
import sys
from dg_lsp.documents import Document
from dg_lsp.fill.edits import postprocess
from dg_lsp.fill.holes import hole_at_cursor
from dg_lsp.fill.syntax import prepare_check
language, line = sys.argv[1], sys.argv[2]
text = "a = 1\\n" + line + "\\nb = 2\\n"
doc = Document("file:///t", language, 1, text)
snap = doc.snapshot()
for cursor in (6, 7, 12, 3000, 5000, 6010, len(text) - 7):  # before, inside and after the long token
    hole = hole_at_cursor(snap, cursor)
    postprocess(snap, hole, "x)", prepare_check(snap, hole))
print("ok")
"""


@pytest.mark.parametrize("language,line", [
    ("python", "x = '" + "a" * 6000 + "'"), ("python", "# " + "a" * 6000),
    ("javascript", "let x = '" + "a" * 6000 + "';"), ("javascript", "// " + "a" * 6000)])
def test_an_inline_fill_inside_a_token_of_6000_characters_does_not_crash(language, line):
    """The issue's reproduction (SIGSEGV in syntax._node_end_before before the fix), in a subprocess."""
    proc = subprocess.run([sys.executable, "-c", LONG_TOKEN, language, line], capture_output=True, text=True,
                          timeout=120, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", (proc.returncode, proc.stderr[-2000:])
