"""bench.context's JavaScript and TypeScript projects: fetching one from npm, and its holes.

Holes are found by regular expressions, independent of the tree-sitter index under test: in every .js/.ts file, a
call `name(` for a name bound by `const {name} = require('./x')` or `import {name} from './x'`, or `mod.name(` for
`const mod = require('./x')` or `import * as mod from './x'`, where ./x (./x.js, ./x.ts, ./x/index.*) defines
`name` at the start of a line (function, class, const, let; `export` allowed). A TypeScript overload list defines
a name on several lines: any of them is the definition.
"""

from __future__ import annotations

import re
import subprocess
import tarfile
from pathlib import Path

CACHE = Path.home() / ".cache" / "dg-lsp" / "bench-npm"
EXTS = (".js", ".ts", ".tsx")
_REQ_NAMES = re.compile(r"""^const\s+\{([^}]*)\}\s*=\s*require\(['"](\.[^'"]+)['"]\)""", re.M)
_REQ_MODULE = re.compile(r"""^const\s+(\w+)\s*=\s*require\(['"](\.[^'"]+)['"]\)""", re.M)
_IMPORT_NAMES = re.compile(r"""^import\s+(?:type\s+)?\{([^}]*)\}\s*from\s*['"](\.[^'"]+)['"]""", re.M)
_IMPORT_STAR = re.compile(r"""^import\s+\*\s+as\s+(\w+)\s+from\s*['"](\.[^'"]+)['"]""", re.M)
_DEF = re.compile(r"^(?:export\s+)?(?:declare\s+)?(?:default\s+)?(?:async\s+)?(?:abstract\s+)?"
                  r"(?:function\s*\*?\s*|class\s+|const\s+|let\s+)([A-Za-z_$][\w$]*)", re.M)
_CALL = re.compile(r"(?<![\w$.])([A-Za-z_$][\w$]*)(?:\.([A-Za-z_$][\w$]*))?\(")


def npm_project(spec: str, sub: str) -> Path | None:
    """`npm pack spec` into CACHE (once) and unpack it; the folder `sub` of the package, or None without npm or the
    registry (the run goes on without it)."""
    dest = CACHE / spec.replace("/", "+")
    if not (dest / "package").is_dir():
        dest.mkdir(parents=True, exist_ok=True)
        try:
            out = subprocess.run(["npm", "pack", spec, "--pack-destination", str(dest), "--silent"],
                                 capture_output=True, text=True, timeout=300, check=True).stdout.split()
        except (OSError, subprocess.SubprocessError) as e:
            print(f"  {spec}: npm pack failed ({e}); left out", flush=True)
            return None
        with tarfile.open(dest / out[-1]) as tar:
            tar.extractall(dest, filter="data")
    root = dest / "package" / sub
    return root if root.is_dir() else None


def resolve(base: Path, spec: str) -> Path | None:
    target = (base / spec).resolve()
    for cand in (target, *(target.with_name(target.name + e) for e in EXTS), *(target / f"index{e}" for e in EXTS)):
        if cand.is_file():
            return cand
    return None


def holes(root: Path) -> list[tuple[Path, int, str, Path, set[int]]]:
    """(file, offset of the hole, the needed name, its file, the 0-based lines defining it)."""
    out = []
    defs_of: dict[Path, dict[str, set[int]]] = {}
    for f in sorted(p for p in root.rglob("*") if p.suffix in EXTS and not p.name.endswith(".d.ts")):
        text = f.read_text("utf-8", "replace")
        binds: dict[str, tuple[Path, str | None]] = {}
        ends = []
        for rx in (_REQ_NAMES, _IMPORT_NAMES):
            for m in rx.finditer(text):
                ends.append(m.end())
                src = resolve(f.parent, m.group(2))
                for part in m.group(1).split(","):
                    key, _, local = part.replace(":", " as ").partition(" as ")
                    key = key.strip().removeprefix("type ").strip()
                    if src is not None and key:
                        binds[(local or key).strip()] = (src, key)
        for rx in (_REQ_MODULE, _IMPORT_STAR):
            for m in rx.finditer(text):
                ends.append(m.end())
                src = resolve(f.parent, m.group(2))
                if src is not None:
                    binds[m.group(1)] = (src, None)
        if not binds:
            continue
        body_start = max(ends)
        for m in _CALL.finditer(text, body_start):
            local, member = m.group(1), m.group(2)
            if local not in binds:
                continue
            src, name = binds[local]
            name = name if name is not None and member is None else (member if name is None else None)
            if name is None or src == f:
                continue
            if src not in defs_of:
                t = src.read_text("utf-8", "replace")
                found: dict[str, set[int]] = {}
                for d in _DEF.finditer(t):
                    found.setdefault(d.group(1), set()).add(t.count("\n", 0, d.start()))
                defs_of[src] = found
            lines = defs_of[src].get(name)
            if lines:
                out.append((f, m.start(), name, src, lines))
    return out
