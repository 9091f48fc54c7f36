"""Context from other files, measured without a model: does the prompt hold the definitions a hole needs?

    python -m bench.context [--quick] [--projects email,...] [--site pygls,...] [--npm rxjs@7.8.1:src]
                            [--large DIR] [--holes N] [--model DIR]

1. Recall and precision on real multi-file projects: eight standard-library packages (the model plays no part here;
   they are the shipped model's training corpus, which does not matter for recall), Python packages installed from
   PyPI into this environment (`--site`), npm's own CommonJS lib/ (as Debian's nodejs ships it) and a TypeScript
   package from the npm registry (`--npm`, fetched once by `npm pack`). Python holes: in every file, a call
   `name(...)` / `mod.name(...)` whose `name` is bound by an import (`from .x import name`, `import pkg.x as mod`)
   to a top-level function or class of another file of the same package; ground truth from Python's own `ast` (the
   imports and the top-level definitions), independent of the tree-sitter index under test. JavaScript and
   TypeScript holes: bench.context_es (regular expressions over require/import and definitions). The hole is the
   rest of the line from the name on (the line's remainder is removed from the text the selector sees). Recall at
   B tokens: the needed definition's name and signature (its stub or a smaller form) are among the snippets chosen
   with a budget of B cross-file tokens; precision at
   1,024: the share of chosen tokens in snippets that hold a needed definition. Also per project.
2. Index build time and memory (RSS growth of this process) for the largest project (`--large`, default the whole
   standard-library directory capped at --large-files files; >= 2,000 files).
3. The server's added cost per keystroke over stdio (bench.context_overhead): two real server processes on the
   --large folder as their workspace, context on and off, the same keystrokes alternating between them; p95 of the
   server overhead (bench.lsp_latency's figure) while the index builds and once it is ready, and the event loop's
   CPU per keystroke. Beside it, in process: Workspace.related + build_prompt against build_prompt alone.
4. Prefix-cache reuse while typing with context on: per keystroke, the share of the previous encoder context
   that is a prefix of the new one (the engine's KV cache serves that part), mean over the keystrokes.
Decoy projects: email and json copied twice into one workspace (the package at its root, the same again under
vendor/): a hit must come from the package itself. Tokens: the shipped model's tokenizer; a budget counts the
layout's headers (dg_lsp.context.layout.cost). Last line JSON: {"holes", "recall": {"32", "64", "256", "1024"},
"precision_1024",
"index_s", "index_mb", "overhead_p95_ms": {"on", "off"}, "prefix_reuse", "per_project", ...}.
"""

from __future__ import annotations

import argparse
import ast
import json
import random
import re
import resource
import shutil
import sysconfig
import tempfile
import time
from pathlib import Path

from tokenizers import Tokenizer

from bench import context_overhead
from bench.common import pick_model
from bench.context_es import holes as es_holes
from bench.context_es import npm_project
from dg_lsp.context.index import WorkspaceIndex
from dg_lsp.context.select import Selector
from dg_lsp.documents import Document
from dg_lsp.fill.holes import hole_at_cursor
from dg_lsp.fill.prompt import build_prompt
from engine.tokens import InfillFormat

ROOT = Path(__file__).resolve().parents[1]
STDLIB = Path(sysconfig.get_paths()["stdlib"])
BUDGETS = (32, 64, 256, 1024)
DECOYS = ("email", "json")  # stdlib packages also benched with a copy of themselves deeper in the tree
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


def hit(s, rel: str, lines: set[int], needed: str) -> bool:
    """Does snippet `s` hold the needed definition's name and signature: `rel`'s definition at one of `lines`
    (whole or its smaller form), or its `def`/`class`/`function` line as a member of a class stub?"""
    return s.path == rel and ((s.line in lines and needed in s.text) or
                              re.search(rf"\b(def|class|function)\s+{re.escape(needed)}\b", s.text) is not None)


def decoy_project(pkg: Path, tmp: Path) -> tuple[Path, Path]:
    """A workspace holding `pkg` at its root and the same package again under vendor/ (a same-named file deeper in
    the tree, never the module): (workspace root, the package benched)."""
    root = tmp / f"decoy-{pkg.name}"
    for dest in (root / pkg.name, root / "vendor" / pkg.name):
        shutil.copytree(pkg, dest, ignore=shutil.ignore_patterns("__pycache__", "test*"))
    return root, root / pkg.name


def project_name(pkg: Path) -> str:
    """How a project shows in the output: a stdlib package's name, an npm package's name and folder."""
    if "site-packages" in pkg.parts:
        return "pypi:" + pkg.name
    if pkg.is_relative_to(STDLIB):
        return pkg.relative_to(STDLIB).as_posix()
    parts = pkg.parts
    at = max((i for i, x in enumerate(parts) if x in ("node_modules", "package")), default=len(parts) - 2)
    name = parts[at + 1] if parts[at] == "node_modules" else parts[at - 1].rsplit("@", 1)[0].replace("+", "/")
    rest = parts[at + 2:] if parts[at] == "node_modules" else parts[at + 1:]
    return "/".join([name, *rest])


