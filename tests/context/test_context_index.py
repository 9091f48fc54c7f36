"""The workspace index: definitions and imports in every grammar, .gitignore rules and caps, updates."""

from __future__ import annotations

from pathlib import Path

import pytest

from dg_lsp.context.ignore import Ignore, parse_rules
from dg_lsp.context.index import MAX_LINE_CHARS, WorkspaceIndex
from dg_lsp.context.symbols import definitions, imports
from dg_lsp.languages import parser

SOURCES = {
    "python": ("import os\nfrom .geo import centroid as c\nLIMIT = 3\nclass A(B):\n    '''Doc line.\n    More.'''\n"
               "    def m(self, x):\n        pass\n@dec\ndef f(a):\n    return 1\n",
               {("LIMIT", "constant"), ("A", "class"), ("m", "method"), ("f", "function")}),
    "javascript": ("import d, {a as b} from './x';\n// Does f.\nexport function f(a) {}\nexport const g = (x) => x;\n"
                   "class C { m(a) {} }\n", {("f", "function"), ("g", "constant"), ("C", "class"), ("m", "method")}),
    "typescript": ("import {T} from './t';\nexport interface I { a: number }\ntype Q = string;\nenum E {A}\n"
                   "export default class K { run(): void {} }\n",
                   {("I", "type"), ("Q", "type"), ("E", "type"), ("K", "class"), ("run", "method")}),
    "tsx": ("export function App(p: Props) { return <div/>; }\n", {("App", "function")}),
    "rust": ("use a::b::{c, d as e};\n/// Adds.\npub fn f(x: i32) -> i32 { x }\nstruct S { a: i32 }\n"
             "impl S { fn m(&self) {} }\nconst K: i32 = 1;\ntrait T { fn t(&self); }\n",
             {("f", "function"), ("S", "type"), ("m", "method"), ("K", "constant"), ("T", "class"), ("t", "method")}),
    "go": ("package p\nimport (\n f \"fmt\"\n \"os/exec\"\n)\nfunc F(a int) int { return a }\nfunc (s *S) M() {}\n"
           "type S struct {}\nconst K = 1\n", {("F", "function"), ("M", "method"), ("S", "type"), ("K", "constant")}),
    "java": ("import a.b.C;\nclass A { static final int K = 1; void m(int x) {} }\ninterface I { void run(); }\n",
             {("A", "class"), ("K", "constant"), ("m", "method"), ("I", "class")}),
    "c": ("#include \"x.h\"\n#define K 1\nint f(int a);\nint *g(int b) { return b; }\nstruct S { int a; };\n"
          "typedef struct S T;\n", {("K", "constant"), ("f", "function"), ("g", "function"), ("S", "type"),
                                     ("T", "type")}),
    "cpp": ("#include \"v.hpp\"\nnamespace n { class C { public: void m(int a) {} }; int f() { return 1; } }\n",
            {("C", "class"), ("m", "method"), ("f", "function")}),
}


@pytest.mark.parametrize("key", sorted(SOURCES))
def test_definitions_in_every_grammar(key):
    src, want = SOURCES[key]
    data = src.encode()
    got = definitions(parser(key).parse(data), key, data)
    assert want <= {(d.name, d.kind) for d in got}, got
    assert all(d.signature for d in got)


def test_signatures_docs_and_imports():
    src = SOURCES["python"][0].encode()
    tree = parser("python").parse(src)
    defs = {d.name: d for d in definitions(tree, "python", src)}
    assert defs["A"].signature == "class A(B)" and defs["A"].doc == "Doc line."
    assert defs["m"].parent == "A" and defs["m"].line == 6
    binds = {(i.local, i.module, i.name) for i in imports(tree, "python", src)}
    assert binds == {("os", "os", ""), ("c", ".geo", "centroid")}
    js = SOURCES["javascript"][0].encode()
    tree = parser("javascript").parse(js)
    assert {(i.local, i.module, i.name) for i in imports(tree, "javascript", js)} == {
        ("d", "./x", "default"), ("b", "./x", "a")}
    assert next(d for d in definitions(tree, "javascript", js) if d.name == "f").doc == "Does f."
    cjs = b"const x = require('./x')\nconst { a, b: c } = require('../y')\nconst n = 1\n"
    tree = parser("javascript").parse(cjs)
    assert {(i.local, i.module, i.name) for i in imports(tree, "javascript", cjs)} == {
        ("x", "./x", ""), ("a", "../y", "a"), ("c", "../y", "b")}


