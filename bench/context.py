"""Context from other files, measured without a model: does the prompt hold the definitions a hole needs?

    python -m bench.context [--quick] [--projects email,asyncio,...] [--large DIR] [--holes N]

1. Recall and precision on real multi-file projects available offline (the standard library's packages: their
   sources are not this project's training corpus). Holes: in every file, a call `name(...)` / `mod.name(...)`
   whose `name` is bound by an import (`from .x import name`, `import pkg.x as mod`) to a top-level function or
   class of another file of the same package. Ground truth comes from Python's own `ast` (the imports and the
   top-level definitions), independent of the tree-sitter index under test; plus a CommonJS project (npm's own
   lib/, as Debian's nodejs ships it) with holes found by regular expressions (`const {f} = require('./x')`,
   `mod.f(` after `const mod = require('./x')`, ./x defining `f` at the start of a line). The hole is the rest of
   the line from the name on (the line's remainder is removed from the text the selector sees). Recall at B tokens: the
   needed definition is among the snippets chosen with a budget of B cross-file tokens; precision at 1,024: the
   share of chosen tokens in snippets that hold a needed definition.
2. Index build time and memory (RSS growth of this process) for the largest project (`--large`, default the whole
   standard-library directory capped at --large-files files; >= 2,000 files).
3. The server's added cost per keystroke, in process: p95 of Workspace.related + build_prompt against build_prompt
   alone while typing a line in a project file (the rest of the server's path does not change with the index).
4. Prefix-cache reuse while typing with context on: per keystroke, the share of the previous encoder context
   that is a prefix of the new one (the engine's KV cache serves that part), mean over the keystrokes.
Tokens: the shipped model's tokenizer. Last line JSON: {"holes", "recall": {"256", "512", "1024"}, "precision_1024",
"index_s", "index_mb", "overhead_p95_ms": {"on", "off"}, "prefix_reuse"}.
"""

from __future__ import annotations

import argparse
import ast
import json
import random
import re
import resource
import sysconfig
import time
from pathlib import Path

from tokenizers import Tokenizer

from dg_lsp.context.index import WorkspaceIndex
from dg_lsp.context.select import Selector
from dg_lsp.documents import Document
from dg_lsp.holes import hole_at_cursor
from dg_lsp.prompt import build_prompt
from engine.tokens import InfillFormat

ROOT = Path(__file__).resolve().parents[1]
STDLIB = Path(sysconfig.get_paths()["stdlib"])
BUDGETS = (256, 512, 1024)
NPM = Path("/usr/lib/node_modules/npm/lib")


def encoder():
    tok = Tokenizer.from_file(str(ROOT / "engine/default_model/tokenizer.json"))
    return lambda s: tok.encode(s, add_special_tokens=False).ids


def module_file(pkg_root: Path, importer: Path, module: str, level: int) -> Path | None:
    """The file an import names inside the package at `pkg_root` (None: outside it)."""
    if level:
        base = importer.parent
        for _ in range(level - 1):
            base = base.parent
    else:
        parts = module.split(".") if module else []
        if not parts or parts[0] != pkg_root.name:
            return None
        base, module = pkg_root.parent, module
    target = base.joinpath(*module.split(".")) if module else base
    for cand in (target.with_suffix(".py"), target / "__init__.py"):
        if cand.is_file() and cand.resolve().is_relative_to(pkg_root.resolve()):
            return cand
    return None


def top_defs(path: Path, seen: dict[Path, dict[str, int]]) -> dict[str, int]:
    """Top-level functions and classes of a file -> their 0-based line (ast: the ground truth)."""
    if path not in seen:
        try:
            body = ast.parse(path.read_text("utf-8", "replace")).body
        except SyntaxError:
            body = []
        kinds = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef
        seen[path] = {n.name: n.lineno - 1 for n in body if isinstance(n, kinds)}
    return seen[path]


def holes_of(pkg_root: Path) -> list[tuple[Path, int, str, Path, int]]:
    """(file, offset of the hole, the needed name, its file, its 0-based line) for every qualifying call."""
    out, defs = [], {}
    for f in sorted(pkg_root.rglob("*.py")):
        text = f.read_text("utf-8", "replace")
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        binds: dict[str, tuple[Path, str | None]] = {}  # local name -> (file, member or None: a module)
        for node in tree.body:
            if isinstance(node, ast.ImportFrom):
                for a in node.names:
                    src = module_file(pkg_root, f, node.module or "", node.level)
                    sub = module_file(pkg_root, f, f"{node.module or ''}.{a.name}".strip("."), node.level)
                    if sub is not None and (src is None or a.name not in top_defs(src, defs)):
                        binds[a.asname or a.name] = (sub, None)
                    elif src is not None:
                        binds[a.asname or a.name] = (src, a.name)
            elif isinstance(node, ast.Import):
                for a in node.names:
                    src = module_file(pkg_root, f, a.name, 0)
                    if src is not None and a.asname:
                        binds[a.asname] = (src, None)
        starts = [0] + [m.end() for m in re.finditer("\n", text)]
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            fn, name, where = node.func, None, None
            if isinstance(fn, ast.Name) and fn.id in binds and binds[fn.id][1]:
                src, name = binds[fn.id]
                where = fn
            elif isinstance(fn, ast.Attribute) and isinstance(fn.value, ast.Name) and fn.value.id in binds \
                    and binds[fn.value.id][1] is None:
                src, name = binds[fn.value.id][0], fn.attr
                where = fn.value
            if name is None or src.resolve() == f.resolve():
                continue
            line = top_defs(src, defs).get(name)
            if line is None:
                continue
            offset = starts[where.lineno - 1] + len(text.splitlines()[where.lineno - 1][:where.col_offset])
            out.append((f, offset, name, src, line))
    return out


