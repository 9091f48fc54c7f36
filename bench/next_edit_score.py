"""Scoring one next-edit answer: check it against the wire contract, apply it, and compare with the task."""

from __future__ import annotations

import ast
import warnings
from typing import Any

from bench.common import median, percentile
from bench.next_edit_mine import split_lines
from bench.next_edit_tasks import Task
from dg_lsp.documents import line_starts, offset_at
from dg_lsp.fill.syntax import error_starts
from dg_lsp.languages import parser

ACCEPT = "dg.acceptNextEdit"


def contract_errors(res: Any, uri: str, version: int) -> list[str]:
    """What in a copilotInlineEdit result breaks the agreed wire (NES_PROTOCOL.md / docs/PROTOCOL.md)."""
    if not isinstance(res, dict) or not isinstance(res.get("edits"), list):
        return [f"result is not {{edits: [...]}}: {str(res)[:120]}"]
    errs, prev_end = [], (-1, -1)
    for e in res["edits"]:
        rng, doc, cmd = e.get("range") or {}, e.get("textDocument") or {}, e.get("command") or {}
        if not isinstance(e.get("text"), str) or "start" not in rng or "end" not in rng:
            errs.append(f"edit without text or range: {str(e)[:120]}")
            continue
        start = (rng["start"]["line"], rng["start"]["character"])
        end = (rng["end"]["line"], rng["end"]["character"])
        if start > end:
            errs.append(f"range start after end: {rng}")
        if start < prev_end:
            errs.append("edits overlap or are not in document order")
        prev_end = end
        if doc.get("uri") != uri or doc.get("version") != version:
            errs.append(f"textDocument {doc} does not echo the request's uri/version {version}")
        args = cmd.get("arguments") or [{}]
        if cmd.get("command") != ACCEPT or not isinstance(args[0], dict) \
                or not {"uri", "version", "documentOpen", "id"} <= set(args[0]):
            errs.append(f"command is not {ACCEPT} with [{{uri, version, documentOpen, id}}]: {str(cmd)[:160]}")
    return errs


def applicable(res: object) -> bool:
    """An answer whose edits can be applied (each has a text and a range), whatever else is wrong with it."""
    return isinstance(res, dict) and isinstance(res.get("edits"), list) and all(
        isinstance(e, dict) and isinstance(e.get("text"), str) and isinstance(e.get("range"), dict)
        and {"start", "end"} <= set(e["range"]) for e in res["edits"])


def apply_edits(text: str, edits: list[dict]) -> str:
    """The text with the edits applied (all against the same version: back to front)."""
    starts = line_starts(text)
    spans = []
    for e in edits:
        r = e["range"]
        spans.append((offset_at(text, r["start"]["line"], r["start"]["character"], "utf-16", starts),
                      offset_at(text, r["end"]["line"], r["end"]["character"], "utf-16", starts), e["text"]))
    for a, b, t in sorted(spans, reverse=True):
        text = text[:a] + t + text[b:]
    return text


def syntax_errors(text: str) -> tuple[int, bool]:
    """(tree-sitter ERROR/MISSING nodes in the whole file, whether Python's parser accepts it)."""
    tree = parser("python").parse(text.encode("utf-8"))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ast.parse(text)
        ok = True
    except (SyntaxError, ValueError):
        ok = False
    return len(error_starts(tree)), ok


def score(task: Task, res: dict, ms: float) -> dict:
    """One row: what was proposed and how it compares with the task."""
    edits = res.get("edits") or []
    result = apply_edits(task.after, edits) if edits else task.after
    changed = result != task.after
    lines, before, expected = split_lines(result), split_lines(task.before), split_lines(task.expected)
    after = split_lines(task.after)
    lo, hi = task.window
    tail = len(lines) - (len(after) - hi)  # the window's end in the result (a proposal may add or remove lines)
    row = {"id": task.id, "kind": task.kind, "subkind": task.subkind, "no_edit": task.no_edit, "ms": round(ms, 1),
           "shown": bool(edits), "changed": changed, "exact": result == task.expected,
           "exact_window": lines[lo:tail] == expected[lo:hi],
           "reversal": changed and task.edit_line < len(lines) and lines[task.edit_line] == before[task.edit_line]
           and before[task.edit_line] != after[task.edit_line],
           "outside_window": any(e["range"]["start"]["line"] < lo or (e["range"]["end"]["line"],
                                                                       e["range"]["end"]["character"]) > (hi, 0)
                                 for e in edits),
           "syntax_break": False, "edits": edits}
    if changed:
        (ts0, py0), (ts1, py1) = syntax_errors(task.after), syntax_errors(result)
        row["syntax_break"] = ts1 > ts0 or (py0 and not py1)
    return row


def summarize(rows: list[dict]) -> dict:
    """The headline figures over `rows` (one noise setting)."""
    n = len(rows)
    shown = [r for r in rows if r["shown"]]
    no_edit = [r for r in rows if r["no_edit"]]
    silent = [r for r in rows if not r["changed"]]
    ms = [r["ms"] for r in rows]

    def share(xs: list, of: list) -> float | None:
        return round(len(xs) / len(of), 4) if of else None

    return {
        "tasks": n,
        "exact": share([r for r in rows if r["exact"]], rows),
        "exact_window": share([r for r in rows if r["exact_window"]], rows),
        "exact_edit_tasks": share([r for r in rows if r["exact"] and not r["no_edit"]],
                                  [r for r in rows if not r["no_edit"]]),
        "no_edit_precision": share([r for r in no_edit if not r["changed"]], no_edit),
        "silent_when_right": share([r for r in silent if r["no_edit"]], silent),
        "reversals": share([r for r in shown if r["reversal"]], shown) if shown else 0.0,
        "reversal_count": sum(r["reversal"] for r in shown),
        "syntax_breaks": sum(r["syntax_break"] for r in rows),
        "outside_window": sum(r["outside_window"] for r in rows),
        "shown": share(shown, rows),
        # the engine's confidence in its answer (dg/status), over the answers the model ran for: how sure the model
        # is of a rewrite seeded from the window's own tokens against one from noise
        "confidence_p50": round(median(conf), 4) if (conf := [r["confidence"] for r in rows
                                                               if r.get("confidence") is not None]) else None,
        "p50_ms": round(median(ms), 1) if ms else None,
        "p95_ms": round(percentile(ms, 0.95), 1) if ms else None,
    }


def by_kind(rows: list[dict]) -> dict[str, dict]:
    kinds = sorted({f"{r['kind']}/{r['subkind']}" for r in rows})
    out = {}
    for k in kinds:
        rs = [r for r in rows if f"{r['kind']}/{r['subkind']}" == k]
        out[k] = {"n": len(rs), "exact": round(sum(r["exact"] for r in rs) / len(rs), 3),
                  "shown": round(sum(r["shown"] for r in rs) / len(rs), 3),
                  "reversals": sum(r["reversal"] for r in rs), "syntax_breaks": sum(r["syntax_break"] for r in rs)}
    return out
