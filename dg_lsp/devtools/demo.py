"""`python -m dg_lsp.devtools.demo` (`make demo`): drive the real server as an editor would and show what it does.

Starts `dg-lsp` as a subprocess speaking LSP over stdio, opens a sample Python file, asks for fills at a few
cursor positions and for a rewrite of a selection (workspace/executeCommand), and prints the canvas forming
step by step (from dg/draft notifications), the edit the server applied (workspace/applyEdit, applied to the
demo's own copy of the file and sent back as didChange, as an editor does) and each request's latency.

Each fill's outcome is the confidence gate's decision: shown (applied), or withheld with its confidence. A withheld
fill is then asked for again with `force: true` (what the "Fill hole anyway" code action sends), and the demo shows
the edit it would make without applying it: the demo model's raw fill, what `minConfidence: 0` would show. A fill
the syntax check dropped is shown as the raw canvas the model wrote. The run ends with a table of every fill.

    python -m dg_lsp.devtools.demo [--model DIR]

Without --model it uses the shipped default model (dg_lsp.devtools.client.pick_model).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from lsprotocol import types as T
from pygls.lsp.client import LanguageClient

from dg_lsp.backends.checkpoint import default_model_dir
from dg_lsp.devtools.client import open_doc, pick_model, record
from dg_lsp.documents import line_starts, offset_at

ROOT = Path(__file__).resolve().parent.parent

SAMPLE = "\n".join([
    "import math",
    "",
    "",
    "class Circle:",
    "    def __init__(self, radius):",
    "        self.radius = radius",
    "",
    "    def area(self):",
    "        return ",
    "",
    "    def scaled(self, factor):",
    "",
    "",
    "def describe(shapes):",
    "    total = sum(s.area() for s in shapes)",
    "    print()",
    "    return total",
    "",
])
# (what, line, character) for the fills, bottom-up so an applied fill does not move the next one; then a
# rewrite of the body of describe().
FILLS = [("inside `print()`", 15, 10), ("empty method body", 11, 8), ("after `return`", 8, 15)]

TTY = sys.stdout.isatty()


def style(text: str, code: str) -> str:
    return f"\033[{code}m{text}\033[0m" if TTY else text


def one_line(text: str, width: int) -> str:
    """A draft on one terminal line: newlines shown as ⏎, cut to the width."""
    flat = text.replace("\n", "⏎").replace("\t", "→")
    flat = "".join(c if c.isprintable() else "·" for c in flat)
    return flat if len(flat) <= width else flat[: width - 1] + "…"


class Editor(LanguageClient):
    """A tiny editor: one open document it keeps in sync, applying the server's edits to its own text (a client
    recorded by dg_lsp.devtools.client.record: statuses, drafts and edits)."""

    def __init__(self, width: int) -> None:
        super().__init__("dg-lsp-demo", "1")
        self.width = width
        self.text = ""
        self.uri = ""
        self.last_step: dict[str, int] = {}
        self.final: dict[str, str] = {}  # request id -> the last canvas the model wrote (its raw fill)
        self.preview: list[T.TextEdit] | None = None  # not None: edits are recorded here and refused (not applied)
        record(self, apply=self.apply, on_draft=self.show_draft)

        @self.feature(T.WINDOW_WORK_DONE_PROGRESS_CREATE)
        def progress_create(params: Any) -> None:
            return None

        @self.feature(T.WINDOW_SHOW_MESSAGE)
        def show_message(params: T.ShowMessageParams) -> None:
            print(style(f"  server says: {params.message}", "33"))

        for method in (T.PROGRESS, T.WINDOW_LOG_MESSAGE):
            self.feature(method)(lambda params: None)

    def show_draft(self, d: dict) -> None:
        if d["done"]:
            self.final[d["requestId"]] = d["text"]
        if self.preview is not None:  # the ungated run: the canvas was shown once already
            return
        # A fill of several canvases restarts the step count for each; say so.
        if not d["done"] and d["step"] < self.last_step.get(d["requestId"], 0):
            print(style("    next canvas (the ones before are now context)", "2"))
        self.last_step[d["requestId"]] = d["step"]
        # Long runs print every k-th step so a fill stays on one screen; the last step always shows.
        every = max(1, d["steps"] // 16)
        if d["done"] or d["step"] % every == 0 or d["step"] == 1:
            label = "final" if d["done"] else f"step {d['step']:>3}/{d['steps']}"
            print(style(f"    {label} │ ", "2") + one_line(d["text"], self.width - 18))

    def open(self, uri: str, text: str) -> None:
        self.uri, self.text = uri, text
        open_doc(self, uri, text)

    def apply(self, params: T.ApplyWorkspaceEditParams) -> T.ApplyWorkspaceEditResult:
        (change,) = params.edit.document_changes
        if change.text_document.version != self.versions[self.uri]:
            return T.ApplyWorkspaceEditResult(applied=False, failure_reason="stale version")
        (edit,) = change.edits
        if self.preview is not None:
            self.preview.append(edit)
            return T.ApplyWorkspaceEditResult(applied=False, failure_reason="demo preview: not applied")
        self.text = with_edit(self.text, edit)
        self.versions[self.uri] += 1
        self.text_document_did_change(T.DidChangeTextDocumentParams(
            text_document=T.VersionedTextDocumentIdentifier(uri=self.uri, version=self.versions[self.uri]),
            content_changes=[T.TextDocumentContentChangePartial(range=edit.range, text=edit.new_text)]))
        return T.ApplyWorkspaceEditResult(applied=True)

    def last_request(self) -> dict | None:
        for s in reversed(self.statuses):
            if s.get("request") is not None:
                return s["request"]
        return None


def with_edit(text: str, edit: T.TextEdit) -> str:
    starts = line_starts(text)
    start = offset_at(text, edit.range.start.line, edit.range.start.character, "utf-16", starts)
    end = offset_at(text, edit.range.end.line, edit.range.end.character, "utf-16", starts)
    return text[:start] + edit.new_text + text[end:]


def show_region(text: str, first: int, last: int, changed: tuple[int, int]) -> None:
    lines = text.split("\n")
    for i in range(max(first, 0), min(last + 1, len(lines))):
        mark = style("▌", "32") if changed[0] <= i <= changed[1] else " "
        print(f"    {i + 1:>3} {mark} {lines[i]}")


async def execute(ed: Editor, command: str, argument: dict) -> tuple[dict, float, dict | None]:
    """Run one command; (its result, its latency in ms, its dg/status request figures)."""
    t0 = time.perf_counter()
    result = await ed.workspace_execute_command_async(T.ExecuteCommandParams(command=command,
                                                                             arguments=[argument]))
    return result, (time.perf_counter() - t0) * 1e3, ed.last_request()


async def ungated(ed: Editor, command: str, argument: dict) -> T.TextEdit | None:
    """The edit the command makes past the gate (`force: true`, as "Fill hole anyway" sends it), recorded and
    refused by the demo's editor, so the file stays as it was."""
    ed.preview = []
    try:
        await execute(ed, command, {**argument, "force": True})
        return ed.preview[-1] if ed.preview else None
    finally:
        ed.preview = None


