"""What a small budget holds: the functions a file calls before the names it only mentions or reads, one excerpt per
name, and each file's header as its shortest path suffix that is unique in the workspace."""

from __future__ import annotations

from pathlib import Path

from dg_lsp.context.index import WorkspaceIndex
from dg_lsp.context.layout import fim_ids
from dg_lsp.context.select import Selector


def chars(s: str) -> list[int]:
    return [ord(c) for c in s]


def build(tmp_path: Path, files: dict[str, str]) -> tuple[Selector, Path]:
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    ix = WorkspaceIndex([tmp_path])
    ix.build()
    return Selector(ix), tmp_path.resolve()


LIB = ("LIMIT = (10, 20, 30, 40, 50)\n\n\nclass BaseShapeForAll:\n    pass\n\n\n"
       "class Shape(BaseShapeForAll):\n    pass\n\n\nclass Circle(Shape):\n    pass\n\n\n"
       "def area(shape, scale):\n    return 0\n\n\ndef perimeter(shape):\n    return 0\n")
USER = ("from geo.lib import LIMIT, Shape, Circle, area, perimeter\n\n\n"
        "def a(s: Shape) -> Shape:\n    x: Shape = s\n    return perimeter(s) + LIMIT + LIMIT\n\n\n"
        "def b(s):\n    return area(s, 2) + area(s, 3) + LIMIT + LIMIT\n" + "\n" * 20 + "\ndef c(s):\n    \n")


def test_a_small_budget_holds_what_the_file_calls_before_what_it_mentions(tmp_path):
    sel, root = build(tmp_path, {"geo/__init__.py": "", "geo/lib.py": LIB, "app/user.py": USER})
    path = str(root / "app/user.py")
    offset = USER.index("(s):\n    \n") + 9
    full = sel.select(path, USER, offset, 1024, chars)
    assert {"area", "perimeter", "Shape", "Circle", "LIMIT"} <= {s.name for s in full.snippets}
    # smallest forms: area's 27 characters, perimeter's 25, Shape's 33, LIMIT's 28: a mentioned class or a constant
    # that fits would have left room for the functions ranked before it
    for budget in range(30, 200, 4):
        small = sel.select(path, USER, offset, budget, chars)
        names = [s.name for s in small.snippets]
        assert small.tokens <= budget
        if "Shape" in names or "LIMIT" in names:  # mentioned three times, read four: after the functions called
            assert {"area", "perimeter"} <= set(names), (budget, names)
        if "perimeter" in names and len(names) > 1:
            assert "area" in names, (budget, names)  # called twice: before perimeter, called once


def test_one_excerpt_per_name_of_a_file(tmp_path):
    lib = ("import sys\n\nif sys.platform == 'win32':\n    def which(cmd, path=None):\n        return None\n"
           "else:\n    def which(cmd, path=None):\n        return cmd\n")
    user = "from tools.lib import which\n\n\ndef run(cmd):\n    exe = which(cmd)\n    return \n"
    sel, root = build(tmp_path, {"tools/__init__.py": "", "tools/lib.py": lib, "tools/user.py": user})
    got = sel.select(str(root / "tools/user.py"), user, user.index("return ") + 7, 1024, chars)
    assert [s.name for s in got.snippets] == ["which"]


def test_headers_are_the_shortest_unique_path_suffix(tmp_path):
    files = {"pkg/__init__.py": "def setup(x):\n    return x\n", "pkg/a/util.py": "def helper(x):\n    return x\n",
             "legacy/a/util.py": "def helper(x):\n    return x\n", "pkg/money.py": "def cents(x):\n    return x\n",
             "pkg/main.py": "from pkg.a.util import helper\nfrom pkg.money import cents\nfrom pkg import setup\n\n"
                            "def f(x):\n    y = helper(x) + cents(x) + setup(x)\n    return \n"}
    sel, root = build(tmp_path, files)
    assert sel.short(str(root / "pkg/money.py")) == "money.py"
    assert sel.short(str(root / "pkg/a/util.py")) == "pkg/a/util.py"  # legacy/a/util.py ends with a/util.py too
    assert sel.short(str(root / "pkg/__init__.py")) == "pkg/__init__.py"
    text = files["pkg/main.py"]
    got = sel.select(str(root / "pkg/main.py"), text, text.index("return ") + 7, 1024, chars)
    assert {s.path for s in got.snippets} == {"pkg/a/util.py", "pkg/money.py", "pkg/__init__.py"}  # dg/status
    head = "".join(map(chr, fim_ids(got.snippets, sel.short(str(root / "pkg/main.py")), "python", chars)))
    assert "# money.py\n" in head and "# pkg/a/util.py\n" in head and head.endswith("# main.py\n")
    assert got.tokens == len(head)


def test_the_smallest_forms_name_the_parameters():
    from dg_lsp.context.layout import smaller
    from dg_lsp.context.symbols import Definition

    ts = Definition("operate", "function", "function operate<T, R>( init: (src: Observable<T>, sub: Subscriber<R>) "
                    "=> (() => void) | void ): OperatorFunction<T, R>", "Lift.", 3)
    assert smaller(ts, "typescript")[-1] == "function operate(init)"
    iface = Definition("Fn", "type", "interface Fn<T, R> extends Unary<Observable<T>, Observable<R>>", "", 0)
    assert smaller(iface, "typescript")[-1] == "interface Fn<T, R>"
    cut = Definition("make", "function", 'def make( cl: type[T], converter: Base, extra: bool | Literal["from…', "", 0)
    assert smaller(cut, "python")[-1] == "def make(cl, converter, ...): ..."  # the index cut the signature short
    many = Definition("g", "function", "def g(a: int, b, c, d, e, f, g, h=1) -> None", "", 0)
    assert smaller(many, "python")[-1] == "def g(a, b, c, d, e, f, ...): ..."
    go = Definition("Run", "function", "func Run(ctx context.Context, n int) error", "", 0)
    assert smaller(go, "go") == []  # `name type` parameters: the signature is the smallest form
