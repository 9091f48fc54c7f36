"""Definitions and imports of one file, read from its tree-sitter tree, for all eight grammars.

Definitions: functions, classes, methods, types (struct/enum/interface/trait/typedef/alias), constants (module-level
assignments in Python, `const` in JS/TS/Rust/Go, `static final` fields in Java, `#define` in C/C++), each with its
signature (the header up to its body, whitespace collapsed), the first line of its docstring or of the comment
just above it, its line, and the class/impl/namespace it sits in. Function bodies are never entered (nested
definitions are not indexed), which keeps the walk proportional to a file's top-level structure.

Imports and the names they bind: Python (`import a.b as c`, `from .m import f as g`, relative levels kept as
leading dots) and JavaScript/TypeScript (`import d, {a as b} from './x'`, `import * as ns`, CommonJS
`const {a, b: c} = require('./y')` at top level), resolved to files by
the index; Go (`import f "fmt"`: the package name), Rust (`use a::b::{c, d as e}`) and Java (`import a.b.C`) bind
names only (resolved by name); C/C++ `#include "x.h"` binds the header file.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import NamedTuple

import tree_sitter

SIGNATURE_CHARS = 240
DOC_CHARS = 160


class Definition(NamedTuple):
    """A definition's fields. The index stores them as plain tuples (`tuple(d)`, read back with
    `Definition._make`): Python's collector stops tracking an exact tuple of strings and ints, but never a
    NamedTuple instance, and 100,000 tracked ones made every full collection a long pause (see FileEntry)."""

    name: str
    kind: str  # "function" | "method" | "class" | "type" | "constant"
    signature: str
    doc: str
    line: int  # 0-based line of the definition's first line
    parent: str = ""  # the enclosing class / impl / namespace, "" at top level


class Import(NamedTuple):
    local: str  # the name bound in the importing file
    module: str  # as written: "a.b", "..m", "./x", "fmt", "a::b", "x.h"
    name: str = ""  # the imported member ("" when `local` is the module itself)


# grammar key -> node type -> kind. "class" kinds are entered (their members are indexed with them as parent);
# "scope" nodes (impl blocks, namespaces) are entered without being a definition themselves.
_JS = {"function_declaration": "function", "generator_function_declaration": "function",
       "class_declaration": "class", "abstract_class_declaration": "class", "method_definition": "method",
       "interface_declaration": "type", "type_alias_declaration": "type", "enum_declaration": "type",
       "lexical_declaration": "constant", "variable_declaration": "constant", "internal_module": "scope"}
_C = {"function_definition": "function", "struct_specifier": "type", "enum_specifier": "type",
      "union_specifier": "type", "type_definition": "type", "preproc_def": "constant",
      "preproc_function_def": "function", "declaration": "prototype"}
KINDS: dict[str, dict[str, str]] = {
    "python": {"function_definition": "function", "class_definition": "class", "expression_statement": "constant"},
    "javascript": _JS, "typescript": _JS, "tsx": _JS,
    "rust": {"function_item": "function", "function_signature_item": "function", "struct_item": "type",
             "enum_item": "type", "union_item": "type", "trait_item": "class", "type_item": "type",
             "const_item": "constant", "static_item": "constant", "macro_definition": "function",
             "impl_item": "scope", "mod_item": "scope"},
    "go": {"function_declaration": "function", "method_declaration": "method", "type_declaration": "type",
           "const_declaration": "constant"},
    "java": {"class_declaration": "class", "interface_declaration": "class", "enum_declaration": "class",
             "record_declaration": "class", "method_declaration": "method", "constructor_declaration": "method",
             "field_declaration": "constant"},
    "c": _C,
    "cpp": {**_C, "class_specifier": "class", "namespace_definition": "scope", "template_declaration": "wrap"},
}
# Nodes entered on the way to definitions (besides class/scope bodies): wrappers and module-level control flow.
_WRAPPERS = frozenset(
    "module program source_file translation_unit export_statement decorated_definition block class_body "
    "declaration_list field_declaration_list interface_body enum_body if_statement else_clause try_statement "
    "except_clause finally_clause elif_clause preproc_ifdef preproc_if preproc_else preproc_elif linkage_specification "
    "statement_block ambient_declaration".split())
_IDENT = frozenset("identifier type_identifier field_identifier property_identifier namespace_identifier "
                   "qualified_identifier operator_name destructor_name primitive_type".split())
_HOSTS = ("decorated_definition", "export_statement")
STEP_NODES = 64
MAX_NODES = 20000  # a walk visits at most this many nodes (a generated file of 100,000 constants stops early)


def _text(node: tree_sitter.Node | None, src: bytes) -> str:
    return "" if node is None else src[node.start_byte:node.end_byte].decode("utf-8", "replace")


def _squash(s: str, cap: int) -> str:
    s = " ".join(s.split())
    return s if len(s) <= cap else s[: cap - 1] + "…"


def _c_name(node: tree_sitter.Node | None) -> tree_sitter.Node | None:
    """The identifier a C/C++ declarator names (through pointer/function/array declarators)."""
    for _ in range(8):
        if node is None or node.type in _IDENT:
            return node
        node = node.child_by_field_name("declarator") or node.child_by_field_name("name")
    return None


def _names(node: tree_sitter.Node, key: str, src: bytes) -> list[str]:
    """The names a definition node binds (most bind one; `const a = 1, b = 2` binds two)."""
    t = node.type
    if key == "python" and t == "expression_statement":
        a = node.named_children[0] if node.named_child_count else None
        left = a.child_by_field_name("left") if a is not None and a.type == "assignment" else None
        return [_text(left, src)] if left is not None and left.type == "identifier" else []
    if t in ("lexical_declaration", "variable_declaration"):
        return [_text(d.child_by_field_name("name"), src) for d in node.named_children
                if d.type == "variable_declarator" and d.child_by_field_name("name").type == "identifier"]
    if key == "go" and t in ("type_declaration", "const_declaration"):
        specs = [c for c in node.named_children if c.type in ("type_spec", "type_alias", "const_spec")]
        return [_text(s.child_by_field_name("name"), src) for s in specs if s.child_by_field_name("name")]
    if key == "java" and t == "field_declaration":
        mods = next((c for c in node.children if c.type == "modifiers"), None)
        if mods is None or "final" not in _text(mods, src) or "static" not in _text(mods, src):
            return []
        decls = [d for d in node.named_children if d.type == "variable_declarator"]
        return [_text(d.child_by_field_name("name"), src) for d in decls]
    if key == "rust" and t == "impl_item":
        return [_text(node.child_by_field_name("type"), src)]
    if key in ("c", "cpp") and t in ("function_definition", "type_definition", "declaration"):
        decl = node.child_by_field_name("declarator")
        if t == "declaration" and (decl is None or decl.type != "function_declarator"):
            return []
        n = _c_name(decl)
        return [_text(n, src)] if n is not None else []
    name = node.child_by_field_name("name")
    return [_text(name, src)] if name is not None else []


def _doc(node: tree_sitter.Node, prev: tree_sitter.Node | None, body: tree_sitter.Node | None, src: bytes) -> str:
    """The first line of a Python docstring, else of the comment right above the definition."""
    if body is not None and body.named_child_count:
        first = body.named_children[0]
        is_doc = first.type == "expression_statement" and first.named_child_count
        if is_doc and first.named_children[0].type == "string":
            for line in _text(first, src).strip("\"'rbuRBU \n").splitlines():
                if line.strip():
                    return _squash(line.strip("\"' "), DOC_CHARS)
    if prev is not None and prev.type.endswith("comment") and prev.end_point[0] >= node.start_point[0] - 1:
        for line in _text(prev, src).splitlines():
            line = line.strip().lstrip("/*#!").strip()
            if line:
                return _squash(line, DOC_CHARS)
    return ""


def _signature(node: tree_sitter.Node, body: tree_sitter.Node | None, src: bytes) -> str:
    end = body.start_byte if body is not None else node.end_byte
    if body is None and node.end_point[0] - node.start_point[0] > 3:  # a long constant: its first line
        end = src.find(b"\n", node.start_byte, end) if src.find(b"\n", node.start_byte, end) > 0 else end
    return _squash(src[node.start_byte:end].decode("utf-8", "replace").rstrip("{: \n"), SIGNATURE_CHARS)


def _push(stack: list, node: tree_sitter.Node, parent: str, in_class: bool,
          wrapper: tuple[tree_sitter.Node, tree_sitter.Node | None] | None = None) -> None:
    """Push `node`'s named children with their previous sibling; `wrapper`: (a decorated/exported definition's
    wrapper node, its previous sibling), which holds the comment above and is the host of the docstring."""
    kids = node.named_children
    stack.extend((kids[i], parent, in_class, kids[i - 1] if i else None, wrapper) for i in range(len(kids) - 1, -1, -1))


def definitions(tree: tree_sitter.Tree, key: str, src: bytes) -> list[Definition]:
    """Every definition the walk reaches (see the module docstring), in document order."""
    out: list[Definition] = []
    for _ in definition_steps(tree, key, src, out):
        pass
    return out


def definition_steps(tree: tree_sitter.Tree, key: str, src: bytes, out: list[Definition]) -> Iterator[None]:
    """`definitions` in steps: appends to `out`, yielding every STEP_NODES nodes (the index walks a big file
    between messages)."""
    kinds = KINDS.get(key, {})
    # (node, parent name, inside a class, the node's previous named sibling: prev_named_sibling is a walk from
    # the first child in tree-sitter, so a class of 500 methods would cost 500^2 steps)
    stack: list[tuple] = [(tree.root_node, "", False, None, None)]
    visited = 0
    while stack and visited < MAX_NODES:
        node, parent, in_class, prev, wrapper = stack.pop()
        visited += 1
        if visited % STEP_NODES == 0:
            yield
        kind = kinds.get(node.type)
        if kind == "prototype":
            kind = "function"
        if kind in (None, "wrap"):
            if node.type in _WRAPPERS or kind == "wrap" or node is tree.root_node:
                # a decorated or exported definition's comment sits above the wrapper
                _push(stack, node, parent, in_class, (node, prev) if node.type in _HOSTS else None)
            continue
        if key == "python" and kind == "constant" and in_class:
            continue  # class attributes are noise beside methods
        names = [n for n in _names(node, key, src) if n]
        body = node.child_by_field_name("body")
        if kind == "scope":
            if body is not None:  # an impl block's functions are methods; a namespace's are not
                member = node.type in ("impl_item",)
                _push(stack, body, names[0] if names else parent, member)
            continue
        if kind == "function" and in_class:
            kind = "method"
        host, prev = wrapper if wrapper is not None else (node, prev)  # node.parent is a walk from the root
        doc, sig = _doc(host, prev, body, src), _signature(node, body, src)
        for name in names:
            out.append(Definition(name, kind, sig, doc, node.start_point[0], parent))
        if kind == "class" and body is not None and names:
            _push(stack, body, names[0], True)


# ---- imports ----

_JS_SOURCE = re.compile(r"""['"]([^'"]+)['"]""")


def _py_imports(node: tree_sitter.Node, src: bytes) -> list[Import]:
    out = []
    if node.type == "import_statement":
        for c in node.named_children:
            if c.type == "aliased_import":
                alias, name = c.child_by_field_name("alias"), c.child_by_field_name("name")
                out.append(Import(_text(alias, src), _text(name, src)))
            elif c.type == "dotted_name":
                mod = _text(c, src)
                out.append(Import(mod.split(".")[0], mod.split(".")[0]))
                if "." in mod:  # `import a.b` also makes `a.b.f` reachable
                    out.append(Import(mod, mod))
        return out
    mod = _text(node.child_by_field_name("module_name"), src)
    for c in node.children_by_field_name("name"):
        if c.type == "aliased_import":
            alias, name = c.child_by_field_name("alias"), c.child_by_field_name("name")
            out.append(Import(_text(alias, src), mod, _text(name, src)))
        else:
            out.append(Import(_text(c, src), mod, _text(c, src)))
    return out


def _require(node: tree_sitter.Node, src: bytes) -> list[Import]:
    """CommonJS: `const x = require('./x')`, `const {a, b: c} = require('./y')`."""
    out = []
    for d in node.named_children:
        value, name = d.child_by_field_name("value"), d.child_by_field_name("name")
        if d.type != "variable_declarator" or value is None or name is None or value.type != "call_expression":
            continue
        args = value.child_by_field_name("arguments")
        m = _JS_SOURCE.match(_text(args, src).strip("()")) if args is not None else None
        if _text(value.child_by_field_name("function"), src) != "require" or m is None:
            continue
        if name.type == "identifier":
            out.append(Import(_text(name, src), m.group(1)))
        elif name.type == "object_pattern":
            for p in name.named_children:
                if p.type == "shorthand_property_identifier_pattern":
                    out.append(Import(_text(p, src), m.group(1), _text(p, src)))
                elif p.type == "pair_pattern":
                    key, local = p.child_by_field_name("key"), p.child_by_field_name("value")
                    out.append(Import(_text(local, src), m.group(1), _text(key, src)))
    return out


def _js_imports(node: tree_sitter.Node, src: bytes) -> list[Import]:
    if node.type in ("lexical_declaration", "variable_declaration"):
        return _require(node, src)
    source = node.child_by_field_name("source")
    m = _JS_SOURCE.match(_text(source, src)) if source is not None else None
    if m is None:
        return []
    mod, out = m.group(1), []
    clause = next((c for c in node.named_children if c.type == "import_clause"), None)
    for c in clause.named_children if clause is not None else ():
        if c.type == "identifier":
            out.append(Import(_text(c, src), mod, "default"))
        elif c.type == "namespace_import":
            ident = next((i for i in c.named_children if i.type == "identifier"), None)
            out.append(Import(_text(ident, src), mod))
        elif c.type == "named_imports":
            for spec in c.named_children:
                name, alias = spec.child_by_field_name("name"), spec.child_by_field_name("alias")
                if name is not None:
                    out.append(Import(_text(alias or name, src), mod, _text(name, src)))
    return out


def _other_imports(node: tree_sitter.Node, key: str, src: bytes) -> list[Import]:
    text = _text(node, src)
    if key == "go":
        out = []
        for m in re.finditer(r'(?:(\w+)\s+)?"([^"]+)"', text.removeprefix("import")):  # `import "x"`: no alias
            out.append(Import(m.group(1) or m.group(2).rsplit("/", 1)[-1], m.group(2)))
        return out
    if key == "java" and node.type == "import_declaration":
        path = text.removeprefix("import").strip().rstrip(";").removeprefix("static ").strip()
        return [Import(path.rsplit(".", 1)[-1], path.rsplit(".", 1)[0], path.rsplit(".", 1)[-1])]
    if key == "rust" and node.type == "use_declaration":
        body = text.removeprefix("pub ").removeprefix("use").strip().rstrip(";")
        base, _, group = body.partition("{")
        names = [n.strip() for n in group.rstrip("}").split(",")] if group else [base.rsplit("::", 1)[-1]]
        base = base.rstrip(":") if group else base.rsplit("::", 1)[0]
        out = []
        for n in names:
            orig, _, alias = n.partition(" as ")
            if orig and orig != "*" and "{" not in orig:
                out.append(Import((alias or orig).strip().split("::")[-1], base, orig.strip().split("::")[-1]))
        return out
    if key in ("c", "cpp") and node.type == "preproc_include":
        m = re.search(r'"([^"]+)"', text)
        return [Import(m.group(1), m.group(1))] if m else []
    return []


_JS_IMPORTS = ("import_statement", "lexical_declaration", "variable_declaration")
IMPORT_NODES = {"python": ("import_statement", "import_from_statement"), "javascript": _JS_IMPORTS,
                "typescript": _JS_IMPORTS, "tsx": _JS_IMPORTS, "go": ("import_declaration",),
                "java": ("import_declaration",), "rust": ("use_declaration",), "c": ("preproc_include",),
                "cpp": ("preproc_include",)}
IMPORT_SCAN = 512  # top-level nodes looked at (imports sit at the head of a file)


def imports(tree: tree_sitter.Tree, key: str, src: bytes) -> list[Import]:
    """The imports among the first IMPORT_SCAN top-level nodes, and the names they bind."""
    kinds, out = IMPORT_NODES.get(key, ()), []
    cursor = tree.root_node.walk()  # sibling steps: named_children would list all of a 100,000-node file
    more = cursor.goto_first_child()
    for _ in range(IMPORT_SCAN):
        if not more:
            break
        node = cursor.node
        more = cursor.goto_next_sibling()
        if node.type not in kinds:
            continue
        try:
            if key == "python":
                out += _py_imports(node, src)
            elif key in ("javascript", "typescript", "tsx"):
                out += _js_imports(node, src)
            else:
                out += _other_imports(node, key, src)
        except (AttributeError, IndexError):  # a broken import (a file being typed) binds nothing
            continue
    return [i for i in out if i.local]