async def run_command(ed: Editor, command: str, argument: dict, what: str) -> dict:
    before = len(ed.applied_edits)
    result, ms, req = await execute(ed, command, argument)
    confidence = req.get("confidence") if req is not None else None
    gate = f"confidence {confidence:.2f}" if confidence is not None else "confidence unknown"
    if req is not None:
        gate += f", gate {req['minConfidence']:.2f}"
    raw = ed.final.get(req["id"], "") if req is not None else ""  # the model's last canvas
    if result["applied"] and len(ed.applied_edits) > before:
        (edit,) = ed.applied_edits[-1].edit.document_changes[0].edits
        raw = edit.new_text
        n_new = edit.new_text.count("\n")
        start = edit.range.start.line
        print(style(f"  gate: shown ({gate}); applied:", "32"))
        show_region(ed.text, start - 2, start + n_new + 2, (start, start + n_new))
        decision = "shown"
    elif result["reason"] == "low confidence":
        print(style(f"  gate: withheld ({gate}): the file is unchanged", "33"))
        edit = await ungated(ed, command, argument)
        if edit is not None:
            raw = edit.new_text
            n_new, start = edit.new_text.count("\n"), edit.range.start.line
            print(style("  the demo model's raw fill, without the gate (what the \"... anyway\" code action or "
                        "minConfidence: 0 would insert; not applied here):", "2"))
            show_region(with_edit(ed.text, edit), start - 2, start + n_new + 2, (start, start + n_new))
        decision = f"withheld ({confidence:.2f} < {req['minConfidence']:.2f})" if req and confidence is not None \
            else "withheld"
    else:
        print(style(f"  not applied: {result['reason']} ({gate})", "33"))
        if raw:
            print(style("  the demo model's raw canvas (what it wrote before the server's checks): ", "2")
                  + one_line(raw, ed.width - 60))
        decision = f"dropped: {result['reason']}"
    extra = ""
    if req is not None:
        extra = (f" (engine {req['engineMs']:.0f} ms, {req['steps']} steps, server {req['serverMs']:.1f} ms, "
                 f"prefix KV reused {req['reusedPrefixTokens']} tokens)")
    print(f"  latency: {style(f'{ms:.0f} ms', '1')}{extra}\n")
    return {"what": what, "ms": ms, "applied": bool(result["applied"]), "decision": decision,
            "confidence": confidence, "raw": raw}