_REQ_NAMES = re.compile(r"""^const\s+\{([^}]*)\}\s*=\s*require\(['"](\.[^'"]+)['"]\)""", re.M)
_REQ_MODULE = re.compile(r"""^const\s+(\w+)\s*=\s*require\(['"](\.[^'"]+)['"]\)""", re.M)
_JS_DEF = re.compile(r"^(?:async\s+)?(?:function\s*\*?\s*|class\s+|const\s+|let\s+)([A-Za-z_$][\w$]*)", re.M)


def js_file(base: Path, spec: str) -> Path | None:
    target = (base / spec).resolve()
    for cand in (target, target.with_name(target.name + ".js"), target / "index.js"):
        if cand.is_file():
            return cand
    return None


def js_holes(root: Path) -> list[tuple[Path, int, str, Path, int]]:
    """CommonJS holes by regular expressions (independent of the tree-sitter index): `name(` for a name bound by
    `const {name} = require('./x')`, `mod.name(` for `const mod = require('./x')`, where ./x defines `name` at
    the start of a line (function, class, const)."""
    out = []
    for f in sorted(root.rglob("*.js")):
        text = f.read_text("utf-8", "replace")
        binds: dict[str, tuple[Path, str | None]] = {}
        for m in _REQ_NAMES.finditer(text):
            src = js_file(f.parent, m.group(2))
            for part in m.group(1).split(","):
                key, _, local = part.strip().partition(":")
                if src is not None and key.strip():
                    binds[(local or key).strip()] = (src, key.strip())
        for m in _REQ_MODULE.finditer(text):
            src = js_file(f.parent, m.group(2))
            if src is not None:
                binds[m.group(1)] = (src, None)
        if not binds:
            continue
        body_start = max(m.end() for m in list(_REQ_NAMES.finditer(text)) + list(_REQ_MODULE.finditer(text)))
        defs_of = {}
        for m in re.finditer(r"(?<![\w$.])([A-Za-z_$][\w$]*)(?:\.([A-Za-z_$][\w$]*))?\(", text[body_start:]):
            local, member = m.group(1), m.group(2)
            if local not in binds:
                continue
            src, name = binds[local]
            name = name if name is not None and member is None else (member if name is None else None)
            if name is None or src == f:
                continue
            if src not in defs_of:
                t = src.read_text("utf-8", "replace")
                defs_of[src] = {d.group(1): t.count("\n", 0, d.start()) for d in _JS_DEF.finditer(t)}
            line = defs_of[src].get(name)
            if line is not None:
                out.append((f, body_start + m.start(), name, src, line))
    return out


def hit(s, rel: str, line: int, needed: str) -> bool:
    """Does snippet `s` hold the definition of `needed` (at `line` of `rel`, or as a member of a class stub)?"""
    return s.path == rel and (s.line == line or re.search(rf"\b(def|class)\s+{needed}\b", s.text) is not None)


def recall(projects: list[Path], n_holes: int, encode) -> dict:
    found = {b: 0 for b in BUDGETS}
    useful = total_tokens = holes = 0
    for pkg in projects:
        ix = WorkspaceIndex([pkg], max_files=100_000)
        ix.build()
        sel = Selector(ix)
        cases = js_holes(pkg) if pkg.name == "lib" and "node_modules" in pkg.parts else holes_of(pkg)
        random.Random(0).shuffle(cases)
        mine = {b: found[b] for b in BUDGETS}, holes
        for f, offset, needed, src, line in cases[:n_holes]:
            text = f.read_text("utf-8", "replace")
            end = text.find("\n", offset)
            seen = text[:offset] + (text[end:] if end >= 0 else "")  # the answer (rest of the line) removed
            rel = src.resolve().relative_to(pkg.resolve()).as_posix()
            holes += 1
            for b in BUDGETS:
                choice = sel.select(str(f.resolve()), seen, offset, b, encode)
                if any(hit(s, rel, line, needed) for s in choice.snippets):
                    found[b] += 1
                if b == 1024:
                    for s in choice.snippets:
                        n = len(encode(s.text))
                        total_tokens += n
                        useful += n if hit(s, rel, line, needed) else 0
        n = holes - mine[1]
        print(f"  {pkg}: {n} holes, recall " + ", ".join(f"{b}: {(found[b] - mine[0][b]) / max(n, 1):.3f}"
                                                        for b in BUDGETS), flush=True)
    return {"holes": holes, "recall": {str(b): round(found[b] / max(holes, 1), 3) for b in BUDGETS},
            "precision_1024": round(useful / max(total_tokens, 1), 3)}


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def index_cost(root: Path, max_files: int) -> dict:
    before = rss_mb()
    t0 = time.perf_counter()
    ix = WorkspaceIndex([root], max_files=max_files)
    worst = 0.0
    while True:  # the server's way: 1 ms steps
        s = time.perf_counter()
        done = ix.step(s + 0.001, time.perf_counter)
        worst = max(worst, time.perf_counter() - s)
        if done:
            break
    return {"index_files": len(ix.files), "index_s": round(time.perf_counter() - t0, 2),
            "index_mb": round(rss_mb() - before, 1), "index_step_max_ms": round(worst * 1e3, 2),
            "index_defs": sum(len(e.defs) for e in ix.files.values())}


