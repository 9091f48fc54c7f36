"""Where next-edit tasks can be cut from a Python file, found with `ast`: renamable locals, functions whose
call sites can take one more argument, runs of similar calls sharing a literal, message strings, one-line
statements. Positions are 0-based lines and character (not byte) columns of the file's own text."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef, ast.ListComp, ast.SetComp,
          ast.DictComp, ast.GeneratorExp)
FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)


def split_lines(text: str) -> list[str]:
    """Lines with their "\\n", split where Python's parser and LSP split them (not at form feeds)."""
    return re.findall(r"[^\n]*\n|[^\n]+$", text)


@dataclass(frozen=True)
class Occ:
    """A span on one line: [c0, c1) in characters."""

    line: int
    c0: int
    c1: int


@dataclass
class Source:
    rel: str
    text: str
    lines: list[str]
    tree: ast.Module
    parents: dict[ast.AST, ast.AST]

    @classmethod
    def read(cls, rel: str, path: Path) -> Source:
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text)
        parents = {c: n for n in ast.walk(tree) for c in ast.iter_child_nodes(n)}
        return cls(rel, text, split_lines(text), tree, parents)

    def col(self, lineno: int, byte_col: int) -> int:
        return len(self.lines[lineno - 1].encode("utf-8")[:byte_col].decode("utf-8"))

    def occ(self, node: ast.AST, name: str | None = None) -> Occ | None:
        """The node's span (only its first len(name) characters when `name`: an arg's name without its
        annotation); None when it spans lines or the text there is not `name`."""
        if node.lineno != node.end_lineno:
            return None
        c0 = self.col(node.lineno, node.col_offset)
        c1 = c0 + len(name) if name is not None else self.col(node.lineno, node.end_col_offset)
        if name is not None and self.lines[node.lineno - 1][c0:c1] != name:
            return None
        return Occ(node.lineno - 1, c0, c1)

    def scope_of(self, node: ast.AST) -> ast.AST:
        p = self.parents.get(node)
        while p is not None and not isinstance(p, (*SCOPES, ast.Module)):
            p = self.parents.get(p)
        return p


def _params(fn: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> list[ast.arg]:
    a = fn.args
    return [*a.posonlyargs, *a.args, *([a.vararg] if a.vararg else []), *a.kwonlyargs, *([a.kwarg] if a.kwarg else [])]


def _other_bindings(fn: ast.AST) -> set[str]:
    """Names bound in ways a Name-node rename cannot follow (imports, defs, except-as, match captures,
    global/nonlocal)."""
    out: set[str] = set()
    for n in ast.walk(fn):
        if isinstance(n, ast.alias):
            out.add((n.asname or n.name).split(".")[0])
        elif isinstance(n, (*FUNCS, ast.ClassDef)) and n is not fn:
            out.add(n.name)
        elif isinstance(n, ast.ExceptHandler) and n.name:
            out.add(n.name)
        elif isinstance(n, (ast.Global, ast.Nonlocal)):
            out.update(n.names)
        elif isinstance(n, (ast.MatchAs, ast.MatchStar)) and n.name:
            out.add(n.name)
        elif isinstance(n, ast.MatchMapping) and n.rest:
            out.add(n.rest)
    return out


def _locals(src: Source, fn: ast.AST) -> tuple[set[str], set[str]]:
    """(names bound in `fn`'s own scope, names bound in a scope nested in it)."""
    own, nested = {p.arg for p in _params(fn)}, set()
    for n in (x for stmt in fn.body for x in ast.walk(stmt)):
        if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)):
            (own if src.scope_of(n) is fn else nested).add(n.id)
        elif isinstance(n, (*FUNCS, ast.Lambda)):
            nested.update(p.arg for p in _params(n))
    return own, nested


def rename_sites(src: Source) -> list[tuple[str, list[Occ]]]:
    """(name, its occurrences in order) for each local or parameter of each function that a rename of its Name
    nodes renames completely."""
    out = []
    for fn in ast.walk(src.tree):
        if not isinstance(fn, FUNCS):
            continue
        own, nested = _locals(src, fn)
        skip = nested | _other_bindings(fn) | {"self", "cls"}
        body = [x for stmt in fn.body for x in ast.walk(stmt)]
        for name in sorted(own - skip):
            if name.startswith("__"):
                continue
            occs = [src.occ(p, name) for p in _params(fn) if p.arg == name]
            occs += [src.occ(n, name) for n in body if isinstance(n, ast.Name) and n.id == name]
            if all(occs) and len(set(occs)) == len(occs):
                out.append((name, sorted(occs, key=lambda o: (o.line, o.c0))))
    return out


@dataclass
class ParamSite:
    function: str
    def_insert: Occ  # where ", p" (or "p") goes in the def's parameter list
    def_has_params: bool
    call_inserts: list[Occ]  # where ", p" (or "p") goes in each call, in document order
    call_has_args: list[bool]
    call_name_cols: list[int]  # the callee name's column at each call
    names: list[str]  # names bound in the caller before every call, passed to none of them


