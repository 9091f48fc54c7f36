"""Repeated patterns in a Python file, found with `ast`: runs of similar consecutive items (sibling statements
that call one function, or one-per-line elements of a list/tuple/set/call that are calls of one function or
tuples of one length) holding the same value in the same slot (a positional or keyword argument, a tuple
element). Editing that value in the first item asks for the same edit in the others."""

from __future__ import annotations

import ast
from dataclasses import dataclass

from bench.next_edit_mine import FUNCS, Occ, Source

ItemKey = tuple[str, str]  # ("call", func dump) | ("tuple", length)


@dataclass
class Run:
    occs: list[Occ]  # the value's span in each item, in order
    value: ast.expr  # the first item's value
    kind: str  # "const" | "name" | "attr"
    alternatives: list[str]  # what a name or attribute value could become (names bound in the scope, attributes)
    others: list[int]  # lines of the group's other items with the same value in that slot (not in the run)


def _item(node: ast.AST) -> tuple[ItemKey, dict[tuple[str, object], ast.expr]] | None:
    """An item's key and its slots' values (only simple values: literals, names, `name.attr`)."""
    if isinstance(node, ast.Call):
        key: ItemKey = ("call", ast.dump(node.func))
        slots: dict[tuple[str, object], ast.expr] = {}
        for i, arg in enumerate(node.args):
            if isinstance(arg, ast.Starred):
                break
            slots[("pos", i)] = arg
        slots.update({("kw", k.arg): k.value for k in node.keywords if k.arg is not None})
    elif isinstance(node, ast.Tuple):
        key, slots = ("tuple", str(len(node.elts))), {("pos", i): e for i, e in enumerate(node.elts)}
    else:
        return None
    return key, {s: v for s, v in slots.items() if _kind(v) is not None and v.lineno == v.end_lineno}


def _kind(v: ast.expr) -> str | None:
    if isinstance(v, ast.Constant) and isinstance(v.value, (str, int)):
        return "const"
    if isinstance(v, ast.Name):
        return "name"
    if isinstance(v, ast.Attribute) and isinstance(v.value, ast.Name):
        return "attr"
    return None


Items = dict[ItemKey, dict[tuple[str, object], ast.expr]]  # one position of a group: its items by key


def _stmt_items(stmt: ast.stmt | None) -> Items:
    """A simple statement's calls (the first of each function), keyed by the function."""
    out: Items = {}
    if stmt is None or hasattr(stmt, "body"):
        return out
    for node in ast.walk(stmt):
        it = _item(node) if isinstance(node, ast.Call) else None
        if it is not None and it[0] not in out:
            out[it[0]] = it[1]
    return out


def _groups(src: Source) -> list[list[Items]]:
    """Sibling sequences whose items may form a run: statement bodies (items: the statement's calls) and the
    elements of multi-line collections and calls (one element per line)."""
    out = []
    for node in ast.walk(src.tree):
        for fld in ("body", "orelse", "finalbody"):
            stmts = getattr(node, fld, None)
            if isinstance(stmts, list) and stmts and isinstance(stmts[0], ast.stmt):
                out.append([_stmt_items(s) for s in stmts])
        elts = node.elts if isinstance(node, (ast.List, ast.Tuple, ast.Set)) else \
            node.args if isinstance(node, ast.Call) else None
        if elts and len({e.lineno for e in elts}) == len(elts):
            out.append([dict([it]) if (it := _item(e)) is not None else {} for e in elts])
    return out


def _scope_names(src: Source, node: ast.AST) -> set[str]:
    """The parameters of the function (or module) around `node` and the names it assigns above `node`'s line."""
    scope = src.scope_of(node)
    while scope is not None and not isinstance(scope, (*FUNCS, ast.Module)):
        scope = src.scope_of(scope)
    if scope is None:
        return set()
    names = {p.arg for p in (*scope.args.args, *scope.args.kwonlyargs)} if isinstance(scope, FUNCS) else set()
    for n in (x for stmt in scope.body for x in ast.walk(stmt)):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store) and n.lineno < node.lineno \
                and src.scope_of(n) is scope:
            names.add(n.id)
    return names - {"self", "cls"}


def _alternatives(src: Source, value: ast.expr, kind: str, attrs: dict[str, set[str]]) -> list[str]:
    if kind == "name":
        return sorted(n for n in _scope_names(src, value) if n != value.id and not n.startswith("__"))
    if kind == "attr":
        base = value.value.id
        return sorted(f"{base}.{a}" for a in attrs.get(base, ()) if a != value.attr and not a.startswith("__"))
    return []


def pattern_runs(src: Source, span: int) -> list[Run]:
    """The items of a group that hold the same value in the same slot of the same key, cut into runs (>= 2 items)
    whose values lie within `span` lines of the run's first; each with the lines of the rest."""
    attrs: dict[str, set[str]] = {}
    for n in ast.walk(src.tree):
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name):
            attrs.setdefault(n.value.id, set()).add(n.attr)
    out = []
    for group in _groups(src):
        same: dict[tuple, list[ast.expr]] = {}
        for items in group:
            for key, slots in items.items():
                for slot, value in slots.items():
                    same.setdefault((key, slot, ast.dump(value)), []).append(value)
        for values in same.values():
            occs = [src.occ(v) for v in values]
            if len(values) < 2 or not all(occs) or len({o.line for o in occs}) != len(occs):
                continue
            i = 0
            while i < len(occs):
                j = i + 1
                while j < len(occs) and occs[j].line <= occs[i].line + span:
                    j += 1
                if j - i >= 2:
                    kind = _kind(values[i])
                    out.append(Run(occs[i:j], values[i], kind, _alternatives(src, values[i], kind, attrs),
                                   [o.line for k, o in enumerate(occs) if not i <= k < j]))
                i = j
    return out
