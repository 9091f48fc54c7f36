"""No import cycle among the engine's modules: no module imports one that imports it back, directly or through
others, counting every import statement wherever it runs (module level, `if TYPE_CHECKING:`, inside a function). A
deferred import still makes the two modules depend on each other; it only moves the failure to the first call.
engine/train (the default model's training tooling) is included: it imports the engine one way (engine.tools.calibrate
reads its hole sets), and a cycle through it would tie the engine to its tooling."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.import_cycles import cycles

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "engine"


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def engine_imports(path: Path, known: set[str]) -> set[str]:
    pkg = module_name(path).split(".")
    pkg = pkg if path.name == "__init__.py" else pkg[:-1]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(pkg[:len(pkg) - node.level + 1] + ([base] if base else []))
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        for name in names:
            while name and name not in known:  # engine.x.y where y is a function: the module engine.x
                name = name.rpartition(".")[0]
            if name and name != module_name(path):
                out.add(name)
    return out


def test_no_engine_module_imports_one_that_imports_it_back():
    paths = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph = {m: engine_imports(p, set(paths)) for m, p in paths.items()}
    found = cycles(graph)
    assert not found, found
