"""`bench.reliability`'s document phases (issue 21): one very long token after the cursor in every language, a
document closed and reopened (or opened twice) under a fill, and rounds of many large documents opened and closed.

- long tokens: a line whose token after the cursor (a string, a comment, an identifier) is 6,000-10,000 characters,
  an inline completion asked at the cursor. The server must answer and live; one that dies by a signal is a native
  crash (the phase then goes on with a fresh server).
- reopen races: a fill (`dg.fillHole`, or an inline request) on one text and, in the same write, the same URI
  closed and opened again at version 1 with another text (or opened a second time without a close). Whatever the
  server then sends lands on the new text: every applyEdit for that URI, and every inline item, is a
  wrong-document edit. A control fill on a document left alone shows that fills do land.
- open/close rounds: N documents of S bytes opened and closed, round after round; the server's resident memory
  (VmRSS) after each round, minus what it was before the first.
"""

from __future__ import annotations

import random
import string
import time
from dataclasses import dataclass

from bench.rawlsp import RawServer, message
from bench.tally import FILL_OPTIONS, Tally, start

ANSWER_S = 120.0  # a fill on the shipped model on a loaded 2-core machine; a crashed server ends the wait at once


@dataclass(frozen=True)
class Lang:
    """Where a statement goes in a small program of one language: `head` + indent + the line + `tail`."""

    language_id: str
    head: str
    indent: str
    assign: str  # the start of a statement that takes an expression
    end: str  # what ends the statement
    quote: str
    comment: str
    tail: str


LANGS = [
    Lang("python", "import os\n\n\ndef main():\n", "    ", "x = ", "", "'", "#", "\n    return x\n"),
    Lang("javascript", "function main() {\n", "  ", "const x = ", ";", "'", "//", "\n  return x;\n}\n"),
    Lang("typescript", "function main(): string {\n", "  ", "const x: string = ", ";", "'", "//",
         "\n  return x;\n}\n"),
    Lang("typescriptreact", "export function Main() {\n", "  ", "const x = ", ";", "'", "//",
         "\n  return <div>{x}</div>;\n}\n"),
    Lang("rust", "fn main() {\n", "    ", "let x = ", ";", '"', "//", "\n    println!(\"{}\", x);\n}\n"),
    Lang("go", "package main\n\nfunc main() {\n", "\t", "x := ", "", '"', "//", "\n\t_ = x\n}\n"),
    Lang("java", "class Main {\n    static void run() {\n", "        ", "String x = ", ";", '"', "//",
         "\n        System.out.println(x);\n    }\n}\n"),
    Lang("c", "#include <stdio.h>\n\nint main(void) {\n", "    ", "const char *x = ", ";", '"', "//",
         "\n    return puts(x);\n}\n"),
    Lang("cpp", "#include <string>\n\nint main() {\n", "    ", "auto x = ", ";", '"', "//",
         "\n    return x[0];\n}\n"),
]
SHAPES = ("string", "comment", "identifier")
B64 = string.ascii_letters + string.digits + "+/"
IDENT = string.ascii_letters + string.digits + "_"


def long_token_doc(lang: Lang, shape: str, n: int, rng: random.Random) -> tuple[str, dict[str, int]]:
    """(text, cursor): the cursor on the statement's line, right before a token of `n` characters."""
    if shape == "string":
        head, token = lang.indent + lang.assign, lang.quote + "".join(rng.choices(B64, k=n)) + lang.quote + lang.end
    elif shape == "comment":
        head, token = lang.indent + lang.assign + "1" + lang.end + "  ", lang.comment + " " + "".join(
            rng.choices(B64, k=n))
    else:
        head, token = lang.indent + lang.assign, "v" + "".join(rng.choices(IDENT, k=n - 1)) + lang.end
    text = lang.head + head + token + lang.tail
    return text, {"line": lang.head.count("\n"), "character": len(head)}


def run_long_tokens(server: RawServer | None, tally: Tally, cases: list[tuple[Lang, str]], seed: int,
                    keep: bool = False) -> int:
    """Each case on `server` (a ready server with debounce 0, ended here unless `keep` and it survived), or on a
    fresh one after a crash. Returns how many times the server died."""
    given, rng = server, random.Random(seed)
    answered, dead = 0, []
    for k, (lang, shape) in enumerate(cases):
        if server is None:
            server = start(options=FILL_OPTIONS)
            server.wait_ready()
        n = rng.randint(6000, 10000)
        text, cursor = long_token_doc(lang, shape, n, rng)
        uri = f"file:///long-{k}-{shape}.{lang.language_id}"
        server.open(uri, text, lang.language_id)
        got = tally.answer(server, server.request("textDocument/inlineCompletion", {
            "textDocument": {"uri": uri}, "position": cursor, "context": {"triggerKind": 1}}), ANSWER_S)
        answered += got is not None
        if not server.serving():
            what = tally.ended(server)
            dead.append(f"{lang.language_id}/{shape} ({n} chars): {what or 'stopped answering'}")
            server = None
            continue
        server.notify("textDocument/didClose", {"textDocument": {"uri": uri}})
    if server is not None and not (keep and server is given):
        tally.ended(server)
    tally.row("long token", f"{len(cases)} inline requests before a 6-10k char token: answered / server died",
              f"{answered} / {len(dead)}")
    for line in dead:
        tally.row("long token", "  died on", line)
    return len(dead)


