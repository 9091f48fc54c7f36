"""How selected snippets from other files go into a prompt: as text rendered per definition, grouped by file, in a
stable order (path, then line) so that the same selection gives the same tokens and the engine's prefix KV cache
keeps serving while the user types.

FIM prompts: the files go at the head of the prefix, each introduced by the tokenizer's file-separator token when it
has one (Qwen2.5-Coder's `<|file_sep|>`, StarCoder2's `<file_sep>`, followed by the file's path and a newline, the
layout those models were trained with), else by a comment header in the language's comment syntax
(`# path/to/file.py`); the current file gets the same header last, so the model reads where the code around the
hole lives. Chat prompts: `engine.seam.HoleInfo.related`, a "related code from other files" section.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from dg_lsp.context.symbols import Definition

Encode = Callable[[str], list[int]]
COMMENT = {"python": "#", "javascript": "//", "typescript": "//", "tsx": "//", "rust": "//", "go": "//",
           "java": "//", "c": "//", "cpp": "//"}
FILE_SEPARATORS = ("<|file_sep|>", "<file_sep>")
MAX_MEMBERS = 12  # a class shows at most this many member signatures
MAX_PARAMS = 6  # the smallest form of a function names at most this many parameters
NAMES_FIRST = ("python", "javascript", "typescript", "tsx", "rust")  # `name: type` parameters: names-only forms


@dataclass(frozen=True)
class Snippet:
    """One piece of context: a definition (or a window of similar code) from another file."""

    path: str  # relative to its workspace folder (dg/status `crossFile.items`)
    line: int
    text: str
    key: str  # grammar key of its file
    why: str  # "import" | "used" | "name" | "module" | "similar"
    name: str = ""  # the definition's name ("" for a window of similar code)
    kind: str = "whole"  # "whole": the definition's stub; "signature": its smaller form; "window": similar code
    shown: str = ""  # the header's path: the shortest suffix of `path` unique in the workspace ("": `path`)

    def item(self) -> dict[str, object]:
        """dg/status `crossFile.items`: what this excerpt is."""
        return {"path": self.path, "line": self.line, "name": self.name, "kind": self.kind}


def render(d: Definition, key: str, members: list[Definition] = ()) -> str:
    """A definition as a short stub: its doc line, signature and (classes) its members' signatures."""
    c = COMMENT.get(key, "#")
    if key == "python":
        head = d.signature + ":"
        doc = f'\n    """{d.doc}"""' if d.doc else ""
        body = "".join(f"\n    {m.signature}: ..." for m in members[:MAX_MEMBERS])
        tail = "" if d.kind == "constant" else ("" if body else "\n    ...")
        return (d.signature if d.kind == "constant" else head) + doc + body + tail
    doc = f"{c} {d.doc}\n" if d.doc else ""
    if not members:
        return doc + d.signature
    body = "".join(f"\n  {m.signature}" + ("" if m.signature.endswith((";", "}")) else ";")
                   for m in members[:MAX_MEMBERS])
    return f"{doc}{d.signature} {{{body}\n}}"


def smaller(d: Definition, key: str, members: list[Definition] = ()) -> list[str]:
    """Smaller forms of `render(d, key, members)`, largest first, for a budget the stub does not fit: without the
    doc line (a class keeps its members' signatures), then the signature line alone."""
    out = []
    python = key == "python"
    bare = f"{d.signature}: ..." if python and d.kind != "constant" else render(d._replace(doc=""), key)
    callable_ = d.kind in ("function", "method") or (python and d.kind == "class")
    least = _names_only(bare, python) if key in NAMES_FIRST and callable_ else bare
    if not python and least == bare:  # a class or type: without what it extends (`interface A<T> extends B<T>`)
        least = re.split(r"\s+(?:extends|implements)\s|\s+=\s", bare, maxsplit=1)[0]
    for form in (render(d._replace(doc=""), key, members), bare, least):
        if form not in out and form != render(d, key, members):
            out.append(form)
    return out


def _names_only(stub: str, python: bool = True) -> str:
    """`def f(a: int = 1, *b: str) -> T: ...` as `def f(a, *b): ...` (Python; `function f<T>(a?: T): R` as
    `function f(a?)` in TypeScript, Rust's `fn` alike): the parameters' names, when even the signature does not
    fit; past MAX_PARAMS names, or where the index cut the signature short, `...` stands for the rest."""
    head, par, rest = stub.partition("(")
    if not par:
        return stub
    depth, params, cur, closed = 1, [], "", False
    for ch in rest:
        depth += (ch in "([{") - (ch in ")]}")
        if depth == 0:
            params.append(cur)
            closed = True
            break
        if ch == "," and depth == 1:
            params.append(cur)
            cur = ""
        else:
            cur += ch
    names = [p.split(":")[0].split("=")[0].strip() for p in params if p.strip()]
    if not closed or len(names) > MAX_PARAMS:
        names = names[:MAX_PARAMS] + ["..."]
    if not python:
        head = head.split("<")[0]  # the generics' parameters
    return f"{head.rstrip()}({', '.join(names)})" + (": ..." if python else "")


def cost(snippets: list[Snippet], current: str, key: str, encode: Encode) -> int:
    """Tokens `snippets` take in a prompt, laid out as FIM (the current file's header included) or as the chat
    section, whichever is more: the budget is a hard cap for both."""
    if not snippets:
        return 0
    chat = sum(len(encode(f"`{p}`:\n{code}\n")) for p, code in chat_related(snippets))
    return max(len(fim_ids(snippets, current, key, encode)), chat)


def file_separator(encode: Encode) -> list[int] | None:
    """The tokenizer's file-separator token ids when one of the known spellings is a single token, else None."""
    for s in FILE_SEPARATORS:
        ids = encode(s)
        if len(ids) == 1:
            return ids
    return None


def group(snippets: list[Snippet]) -> list[tuple[str, str, str]]:
    """(path as shown, key, code) per file, files and snippets in (path, line) order."""
    out: list[tuple[str, str, str]] = []
    for s in sorted(snippets, key=lambda s: (s.path, s.line)):
        if out and out[-1][0] == (s.shown or s.path):
            out[-1] = (out[-1][0], s.key, out[-1][2] + "\n" + s.text)
        else:
            out.append((s.shown or s.path, s.key, s.text))
    return out


def header(path: str, key: str) -> str:
    return f"{COMMENT.get(key, '#')} {path}\n"


def fim_ids(snippets: list[Snippet], current: str, key: str, encode: Encode) -> list[int]:
    """Token ids to put before the current file's prefix (empty when there is nothing to show)."""
    if not snippets:
        return []
    sep = file_separator(encode)
    out: list[int] = []
    for path, k, code in group(snippets):
        if sep is not None:
            out += [*sep, *encode(f"{path}\n{code}\n")]
        else:
            out += encode(f"{header(path, k)}{code}\n\n")
    out += [*sep, *encode(f"{current}\n")] if sep is not None else encode(header(current, key))
    return out


def chat_related(snippets: list[Snippet]) -> tuple[tuple[str, str], ...]:
    """engine.seam.HoleInfo.related: (path, code) per file."""
    return tuple((path, code) for path, _, code in group(snippets))
