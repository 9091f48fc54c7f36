"""Which indexed files an import names, searched the way each language finds its modules: the importing file's own
package and the workspace's roots first, so that a same-named file deeper in the tree (a vendored copy, `legacy/`,
a fixture) is not taken for the module.

- Python: relative imports from the importer's package (leading dots); absolute ones from the folder above the
  importer's top package (the folder Python puts on sys.path for it), the importer's own folder (a script's), then
  each workspace root and its `src/`.
- JavaScript/TypeScript: relative specifiers from the importer's folder (with the extensions and `index` files Node
  and TypeScript try); bare ones (`lib/util` under a `baseUrl`) from each workspace root and its `src/`.
- Rust: `crate::a::b` from the crate's `src/` (the folder beside the nearest Cargo.toml), `super::`/`self::` from the
  importer's module (`a/b.rs` or `a/b/mod.rs`).
- Go: an import path under the nearest go.mod's `module` path names that folder; a package is all its files.
- Anything else (Java, C/C++ headers, imports none of the above finds): files whose path ends with the module's
  path, the nearest to the importer only (the longest shared folder prefix).
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping
from pathlib import Path

JS_EXTS = ("", ".ts", ".tsx", ".js", ".jsx", ".mjs", ".cjs", ".d.ts")
JS_INDEX = ("index.ts", "index.tsx", "index.js", "index.jsx")


class Resolver:
    """Per index: finds files among `files` (the indexed paths); caches what it read from disk (Cargo.toml and go.mod
    locations, go.mod module paths), bounded."""

    def __init__(self, roots: list[Path], files: Collection[str], by_stem: Mapping[str, set[str]]) -> None:
        self.roots, self.files, self.by_stem = roots, files, by_stem
        self._found: dict[tuple[str, str], Path | None] = {}  # (folder, marker file) -> the nearest folder holding it
        self._gomod: dict[Path, str] = {}

    def module_files(self, module: str, importer: str) -> list[str]:
        here = Path(importer).parent
        ext = Path(importer).suffix
        if ext in (".py", ".pyi"):
            return self._python(module, here)
        if ext in (".js", ".mjs", ".cjs", ".jsx", ".ts", ".mts", ".cts", ".tsx"):
            got = self._js(module, here)
        elif ext == ".rs":
            got = self._rust(module, importer)
        elif ext == ".go":
            got = self._go(module, here)
        else:
            got = []
        return got if got or module.startswith(".") else self.nearest(module, importer)

    # -- per language ---------------------------------------------------------------------------------------------

    def _first(self, candidates: list[str]) -> list[str]:
        return [c for c in candidates if c in self.files][:1]

    def _bases(self, *first: Path) -> list[Path]:
        out: list[Path] = []
        for b in [*first, *self.roots, *(r / "src" for r in self.roots)]:
            if b not in out:
                out.append(b)
        return out

    def _python(self, module: str, here: Path) -> list[str]:
        if module.startswith("."):
            level = len(module) - len(module.lstrip("."))
            base = here
            for _ in range(level - 1):
                base = base.parent
            rest = module.lstrip(".")
            return self._python_at(base.joinpath(*rest.split(".")) if rest else base)
        top = here
        while str(top / "__init__.py") in self.files and top.parent != top:  # up to the top package's parent
            top = top.parent
        for base in self._bases(top, here):
            got = self._python_at(base.joinpath(*module.split(".")))
            if got:
                return got
        return self.nearest(module, str(here / "_"))

    def _python_at(self, target: Path) -> list[str]:
        return self._first([f"{target}.py", str(target / "__init__.py"), f"{target}.pyi"])

    def _js(self, module: str, here: Path) -> list[str]:
        bases = [here] if module.startswith(("./", "../")) else self._bases()
        for base in bases:
            target = os.path.normpath(base / module)
            got = self._first([target + e for e in JS_EXTS] + [os.path.join(target, i) for i in JS_INDEX])
            if got:
                return got
        return []

    def _rust(self, module: str, importer: str) -> list[str]:
        parts = [p for p in module.replace("::", ".").split(".") if p]
        if not parts:
            return []
        crate = self._up(Path(importer).parent, "Cargo.toml")
        src = crate / "src" if crate is not None else None
        if parts[0] in ("self", "super"):
            me = Path(importer)
            mod = me.parent if me.stem in ("mod", "lib", "main") else me.with_suffix("")  # the importer's module
            while parts and parts[0] == "super":
                mod, parts = mod.parent, parts[1:]
            parts = parts[1:] if parts and parts[0] == "self" else parts
            base = mod
        elif parts[0] == "crate" and src is not None:
            base, parts = src, parts[1:]
        elif src is not None:
            base = src  # a 2015-edition path from the crate root, else an external crate (not in the workspace)
        else:
            return []
        for n in range(len(parts), -1, -1):  # `use crate::a::b::f`: the longest prefix that is a module file
            target = base.joinpath(*parts[:n])
            got = self._first([f"{target}.rs", str(target / "mod.rs")] if n else
                              [str(base / "lib.rs"), str(base / "main.rs"), str(base / "mod.rs"), f"{base}.rs"])
            if got:
                return got
        return []

    def _go(self, module: str, here: Path) -> list[str]:
        root = self._up(here, "go.mod")
        if root is None:
            return []
        path = self._gomod.get(root)
        if path is None:
            path = ""
            try:
                for line in (root / "go.mod").read_text("utf-8", "replace").splitlines():
                    if line.startswith("module "):
                        path = line.split()[1].strip('"')
                        break
            except (OSError, IndexError):
                pass
            if len(self._gomod) > 256:
                self._gomod.clear()
            self._gomod[root] = path
        if not path or not (module == path or module.startswith(path + "/")):
            return []
        folder = root.joinpath(*module[len(path):].strip("/").split("/")) if module != path else root
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            return []
        return [p for p in (str(folder / n) for n in names if n.endswith(".go") and not n.endswith("_test.go"))
                if p in self.files]

    def _up(self, folder: Path, marker: str) -> Path | None:
        """The nearest folder from `folder` up (within a workspace root when under one) that holds `marker`."""
        key = (str(folder), marker)
        if key not in self._found:
            found, d = None, folder
            while True:
                if (d / marker).is_file():
                    found = d
                    break
                if d.parent == d or d in self.roots:
                    break
                d = d.parent
            if len(self._found) > 1024:
                self._found.clear()
            self._found[key] = found
        return self._found[key]

    # -- the fallback -----------------------------------------------------------------------------------------------

    def nearest(self, module: str, importer: str) -> list[str]:
        """Files whose path ends with the module's path (`a.b`, `a::b`, `a/b`, `x.h`), the nearest to `importer`
        only: a module found by name in two places is the one beside the code that imports it."""
        parts = module.replace("::", ".").split(".") if "/" not in module else module.split("/")
        if module.endswith((".h", ".hpp", ".hh")):
            parts, tail = [Path(module).stem], module
        else:
            parts = [p for p in parts if p not in ("", ".", "..")]
            if not parts:
                return []
            tail = "/".join(parts)
        found = []
        for path in self.by_stem.get(parts[-1], ()):
            p = path.rsplit(".", 1)[0]
            if p.endswith("/" + tail) or p.endswith("/" + tail + "/__init__") or p.endswith("/" + tail + "/index") \
                    or p.endswith("/" + tail + "/mod") or path.endswith("/" + tail):
                found.append(path)
        if len(found) < 2:
            return found
        me = Path(importer).parent.parts

        def shared(path: str) -> int:
            n = 0
            for a, b in zip(me, Path(path).parent.parts, strict=False):
                if a != b:
                    break
                n += 1
            return n

        best = max(map(shared, found))
        return sorted(f for f in found if shared(f) == best)
