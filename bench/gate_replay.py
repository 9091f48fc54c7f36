"""The fills the confidence gate shows, replayed through the server's post-processing and syntax gate: how many survive,
and how many of those break the whole file they land in (bench.quality's "gate" figures); and what the syntax gate's
statement check costs on the keystroke path (`statement_cost`).

Each shown fill (server canvas length, confidence at or above the gate) is put where the server would put it: the
held-out hole's text is taken out (the document the user has), `hole_at_cursor` finds the server's hole at that
cursor, `postprocess` runs with the parse budget of the request, and the edit the server sends is applied: for a
keystroke the inline item (`lsp_inline_item`: cursor to the end of the replaced text on the cursor's line), for a
command (Fill hole) the whole hole (`lsp_text_edit`). The result is then parsed whole, as a user's build would:
- a syntax break: Python's parser (`compile`, PyCF_ONLY_AST) accepted the document and rejects it with the fill;
- a tree-sitter break (every language): the whole file has more ERROR/MISSING nodes than before; "_clean" counts
  those in files that had none before (in a file already broken, tree-sitter's error recovery over the whole file
  may count differently from the syntax gate's window although the fill is harmless).
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from dg_lsp.context.index import EXTENSIONS
from dg_lsp.documents import Document, Snapshot
from dg_lsp.fill.edits import lsp_inline_item, lsp_text_edit, postprocess
from dg_lsp.fill.holes import hole_at_cursor
from dg_lsp.fill.syntax import COMMAND_PARSE_BYTES, KEYSTROKE_PARSE_BYTES, error_starts, first_error_line, prepare_check

BUDGETS = {"keystroke": KEYSTROKE_PARSE_BYTES, "command": COMMAND_PARSE_BYTES}


def shown(rows: list[dict], threshold: float) -> list[dict]:
    """The rows whose server-length fill the gate shows (as engine.tools.calibrate.gate_table counts them)."""
    return [r for r in rows if r["server"]["confidence"] is not None and r["server"]["confidence"] >= threshold]


def _edited(snap: Snapshot, hole, cursor: int, fill: str, request: str) -> str:
    """The document after the server's edit for `request` ("keystroke": the inline item; "command": the hole)."""
    if request == "keystroke":
        item = lsp_inline_item(snap, hole, cursor, fill, "utf-32")
        start, end, new = (snap.offset_at(item.range.start.line, item.range.start.character, "utf-32"),
                           snap.offset_at(item.range.end.line, item.range.end.character, "utf-32"), item.insert_text)
    else:
        edit = lsp_text_edit(snap, hole, fill, "utf-32")
        start, end, new = hole.start, hole.end, edit.new_text
    return snap.text[:start] + new + snap.text[end:]


def _tree_errors(language: str, text: str) -> int:
    return len(error_starts(Document("file:///replay", language, 1, text).snapshot().tree))


def replay(rows: list[dict], texts: dict[str, str], threshold: float, log: bool = True) -> dict:
    """rows: bench.quality's per-hole rows; texts: file -> its text. Per request kind: shown_after_postprocess,
    syntax_breaks, tree_sitter_breaks(_clean), and the post-processing CPU time (ms, p50 and max) of the shown fills,
    the syntax gate's baseline included (the server prepares it beside the engine)."""
    out: dict[str, dict] = {}
    for request, budget in BUDGETS.items():
        kept, syntax, trees, clean, post_ms = 0, 0, 0, 0, []
        for r in shown(rows, threshold):
            rel = r["file"]
            language = EXTENSIONS.get(Path(rel).suffix)
            if language is None:
                continue
            text = texts[rel]
            cursor = r["start"]
            doc = text[:cursor] + text[cursor + len(r["middle"]):]
            snap = Document(f"file:///{rel}", language, 1, doc).snapshot()
            hole = hole_at_cursor(snap, cursor)
            t0 = time.process_time()  # CPU time: the figure should not depend on the machine's load
            fill = postprocess(snap, hole, r["server"]["fill"], None, budget)
            post_ms.append((time.process_time() - t0) * 1e3)
            if fill is None:
                continue
            kept += 1
            after = _edited(snap, hole, cursor, fill, request)
            broke_python = (language == "python" and first_error_line(doc) is None
                            and first_error_line(after) is not None)
            errors_before = _tree_errors(language, doc)
            broke_tree = _tree_errors(language, after) > errors_before
            syntax, trees, clean = syntax + broke_python, trees + broke_tree, clean + (broke_tree and not errors_before)
            if log and (broke_python or broke_tree):
                print(f"  {request}: {'python' if broke_python else 'tree-sitter'} break in {rel} at {cursor} "
                      f"({hole.kind}): {fill!r}")
        out[request] = {"shown_after_postprocess": kept, "syntax_breaks": syntax, "tree_sitter_breaks": trees,
                        "tree_sitter_breaks_clean": clean,
                        "post_cpu_ms_p50": round(statistics.median(post_ms), 2) if post_ms else None,
                        "post_cpu_ms_max": round(max(post_ms), 2) if post_ms else None}
    return out


def statement_cost(rows: list[dict], texts: dict[str, str], reps: int = 5) -> dict:
    """The CPU the syntax gate's statement check (dg_lsp.fill.syntax.statement_window) adds on the keystroke path: for
    every row's hole whose prepared check has one, `postprocess` at the keystroke budget with the check and with it
    removed (the window alone, as before it), alternating, the minimum of `reps` runs each."""
    added, touched = [], 0
    for r in rows:
        language = EXTENSIONS.get(Path(r["file"]).suffix)
        if language is None:
            continue
        text, cursor = texts[r["file"]], r["start"]
        snap = Document("file:///cost", language, 1, text[:cursor] + text[cursor + len(r["middle"]):]).snapshot()
        hole = hole_at_cursor(snap, cursor)
        check = prepare_check(snap, hole)
        if check is None or check.statement is None:
            continue
        touched += 1
        statement, cpu = check.statement, {True: [], False: []}
        for _ in range(reps):
            for on in (True, False):
                check.statement = statement if on else None
                t0 = time.process_time()
                postprocess(snap, hole, r["server"]["fill"], check, KEYSTROKE_PARSE_BYTES)
                cpu[on].append(time.process_time() - t0)
        added.append((min(cpu[True]) - min(cpu[False])) * 1e3)
    q = statistics.quantiles(added, n=20, method="inclusive") if len(added) > 1 else added * 19
    return {"holes": len(rows), "touched": touched, "added_cpu_ms_p50": round(statistics.median(added), 2) if added
            else None, "added_cpu_ms_p95": round(q[18], 2) if added else None,
            "added_cpu_ms_max": round(max(added), 2) if added else None}
