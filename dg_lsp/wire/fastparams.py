"""The params of a keystroke's two messages (didChange, inlineCompletion) built by hand, in the shape editors send.

The dispatcher (dg_lsp.wire.dispatch) structures params with lsprotocol's cattrs converter: generated code per
class, a union disambiguator for content changes and a hook per field: slow when its code is not in the CPU's
caches, as on every keystroke; building the same lsprotocol objects here is an order of magnitude cheaper. Only
exact JSON types are taken (an int that is not a bool, a str); a field these functions do not handle (`rangeLength`,
`workDoneToken`, `selectedCompletionInfo`), or a value any constructor's validator refuses (a negative line), gives
None, and the message goes through cattrs as before, which builds it or answers Invalid Params. Keys no type
declares are ignored, as cattrs ignores them.
"""

from __future__ import annotations

from typing import Any

from lsprotocol import types as T


def did_change(params: Any) -> T.DidChangeTextDocumentParams | None:
    """textDocument/didChange params, or None to leave them to cattrs."""
    try:
        return _did_change(params)
    except (TypeError, ValueError):  # a validator refused a value: cattrs gives the answer
        return None


def inline_completion(params: Any) -> T.InlineCompletionParams | None:
    """textDocument/inlineCompletion params, or None to leave them to cattrs."""
    try:
        return _inline_completion(params)
    except (TypeError, ValueError):
        return None


def _did_change(params: Any) -> T.DidChangeTextDocumentParams | None:
    if type(params) is not dict:
        return None
    doc, raw = params.get("textDocument"), params.get("contentChanges")
    if type(doc) is not dict or type(raw) is not list:
        return None
    uri, version = doc.get("uri"), doc.get("version")
    if type(uri) is not str or type(version) is not int:
        return None
    changes: list[T.TextDocumentContentChangeEvent] = []
    for change in raw:
        if type(change) is not dict or "rangeLength" in change or type(text := change.get("text")) is not str:
            return None
        if "range" not in change:  # cattrs' disambiguation: "range" is the field only the partial change has
            changes.append(T.TextDocumentContentChangeWholeDocument(text=text))
            continue
        rng = _range(change["range"])
        if rng is None:
            return None
        changes.append(T.TextDocumentContentChangePartial(range=rng, text=text))
    return T.DidChangeTextDocumentParams(text_document=T.VersionedTextDocumentIdentifier(version=version, uri=uri),
                                         content_changes=tuple(changes))  # cattrs makes a Sequence a tuple


def _inline_completion(params: Any) -> T.InlineCompletionParams | None:
    if type(params) is not dict or "workDoneToken" in params:
        return None
    doc, context = params.get("textDocument"), params.get("context")
    if type(doc) is not dict or type(context) is not dict or "selectedCompletionInfo" in context:
        return None
    uri, kind, pos = doc.get("uri"), context.get("triggerKind"), _position(params.get("position"))
    if type(uri) is not str or type(kind) is not int or pos is None:
        return None
    return T.InlineCompletionParams(
        context=T.InlineCompletionContext(trigger_kind=T.InlineCompletionTriggerKind(kind)),
        text_document=T.TextDocumentIdentifier(uri=uri), position=pos)


def _range(raw: Any) -> T.Range | None:
    if type(raw) is not dict:
        return None
    start, end = _position(raw.get("start")), _position(raw.get("end"))
    return None if start is None or end is None else T.Range(start=start, end=end)


def _position(raw: Any) -> T.Position | None:
    if type(raw) is not dict:
        return None
    line, character = raw.get("line"), raw.get("character")
    if type(line) is not int or type(character) is not int:
        return None
    return T.Position(line=line, character=character)  # its validators refuse what LSP's uinteger does not hold