def typing(project: str, encode, n_keys: int) -> dict:
    """Type a new call line in a project file, one character per keystroke; prompt cost and prefix reuse."""
    from dg_lsp.context.workspace import Workspace
    from dg_lsp.documents import DocumentStore

    pkg = STDLIB / project
    store = DocumentStore()
    ws = Workspace(store)
    ws.index = WorkspaceIndex([pkg])
    ws.index.build()
    ws.selector = Selector(ws.index)
    cases = holes_of(pkg)
    f, offset, needed, _, _ = cases[len(cases) // 2]
    text = f.read_text("utf-8", "replace")
    end = text.find("\n", offset)
    answer = text[offset:end]
    base = text[:offset] + text[end:]
    fmt = InfillFormat()
    times = {"on": [], "off": []}
    reuse = {"on": [], "off": []}
    prev = {"on": None, "off": None}
    for k in range(min(n_keys, len(answer)) + 1):
        cur = base[:offset] + answer[:k] + base[offset:]
        snap = Document(f.resolve().as_uri(), "python", k + 1, cur).snapshot()
        hole = hole_at_cursor(snap, offset + k)
        for mode in ("off", "on"):
            t = time.process_time()  # CPU time of this process: the machine's other load does not count
            related, current = ws.related(snap, hole.start, encode, 256) if mode == "on" else ((), "")
            p = build_prompt(snap, hole, encode, fmt, 1024, related, current)
            times[mode].append((time.process_time() - t) * 1e3)
            ids, last = p.context_ids, prev[mode]
            if last is not None:
                common = next((i for i, (a, b) in enumerate(zip(last, ids, strict=False)) if a != b),
                              min(len(ids), len(last)))
                reuse[mode].append(common / len(last))
            prev[mode] = ids

    def p95(xs: list[float]) -> float:
        xs = sorted(xs[1:] or xs)  # the first keystroke warms the caches
        return round(xs[min(len(xs) - 1, int(0.95 * len(xs)))], 3)

    return {"overhead_p95_ms": {"on": p95(times["on"]), "off": p95(times["off"])},
            "prefix_reuse": round(sum(reuse["on"]) / max(len(reuse["on"]), 1), 3),
            "prefix_reuse_off": round(sum(reuse["off"]) / max(len(reuse["off"]), 1), 3), "typed": answer[:n_keys]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="seconds: one package, 20 holes, a 300-file index")
    ap.add_argument("--projects", default="email,asyncio,importlib,concurrent,json,xml,multiprocessing,unittest")
    ap.add_argument("--holes", type=int, default=150, help="holes per project at most")
    ap.add_argument("--large", type=Path, default=STDLIB)
    ap.add_argument("--large-files", type=int, default=2500)
    args = ap.parse_args()
    projects = [STDLIB / p for p in (["email"] if args.quick else args.projects.split(","))]
    if not args.quick and NPM.is_dir():
        projects.append(NPM)  # a CommonJS project: npm's own sources, as Debian's nodejs package ships them
    n = 20 if args.quick else args.holes
    encode = encoder()
    # the index first, in a fresh process: RSS growth would under-count memory freed by the recall indexes
    cost = index_cost(args.large, 300 if args.quick else args.large_files)
    print(f"index of {args.large}: {cost}", flush=True)
    out = recall(projects, n, encode)
    print(f"recall on {out['holes']} holes in {', '.join(p.name for p in projects)}: {out['recall']}, "
          f"precision@1024 {out['precision_1024']}", flush=True)
    typed = typing("email", encode, 12 if args.quick else 40)
    print(f"typing {typed['typed']!r}: {typed}", flush=True)
    out.update(index_s=cost["index_s"], index_mb=cost["index_mb"], overhead_p95_ms=typed["overhead_p95_ms"],
               prefix_reuse=typed["prefix_reuse"])
    print(json.dumps(out))


if __name__ == "__main__":
    main()
