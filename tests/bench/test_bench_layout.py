"""bench/'s layout: no import cycle among its modules, and `python -m bench` lists every benchmark once.

1. No bench module imports one that imports it back, directly or through others, counting every import statement
   wherever it runs (module level or inside a function: a deferred import still ties the two modules together and
   only moves the failure to the first call). Shared pieces live in modules that import no benchmark
   (bench.common, bench.checkpoint, bench.launch).
2. bench/registry.py's table against the files: every module with an `if __name__ == "__main__":` block (a
   `python -m bench.X` command) and every bench/*.sh has exactly one Bench row, every other module one Helper row;
   a row names a file that is there (or says which branch brings it: `coming`). The failure names the row to add.
3. `python -m bench` prints each present benchmark once, under its group; `python -m bench NAME ARGS` is
   `python -m bench.NAME ARGS`; an unknown NAME is one line and exit 2.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

from bench.registry import BENCHES, GROUPS, HELPERS, present
from tests.import_cycles import cycles

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
REGISTRY = "bench/registry.py"


def modules() -> dict[str, Path]:
    """bench.X -> its file, for every module of the package but its __init__ and __main__."""
    return {f"bench.{p.stem}": p for p in sorted(BENCH.glob("*.py")) if p.stem not in ("__init__", "__main__")}


def bench_imports(path: Path, known: set[str]) -> set[str]:
    """The bench modules `path` imports, anywhere in it (`from bench import x`, `from bench.x import f`,
    `import bench.x`, relative imports)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = "bench" + (f".{base}" if base else "")
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        for name in names:
            while name and name not in known:  # bench.x.f where f is a function: the module bench.x
                name = name.rpartition(".")[0]
            if name and name != f"bench.{path.stem}":
                out.add(name)
    return out


def test_no_bench_module_imports_one_that_imports_it_back():
    paths = modules()
    graph = {m: bench_imports(p, set(paths)) for m, p in paths.items()}
    assert not cycles(graph), "import cycles in bench/ (move the shared piece into a module both import): " + \
        "; ".join(" -> ".join(c) for c in cycles(graph))


def test_the_cycle_finder_sees_a_deferred_import(tmp_path):
    """A cycle closed by an import inside a function counts (the case bench.common -> bench.engine_speed was)."""
    (tmp_path / "a.py").write_text("from bench.b import f\n")
    (tmp_path / "b.py").write_text("def f():\n    from bench.a import g\n    return g\n")
    known = {"bench.a", "bench.b"}
    graph = {f"bench.{n}": bench_imports(tmp_path / f"{n}.py", known) for n in ("a", "b")}
    assert cycles(graph) == [["bench.a", "bench.b", "bench.a"]]


def has_entry_point(path: Path) -> bool:
    """A module-level `if __name__ == "__main__":`."""
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Compare):
            parts = [node.test.left, *node.test.comparators]
            if any(isinstance(p, ast.Name) and p.id == "__name__" for p in parts) and \
                    any(isinstance(p, ast.Constant) and p.value == "__main__" for p in parts):
                return True
    return False


def first_line(path: Path) -> str:
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or "WHAT IT MEASURES"
    return doc.splitlines()[0][:70].replace('"', "'")


def test_every_entry_point_and_script_has_one_row_and_every_row_a_file():
    counts = Counter([b.name for b in BENCHES] + [h.name for h in HELPERS])
    assert not [n for n, c in counts.items() if c > 1], f"named twice in {REGISTRY}: " + \
        ", ".join(n for n, c in counts.items() if c > 1)
    rows = {b.name: b for b in BENCHES}
    helpers = {h.name for h in HELPERS}
    problems = []
    for name, path in modules().items():
        stem = name.removeprefix("bench.")
        if has_entry_point(path) and stem not in rows:
            problems.append(f"bench/{path.name} is a command (python -m {name}) without a row: add to BENCHES in "
                            f"{REGISTRY}:\n    Bench(\"{stem}\", \"GROUP\", \"{first_line(path)}\"),\n"
                            f"  GROUP one of {', '.join(GROUPS)}; the line at most 80 characters")
        elif not has_entry_point(path) and stem not in helpers:
            why = ("it is in BENCHES but has no `if __name__ == \"__main__\":` block: move it to HELPERS"
                   if stem in rows else "add to HELPERS")
            problems.append(f"bench/{path.name} has no command of its own; {why} in {REGISTRY}:\n"
                            f"    Helper(\"{stem}\", \"THE BENCHMARKS IT SERVES\"),")
    for script in sorted(BENCH.glob("*.sh")):
        if script.name not in rows:
            problems.append(f"bench/{script.name} has no row: add to BENCHES in {REGISTRY}:\n"
                            f"    Bench(\"{script.name}\", \"device\", \"WHAT IT RUNS\"),")
    for bench in BENCHES:
        if not bench.path.is_file() and not bench.coming:
            problems.append(f"the row {bench.name!r} names bench/{bench.path.name}, which is not there: remove the "
                            f"row from BENCHES in {REGISTRY} (or mark the branch that brings it: coming=\"issue N\")")
        if len(bench.line) > 80:
            problems.append(f"the row {bench.name!r}'s line is {len(bench.line)} characters; at most 80")
    for helper in HELPERS:
        if not helper.path.is_file():
            problems.append(f"the helper row {helper.name!r} names bench/{helper.name}.py, which is not there: "
                            f"remove it from HELPERS in {REGISTRY}")
        elif has_entry_point(helper.path):
            problems.append(f"bench/{helper.name}.py is a command now: move its row from HELPERS to BENCHES in "
                            f"{REGISTRY} as Bench(\"{helper.name}\", \"GROUP\", \"{first_line(helper.path)}\"),")
    assert not problems, "\n".join(problems)


def bench(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p))
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)


def test_the_listing_shows_every_benchmark_once_under_its_group():
    proc = bench("bench")
    assert proc.returncode == 0, proc.stderr
    group = None
    seen: Counter[str] = Counter()
    for line in proc.stdout.splitlines():
        if line and not line.startswith(" ") and line.split(":")[0] in GROUPS:
            group = line.split(":")[0]
        elif line.startswith("  "):
            name = line.split()[0]
            row = next(b for b in BENCHES if b.name == name)
            assert row.group == group, f"{name} listed under {group}, its row says {row.group}"
            assert row.line in line
            seen[name] += 1
    assert seen == Counter(b.name for b in present(BENCHES))
    assert all(b.name not in seen for b in BENCHES if not b.path.is_file())  # a coming row waits for its file


def test_bench_name_runs_that_benchmark():
    direct, through = bench("bench.plots", "--help"), bench("bench", "plots", "--help")
    assert direct.returncode == through.returncode == 0, through.stderr
    assert through.stdout == direct.stdout and "RESULT" in through.stdout.upper()
    wrong = bench("bench", "no_such_bench")
    assert wrong.returncode == 2 and "no benchmark called 'no_such_bench'" in wrong.stderr
    assert "lsp_latency" in wrong.stderr and "Traceback" not in wrong.stderr