OLD_TEXT = "import os\n\ndef add(a, b):\n    return \n\nprint(add(1, 2))\n"  # the hole at (3, 11)
NEW_TEXT = "import sys\n\nresult = 42\nprint(result)\n"  # (3, 11) is inside `result`
HOLE = {"line": 3, "character": 11}
VARIANTS = [(kind, how) for kind in ("command", "inline") for how in ("close+open", "open again")]


def _ask(server: RawServer, kind: str, uri: str) -> tuple[int, bytes]:
    msg_id = server.new_id()
    if kind == "inline":
        return msg_id, message(id=msg_id, method="textDocument/inlineCompletion", params={
            "textDocument": {"uri": uri}, "position": HOLE, "context": {"triggerKind": 1}})
    return msg_id, message(id=msg_id, method="workspace/executeCommand", params={
        "command": "dg.fillHole", "arguments": [{"textDocument": {"uri": uri}, "position": HOLE}]})


def _reopen(uri: str, how: str) -> bytes:
    opened = message(method="textDocument/didOpen", params={"textDocument": {
        "uri": uri, "languageId": "python", "version": 1, "text": NEW_TEXT}})
    if how == "open again":
        return opened
    return message(method="textDocument/didClose", params={"textDocument": {"uri": uri}}) + opened


def _landed(server: RawServer, mark: int, uri: str, got: dict | None, kind: str) -> int:
    """What of the fill reached the client: applyEdits for `uri` (since `mark`), or the inline answer's items."""
    if kind == "inline":
        return len(((got or {}).get("result") or {}).get("items", []))
    return sum(change["textDocument"]["uri"] == uri for _, params in server.applied[mark:]
               for change in params["edit"].get("documentChanges", []))


def run_reopen_races(server: RawServer, tally: Tally, trials: int) -> int:
    """`trials` races per variant (command or inline; close + open, or a second open), and one control of each kind
    (no race: the fill lands), on `server` (ready, debounce 0). Returns the wrong-document edits."""
    wrong = {v: 0 for v in VARIANTS}
    control = {}
    for kind in ("command", "inline"):
        uri = f"file:///reopen-control-{kind}.py"
        server.open(uri, OLD_TEXT)
        server.state(uri)
        mark = len(server.applied)
        msg_id, ask = _ask(server, kind, uri)
        server.send(ask)
        control[kind] = _landed(server, mark, uri, tally.answer(server, msg_id, ANSWER_S), kind)
    for trial in range(trials):
        for kind, how in VARIANTS:
            uri = f"file:///reopen-{trial}-{kind}-{how.replace(' ', '-').replace('+', '-')}.py"
            server.open(uri, OLD_TEXT)
            server.state(uri)
            mark = len(server.applied)
            msg_id, ask = _ask(server, kind, uri)
            server.send(ask + _reopen(uri, how))
            wrong[kind, how] += _landed(server, mark, uri, tally.answer(server, msg_id, ANSWER_S), kind)
    tally.row("reopen", "controls (no race): edits landed, command / inline", f"{control['command']} / "
              f"{control['inline']}")
    for (kind, how), n in wrong.items():
        tally.row("reopen", f"{kind}, then {how} in the same write ({trials}x): wrong-document edits", n)
    return sum(wrong.values())


def big_doc(i: int, size: int) -> str:
    """About `size` bytes of Python, different in every document."""
    parts, total, k = [], 0, 0
    while total < size:
        part = f"def f_{i}_{k}(a, b):\n    total = a + b * {k}  # doc {i}\n    return total\n\n\n"
        parts.append(part)
        total, k = total + len(part), k + 1
    return "".join(parts)


def run_open_close(tally: Tally, rounds: int, docs: int, size: int, settle_s: float,
                   shared: RawServer | None = None) -> float:
    """Rounds of `docs` documents of `size` bytes, opened (with a short pause, as a branch switch opens them), then
    closed, on a fresh server (or `shared`, not ended here: --quick). Returns the largest VmRSS above the baseline
    after a round (MB)."""
    server = start() if shared is None else shared
    server.open("file:///baseline.py", "x = 1\n")
    server.wait_ready()
    time.sleep(settle_s)
    base = server.rss_mb()
    growth = []
    for r in range(rounds):
        uris = [f"file:///round{r}/doc{i}.py" for i in range(docs)]
        for i, uri in enumerate(uris):
            server.open(uri, big_doc(r * docs + i, size))
        tally.answer(server, server.request("dg/documentState", {"textDocument": {"uri": uris[-1]}}), ANSWER_S)
        peak = server.rss_mb()
        time.sleep(1.0)  # the server parses in the background meanwhile, in slices
        for uri in uris:
            server.notify("textDocument/didClose", {"textDocument": {"uri": uri}})
        server.state("file:///baseline.py", ANSWER_S)
        time.sleep(settle_s)
        if not server.alive():
            break
        growth.append(server.rss_mb() - base)
        tally.row("open/close", f"round {r + 1}: {docs} x {size // 1000} KB: RSS when open / after closing, above "
                  f"baseline {base:.0f} MB", f"{peak - base:.0f} / {growth[-1]:.0f}")
    if shared is None:
        tally.ended(server)
    return max(growth, default=float("nan"))