def recall(projects: list[Path | tuple[Path, Path]], n_holes: int, encode) -> dict:
    """`projects`: package folders, or (workspace root, package folder) where the workspace holds more (decoys)."""
    found = {b: 0 for b in BUDGETS}
    useful = total_tokens = holes = 0
    per: dict[str, dict] = {}
    for item in projects:
        top, pkg = item if isinstance(item, tuple) else (item, item)
        ix = WorkspaceIndex([top], max_files=100_000)
        ix.build()
        sel = Selector(ix)
        python = next(pkg.rglob("*.py"), None) is not None
        cases = holes_of(pkg) if python else es_holes(pkg)
        random.Random(0).shuffle(cases)
        mine = {b: found[b] for b in BUDGETS}, holes
        for f, offset, needed, src, lines in cases[:n_holes]:
            lines = {lines} if isinstance(lines, int) else lines
            text = f.read_text("utf-8", "replace")
            end = text.find("\n", offset)
            seen = text[:offset] + (text[end:] if end >= 0 else "")  # the answer (rest of the line) removed
            rel = src.resolve().relative_to(top.resolve()).as_posix()
            holes += 1
            for b in BUDGETS:
                choice = sel.select(str(f.resolve()), seen, offset, b, encode)
                if any(hit(s, rel, lines, needed) for s in choice.snippets):
                    found[b] += 1
                if b == 1024:
                    for s in choice.snippets:
                        n = len(encode(s.text))
                        total_tokens += n
                        useful += n if hit(s, rel, lines, needed) else 0
        n = holes - mine[1]
        name = project_name(pkg) if top == pkg else f"decoy:{pkg.name}"
        per[name] = {"files": len(ix.files), "holes": n, "recall": {
            str(b): round((found[b] - mine[0][b]) / max(n, 1), 3) for b in BUDGETS}}
        print(f"  {pkg}: {per[name]}", flush=True)
    return {"holes": holes, "recall": {str(b): round(found[b] / max(holes, 1), 3) for b in BUDGETS},
            "precision_1024": round(useful / max(total_tokens, 1), 3), "per_project": per}


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
    ap.add_argument("--site", default="pygls,cattrs,jinja2,_pytest,hypothesis,huggingface_hub",
                    help="packages of this environment's site-packages (installed from PyPI), comma-separated")
    ap.add_argument("--npm", default="rxjs@7.8.1:src", help="npm packages (spec:folder, comma-separated) fetched "
                    "with `npm pack` into ~/.cache/dg-lsp/bench-npm; '' for none")
    ap.add_argument("--holes", type=int, default=150, help="holes per project at most")
    ap.add_argument("--large", type=Path, default=STDLIB)
    ap.add_argument("--large-files", type=int, default=2500)
    ap.add_argument("--model", type=Path, default=None, help="checkpoint for the servers of the overhead run "
                    "(default: the shipped model)")
    args = ap.parse_args()
    projects = [STDLIB / p for p in (["email"] if args.quick else args.projects.split(","))]
    site = Path(sysconfig.get_paths()["purelib"])
    projects += [site / p for p in ([] if args.quick or not args.site else args.site.split(","))
                 if (site / p).is_dir()]
    if not args.quick and NPM.is_dir():
        projects.append(NPM)  # a CommonJS project: npm's own sources, as Debian's nodejs package ships them
    for item in ([] if args.quick or not args.npm else args.npm.split(",")):
        spec, _, sub = item.partition(":")
        got = npm_project(spec, sub)
        if got is not None:
            projects.append(got)  # a TypeScript project from the npm registry
    n = 20 if args.quick else args.holes
    encode = encoder()
    decoys = tempfile.TemporaryDirectory()
    projects += [decoy_project(STDLIB / p, Path(decoys.name)) for p in (DECOYS[:1] if args.quick else DECOYS)]
    # the index first, in a fresh process: RSS growth would under-count memory freed by the recall indexes
    cost = index_cost(args.large, 300 if args.quick else args.large_files)
    print(f"index of {args.large}: {cost}", flush=True)
    out = recall(projects, n, encode)
    print(f"recall on {out['holes']} holes in {', '.join(out['per_project'])}: {out['recall']}, "
          f"precision@1024 {out['precision_1024']}", flush=True)
    typed = typing("email", encode, 12 if args.quick else 40)
    print(f"typing {typed['typed']!r} in process: {typed}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        model, label = pick_model(Path(tmp), args.model, tokenizer=True)
        folder = STDLIB / "email" if args.quick else args.large  # quick: a folder indexed in seconds
        stdio = context_overhead.run(model, folder, STDLIB / context_overhead.FILE, args.quick, args.large_files)
    print(f"overhead over stdio ({label}): {json.dumps(stdio)}", flush=True)
    out.update(index_s=cost["index_s"], index_mb=cost["index_mb"], overhead_p95_ms=stdio["overhead_p95_ms"],
               overhead_inprocess_cpu_p95_ms=typed["overhead_p95_ms"],
               overhead_loop_cpu_p95_ms={k: v["p95"] for k, v in stdio["loop_cpu_ms"].items()},
               prefix_reuse=typed["prefix_reuse"])
    print(json.dumps(out))


if __name__ == "__main__":
    main()