def show_summary(rows: list[dict], width: int) -> None:
    """The last screen: every fill, the gate's decision and the fill itself (the demo model's, gated or not)."""
    print(style("the fills: the gate's decision, and each fill as the demo model wrote it", "1"))
    print(f"  {'hole':<26} {'gate':<24} {'ms':>6}   fill (raw, without the gate)")
    for r in rows:
        fill = one_line(r["raw"].strip(), max(width - 66, 20)) if r["raw"].strip() else "(nothing)"
        print(f"  {r['what']:<26} {r['decision']:<24} {r['ms']:>6.0f}   {fill}")


async def demo(model: Path, label: str, workdir: Path) -> list[dict]:
    width = shutil.get_terminal_size((100, 20)).columns
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p))
    cmd = ["-m", "dg_lsp", "--model", str(model)]
    ed = Editor(width)
    await ed.start_io(sys.executable, *cmd, env=env)
    print(f"model: {style(label, '1')}")
    if model.resolve() == default_model_dir().resolve():
        print(style("  the shipped model is a 3.1M-parameter placeholder trained for 3 CPU-hours on Python: it shows "
                    "how the server works, not what a real model writes. For real fills: dg-lsp --model DIR (or "
                    "the modelPath setting) with a DiffusionGemma checkpoint.", "2"))
        print(style("  fills below the checkpoint's calibrated confidence gate (minConfidence 0.90 for this model) "
                    "are withheld, as an editor would; the demo then shows each withheld fill anyway, labelled as the "
                    "demo model's raw fill.", "2"))
    t0 = time.perf_counter()
    await ed.initialize_async(T.InitializeParams(
        capabilities=T.ClientCapabilities(workspace=T.WorkspaceClientCapabilities(apply_edit=True)),
        initialization_options={"drafts": True}))
    ed.initialized(T.InitializedParams())
    while not any(s["state"] in ("ready", "error") for s in ed.statuses):
        await asyncio.sleep(0.01)
    if ed.statuses[-1]["state"] != "ready":
        raise SystemExit(f"the server could not load the model: {ed.statuses[-1]['message']}")
    print(f"server ready in {time.perf_counter() - t0:.1f} s\n")

    path = workdir / "shapes.py"
    path.write_text(SAMPLE)
    ed.open(path.as_uri(), SAMPLE)
    print(style(f"opened {path.name}:", "1"))
    show_region(SAMPLE, 0, SAMPLE.count("\n"), (-1, -1))
    print()

    rows = []
    for what, line, char in FILLS:
        shown = ed.text.split("\n")[line]
        print(style(f"▶ fill hole {what}: line {line + 1}, col {char + 1}", "1") + f"   {shown[:char]}▮{shown[char:]}")
        rows.append(await run_command(ed, "dg.fillHole", {"textDocument": {"uri": ed.uri},
                                                           "position": {"line": line, "character": char}}, what))
    # Fills may have added lines: find describe()'s body again, from its header to its `return`.
    what = "the body of describe()"
    lines = ed.text.split("\n")
    l0 = next(i for i, ln in enumerate(lines) if ln.startswith("def describe")) + 1
    l1 = next(i for i in range(l0, len(lines)) if lines[i].strip().startswith("return"))
    c0, c1 = 0, len(lines[l1])
    print(style(f"▶ rewrite selection: {what} (lines {l0 + 1}-{l1 + 1})", "1"))
    rows.append(await run_command(ed, "dg.rewriteSelection", {
        "textDocument": {"uri": ed.uri}, "widen": False,
        "range": {"start": {"line": l0, "character": c0}, "end": {"line": l1, "character": c1}}}, what))

    await ed.shutdown_async(None)
    ed.exit(None)
    await ed.stop()
    show_summary(rows, width)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, default=None, help="checkpoint dir (default: the shipped model)")
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    model, label = pick_model(args.model)
    with tempfile.TemporaryDirectory(prefix="dg-demo-") as tmp:
        asyncio.run(demo(model, label, Path(tmp)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
