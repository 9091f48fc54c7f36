"""bench.context's ground truth and recall on a generated package (the benchmark itself runs on the stdlib)."""

from __future__ import annotations

from bench.context import holes_of, recall
from bench.context_es import holes as es_holes


def test_holes_and_recall_on_a_generated_package(tmp_path):
    pkg = tmp_path / "shop"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "money.py").write_text("def add_tax(x):\n    return x * 1.2\n\n\nclass Till:\n    pass\n")
    (pkg / "cart.py").write_text("from .money import add_tax\nfrom . import money as m\n\n\n"
                                 "def total(xs):\n    t = m.Till()\n    return add_tax(sum(xs))\n")
    cases = holes_of(pkg)
    assert sorted((c[0].name, c[2], c[3].name, c[4]) for c in cases) == [
        ("cart.py", "Till", "money.py", 4), ("cart.py", "add_tax", "money.py", 0)]
    out = recall([pkg], 10, lambda s: s.split())
    assert out["holes"] == 2 and out["recall"]["1024"] == 1.0


def test_commonjs_holes(tmp_path):
    (tmp_path / "util.js").write_text("function slug(s) {\n  return s\n}\nmodule.exports = { slug }\n")
    (tmp_path / "page.js").write_text("const { slug } = require('./util')\nconst u = require('./util.js')\n\n"
                                      "function title(t) {\n  return slug(t) + u.slug(t)\n}\n")
    assert sorted((c[2], c[4]) for c in es_holes(tmp_path)) == [("slug", {0}), ("slug", {0})]


def test_typescript_holes_and_recall(tmp_path):
    # ES imports (named, renamed, namespace), an overload list (any of its lines is the definition), a .d.ts left out
    (tmp_path / "util").mkdir()
    (tmp_path / "util/lift.ts").write_text("export function operate<T>(f: T): T;\nexport function operate(f: any) {\n"
                                           "  return f;\n}\nexport const noop = () => {};\n")
    (tmp_path / "types.d.ts").write_text("export declare function ghost(): void;\n")
    (tmp_path / "map.ts").write_text("import { operate, noop as nothing } from './util/lift';\n"
                                     "import * as lift from './util/lift';\n\n"
                                     "export function map(f: any) {\n  nothing();\n"
                                     "  return operate(lift.operate(f));\n}\n")
    cases = es_holes(tmp_path)
    assert sorted((c[0].name, c[2], c[4]) for c in cases) == [
        ("map.ts", "noop", {4}), ("map.ts", "operate", {0, 1}), ("map.ts", "operate", {0, 1})]
    out = recall([tmp_path], 10, lambda s: s.split())
    assert out["holes"] == 3 and out["recall"]["1024"] == 1.0 and out["per_project"]