def write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


def test_gitignore_subset():
    rules = parse_rules("# c\n*.log\n/scratch\nout/\n!keep.log\ndocs/**/gen_*.py\n")
    ig = Ignore(Path("/nowhere"))
    ig._rules[""] = rules
    assert ig.ignored("a/b.log", False) and not ig.ignored("a/keep.log", False)
    assert ig.ignored("scratch", True) and not ig.ignored("src/scratch", True)
    assert ig.ignored("src/out", True) and not ig.ignored("src/out", False)
    assert ig.ignored("docs/x/y/gen_a.py", False) and not ig.ignored("docs/x/a.py", False)
    assert ig.ignored("node_modules", True)


def test_build_honours_gitignore_and_caps(tmp_path):
    write(tmp_path, {
        "a.py": "def alpha():\n    pass\n", "pkg/b.py": "def beta(): pass\n", "gen/c.py": "def gamma(): pass\n",
        "pkg/.gitignore": "secret_*.py\n", "pkg/secret_d.py": "def delta(): pass\n", ".gitignore": "gen/\n",
        "node_modules/m/index.js": "function mod() {}\n", "big.py": "x = 1\n" * 20000,
        "min.js": "var a=" + "1+" * MAX_LINE_CHARS + "1;\n", "notes.txt": "def no(): pass\n",
    })
    ix = WorkspaceIndex([tmp_path], max_file_bytes=64 * 1024)
    ix.build()
    names = {Path(p).relative_to(tmp_path.resolve()).as_posix() for p in ix.files}
    assert names == {"a.py", "pkg/b.py"}
    assert ix.skipped == 2  # big.py (bytes), min.js (a line too long)
    assert [p for p, _ in ix.by_name["beta"]] == [str(tmp_path.resolve() / "pkg/b.py")]
    capped = WorkspaceIndex([tmp_path], max_files=1)
    capped.build()
    assert len(capped.files) == 1


def test_updates_mark_and_remove(tmp_path):
    write(tmp_path, {"a.py": "def alpha(): pass\n"})
    opened: dict[str, tuple[str, str]] = {}
    ix = WorkspaceIndex([tmp_path], read_open=opened.get)
    ix.build()
    a = str(tmp_path.resolve() / "a.py")
    opened[a] = ("python", "def alpha2(x): pass\n")  # an open document's text wins over the disk's
    ix.mark(a)
    ix.build()
    assert "alpha2" in ix.by_name and "alpha" not in ix.by_name
    del opened[a]  # closed without saving: back to the disk
    ix.mark(a)
    ix.build()
    assert "alpha" in ix.by_name and "alpha2" not in ix.by_name
    (tmp_path / "new.py").write_text("def fresh(): pass\n")  # a watched-file "created"
    ix.mark(str(tmp_path.resolve() / "new.py"))
    ix.build()
    assert "fresh" in ix.by_name
    ix.remove(a)  # a watched-file "deleted"
    assert "alpha" not in ix.by_name and a not in ix.files


def test_steps_stop_on_time(tmp_path):
    write(tmp_path, {f"m{i}.py": f"def f{i}(): pass\n" for i in range(50)})
    ix = WorkspaceIndex([tmp_path])
    clock = iter(range(10**6))
    assert ix.step(3, lambda: next(clock)) is False  # three ticks of a fake clock: not done
    assert 0 < len(ix.files) < 50 or ix.building
    ix.build()
    assert len(ix.files) == 50 and not ix.building


def test_the_index_leaves_the_garbage_collector_alone(tmp_path):
    # Definitions as NamedTuple instances stay tracked forever: 100,000 of them made each full collection a pause
    # of the event loop. Stored as plain tuples, the collector drops them after one pass.
    import gc

    for i in range(20):
        (tmp_path / f"m{i}.py").write_text("".join(f'def f{j}(a):\n    """Doc."""\n\n' for j in range(50)))
    ix = WorkspaceIndex([tmp_path])
    ix.build()
    for _ in range(3):  # a tuple is untracked once the tuples in it are: nested ones take a pass per level
        gc.collect()
    entry = next(iter(ix.files.values()))
    assert len(entry.defs) == 50 and not any(gc.is_tracked(d) for d in entry.defs)
    assert not any(gc.is_tracked(v) for v in ix.by_name.values())
    assert ix.named("f7")[0][1].name == "f7" and ix.top(entry.path)[0].signature.startswith("def f")
