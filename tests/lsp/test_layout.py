"""The shape of the language server's code: no import cycle inside dg_lsp (imports under TYPE_CHECKING and inside
functions included), no module over 400 lines, no product module importing test helpers, and the server itself
(everything but the backends, their loader and the command line) seeing the engine only through its seam modules:
engine.seam (the backend contract) and engine.seam_jobs (the engine thread and job shape the service shares)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "dg_lsp"


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> set[str]:
    """Every module `path` imports, wherever the import statement is."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the module's package, up `level - 1` packages
                pkg = module_name(path).split(".")
                pkg = pkg if path.name == "__init__.py" else pkg[:-1]
                base = ".".join(pkg[:len(pkg) - node.level + 1] + ([node.module] if node.module else []))
            out.add(base)
            out.update(f"{base}.{a.name}" for a in node.names)
    return out


def graph() -> dict[str, set[str]]:
    files = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    return {name: {m for m in imports(path) if m in files and m != name} for name, path in files.items()}


def test_no_import_cycle_inside_dg_lsp():
    g = graph()
    state: dict[str, int] = {}  # 1: on the stack, 2: done
    stack: list[str] = []

    def visit(n: str) -> None:
        state[n] = 1
        stack.append(n)
        for m in sorted(g[n]):
            if state.get(m) == 1:
                raise AssertionError("import cycle: " + " -> ".join(stack[stack.index(m):] + [m]))
            if m not in state:
                visit(m)
        stack.pop()
        state[n] = 2

    for n in sorted(g):
        if n not in state:
            visit(n)


def test_no_module_over_400_lines():
    long = {module_name(p): n for p in PACKAGE.rglob("*.py") if (n := len(p.read_text().splitlines())) > 400}
    assert not long, long


# Where a concrete engine is named: backend implementations, the embedded engine's loader, the command line.
BACKEND_SIDE = ("dg_lsp.backends", "dg_lsp.backends.loading", "dg_lsp.__main__")
# The engine modules the rest of the server may import (a name imported from one counts as that module).
SEAM = ("engine.seam", "engine.seam_jobs")


def test_product_code_does_not_import_test_helpers():
    for path in PACKAGE.rglob("*.py"):
        assert not {m for m in imports(path) if m.startswith("engine.testing")}, path


def test_the_server_sees_the_engine_only_through_the_seam():
    for path in PACKAGE.rglob("*.py"):
        if module_name(path).startswith(BACKEND_SIDE):
            continue
        internal = {m for m in imports(path) if m.startswith("engine.") and ".".join(m.split(".")[:2]) not in SEAM}
        assert not internal, (module_name(path), internal)


def test_the_seam_modules_import_no_other_engine_module():
    """Else the server would see the engine's internals through them."""
    for name in SEAM:
        path = ROOT.joinpath(*name.split(".")).with_suffix(".py")
        internal = {m for m in imports(path) if m.startswith("engine.") and ".".join(m.split(".")[:2]) not in SEAM}
        assert not internal, (name, internal)


# -- folders that show the architecture (issue 22) ------------------------------------------------------------------

ENGINE = ROOT / "engine"
# What may sit at the top of each package: the rest lives in a folder named for its part of the architecture.
TOP = {
    "dg_lsp": {"__init__", "__main__", "server", "session", "documents", "config", "languages", "trace", "memory",
               "sched"},
    "engine": {"__init__", "seam", "seam_jobs", "engine", "base", "config", "tokens", "loader"},
}
FOLDERS = {
    "dg_lsp": {"wire", "handlers", "fill", "backends", "context", "nextedit", "devtools"},
    "engine": {"model", "denoising", "formats", "quant", "kernels", "prompts", "service", "tools", "testing", "train",
               "default_model", "families"},
}
FILL_ORDER = ["holes", "prompt", "pipeline", "worker", "edits", "syntax"]  # dg_lsp/fill, in the order a fill runs


def test_each_package_keeps_to_its_folders():
    for name, root in (("dg_lsp", PACKAGE), ("engine", ENGINE)):
        modules = {p.stem for p in root.glob("*.py")}
        folders = {p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith(("_", "."))}
        assert modules <= TOP[name], (name, sorted(modules - TOP[name]))
        assert folders <= FOLDERS[name], (name, sorted(folders - FOLDERS[name]))


def test_every_folder_says_what_it_holds():
    """Each folder's __init__ docstring names each of its modules (a newcomer reads the folder's job there)."""
    for root in (PACKAGE, ENGINE):
        for init in root.rglob("__init__.py"):
            if "train" in init.parts or init.parent in (PACKAGE, ENGINE):
                continue
            doc = ast.get_docstring(ast.parse(init.read_text())) or ""
            missing = [p.stem for p in init.parent.glob("*.py") if not p.stem.startswith("__") and p.stem not in doc]
            assert doc and not missing, (str(init.relative_to(ROOT)), missing)


def test_the_fill_folder_lists_its_stages_in_order():
    doc = ast.get_docstring(ast.parse((PACKAGE / "fill" / "__init__.py").read_text())) or ""
    start = doc.find("in order:")
    at = [m.start() if (m := re.compile(rf"\b{stage}\b").search(doc, start)) else -1 for stage in FILL_ORDER]
    assert start != -1 and -1 not in at and at == sorted(at), dict(zip(FILL_ORDER, at, strict=True))
    assert {p.stem for p in (PACKAGE / "fill").glob("*.py")} >= set(FILL_ORDER)


def test_test_helpers_live_apart_and_product_code_never_imports_them():
    assert not list(ENGINE.glob("testing*.py"))
    for root in (PACKAGE, ENGINE):
        for path in root.rglob("*.py"):
            if "testing" in path.relative_to(ROOT).parts or "train" in path.parts:
                continue
            assert not {m for m in imports(path) if m.startswith("engine.testing")}, path


def test_each_model_family_has_its_own_folder_and_one_registry_line():
    """engine/families/<name>/ holds a family's config reading and tensor names (config) and its default sampler
    (sampler); the registry lists each folder's FAMILY once (DiffusionGemma's adapter is a module: its network
    stays in engine/model/). Adding a family touches its folder and one registry line."""
    root = ENGINE / "families"
    folders = sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith(("_", ".")))
    registry = (root / "registry.py").read_text()
    assert folders, "no family folders"
    for name in folders:
        assert {"__init__", "config", "sampler"} <= {p.stem for p in (root / name).glob("*.py")}, name
        assert registry.count(f"    {name}.FAMILY,") == 1, name
    assert registry.count("    diffusion_gemma.FAMILY,") == 1