def _call_ok(src: Source, call: ast.Call) -> tuple[Occ, bool] | None:
    """Where a new last positional argument goes in a one-line call of positional arguments only."""
    if call.keywords or any(isinstance(a, ast.Starred) for a in call.args) or call.lineno != call.end_lineno:
        return None
    end = src.col(call.end_lineno, call.end_col_offset) - 1
    line = src.lines[call.lineno - 1]
    if line[end] != ")":
        return None
    if call.args:
        last = src.occ(call.args[-1])
        return (Occ(last.line, end, end), True) if last is not None and last.c1 == end else None
    fe = src.occ(call.func)
    return (Occ(fe.line, end, end), False) if fe is not None and line[fe.c1:end + 1] == "()" else None


def _bound_before(src: Source, call: ast.Call) -> set[str] | None:
    """Names bound in the function around `call` (parameters, assignments on earlier lines); None at module
    level or inside a lambda, class body or comprehension."""
    scope = src.scope_of(call)
    if not isinstance(scope, FUNCS):
        return None
    names = {p.arg for p in _params(scope)}
    for n in (x for stmt in scope.body for x in ast.walk(stmt)):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store) and n.lineno < call.lineno \
                and src.scope_of(n) is scope:
            names.add(n.id)
    return names


def add_param_sites(src: Source) -> list[ParamSite]:
    """Functions of plain positional parameters, defined once, referred to only by one-line positional calls
    (`f(...)`, or `self.f(...)` in its class): the def can take one more parameter and every call one more
    argument of a name the caller has."""
    defs: dict[str, int] = {}
    names: dict[str, list[ast.Name]] = {}
    attrs: dict[str, list[ast.Attribute]] = {}
    call_of: dict[int, ast.Call] = {}
    for n in ast.walk(src.tree):
        if isinstance(n, FUNCS):
            defs[n.name] = defs.get(n.name, 0) + 1
        elif isinstance(n, ast.Name):
            names.setdefault(n.id, []).append(n)
        elif isinstance(n, ast.Attribute):
            attrs.setdefault(n.attr, []).append(n)
        elif isinstance(n, ast.Call):
            call_of[id(n.func)] = n
    out = []
    for fn in ast.walk(src.tree):
        if not isinstance(fn, FUNCS) or defs[fn.name] != 1 or fn.decorator_list:
            continue
        a = fn.args
        if a.posonlyargs or a.vararg or a.kwonlyargs or a.kwarg or a.defaults:
            continue
        method = isinstance(src.parents[fn], ast.ClassDef)
        if method and (not a.args or a.args[0].arg != "self"):
            continue
        refs = (attrs if method else names).get(fn.name, [])  # must all be calls' funcs
        calls = [call_of[id(r)] for r in refs if id(r) in call_of]
        if not calls or len(calls) != len(refs):
            continue
        if method and any(not (isinstance(c.func.value, ast.Name) and c.func.value.id == "self") for c in calls):
            continue
        sites = [_call_ok(src, c) for c in calls]
        bound = [_bound_before(src, c) for c in calls]
        if not all(sites) or any(b is None for b in bound):
            continue
        line = src.lines[fn.lineno - 1]
        if a.args:
            last = src.occ(a.args[-1])
            if last is None or last.line != fn.lineno - 1 or line[last.c1:last.c1 + 1] != ")":
                continue
            def_insert = Occ(last.line, last.c1, last.c1)
        else:
            m = re.match(rf"\s*(async\s+)?def\s+{fn.name}\s*\(\)", line)
            if m is None:
                continue
            def_insert = Occ(fn.lineno - 1, m.end() - 1, m.end() - 1)
        own, nested = _locals(src, fn)
        usable = set.intersection(*bound) - own - nested - {fn.name, "self", "cls"}
        for c in calls:
            usable -= {n.id for arg in c.args for n in ast.walk(arg) if isinstance(n, ast.Name)}
        if not usable:
            continue
        order = sorted(range(len(calls)), key=lambda i: (sites[i][0].line, sites[i][0].c0))
        out.append(ParamSite(fn.name, def_insert, bool(a.args), [sites[i][0] for i in order],
                             [sites[i][1] for i in order],
                             [src.col(calls[i].lineno, calls[i].func.end_col_offset) - len(fn.name) for i in order],
                             sorted(usable)))
    return out


def string_literals(src: Source) -> list[tuple[Occ, str]]:
    """One-line plain string literals ('...' or "..." with no prefix or escape) outside f-strings."""
    out = []
    for n in ast.walk(src.tree):
        if not isinstance(n, ast.Constant) or not isinstance(n.value, str) or isinstance(src.parents.get(n),
                                                                                          ast.JoinedStr):
            continue
        o = src.occ(n)
        if o is None:
            continue
        text = src.lines[o.line][o.c0:o.c1]
        if len(text) >= 2 and text[0] in "'\"" and text == text[0] + n.value + text[0] and "\\" not in text:
            out.append((o, n.value))
    return out


def single_statement_lines(src: Source) -> list[int]:
    """Lines that hold exactly one simple statement, from the line's first character to its last."""
    out = []
    for n in ast.walk(src.tree):
        if not isinstance(n, ast.stmt) or hasattr(n, "body") or n.lineno != n.end_lineno:
            continue
        o = src.occ(n)
        line = src.lines[o.line].rstrip("\n")
        if o.c0 == len(line) - len(line.lstrip()) and o.c1 == len(line.rstrip()):
            out.append(o.line)
    return sorted(set(out))
