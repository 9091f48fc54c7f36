"""dg_lsp.wire.fastparams builds exactly what lsprotocol's cattrs converter (the one dg_lsp.wire.dispatch uses) builds
for a keystroke's didChange and inlineCompletion params, and leaves every other shape (and every value cattrs or a
validator refuses) to cattrs."""

from __future__ import annotations

import copy

import pytest
from lsprotocol import types as T
from lsprotocol.converters import get_converter

from dg_lsp.wire import fastparams

CONVERTER = get_converter()


def pos(line, character):
    return {"line": line, "character": character}


def change(*changes, uri="file:///a.py", version=3):
    return {"textDocument": {"uri": uri, "version": version}, "contentChanges": list(changes)}


def inline(line=1, character=2, kind=2, **extra):
    return {"textDocument": {"uri": "file:///a.py"}, "position": pos(line, character),
            "context": {"triggerKind": kind}, **extra}


TYPED = [
    change({"range": {"start": pos(0, 1), "end": pos(0, 1)}, "text": "y"}),
    change({"range": {"start": pos(4, 0), "end": pos(2, 7)}, "text": ""}, {"text": "whole\nfile"}),
    change({"text": "é\r\n"}, version=-7),
    change(),
    change({"range": {"start": pos(1, 1), "end": pos(1, 2)}, "text": "x", "unknownKey": 1}),
]
LEFT_TO_CATTRS = [
    change({"range": {"start": pos(0, 1), "end": pos(0, 1)}, "text": "y", "rangeLength": 0}),
    change({"range": {"start": pos(-1, 0), "end": pos(0, 0)}, "text": "y"}),
    change({"range": {"start": pos(0, True), "end": pos(0, 0)}, "text": "y"}),
    change({"range": {"start": pos(0, 1.0), "end": pos(0, 0)}, "text": "y"}),
    change({"range": None, "text": "y"}),
    change({"range": {"start": pos(0, 0)}, "text": "y"}),
    change({"range": {"start": pos(0, 0), "end": pos(0, 0)}, "text": 5}),
    change({"text": "y"}, version="3"),
    change({"text": "y"}, uri=None),
    {"textDocument": {"uri": "file:///a.py", "version": 3}},
    {"textDocument": {"uri": "file:///a.py", "version": 3}, "contentChanges": {"text": "y"}},
    [],
    None,
]


def by_cattrs(raw, cls):
    try:
        return CONVERTER.structure(copy.deepcopy(raw), cls)
    except Exception as e:  # noqa: BLE001 -- what cattrs refuses, the fast path must refuse too
        return type(e)


@pytest.mark.parametrize("raw", TYPED)
def test_did_change_params_are_what_cattrs_builds(raw):
    fast = fastparams.did_change(raw)
    assert fast is not None
    assert fast == by_cattrs(raw, T.DidChangeTextDocumentParams)
    assert [type(c) for c in fast.content_changes] == [type(c) for c in by_cattrs(raw, T.DidChangeTextDocumentParams)
                                                       .content_changes]


@pytest.mark.parametrize("raw", LEFT_TO_CATTRS)
def test_other_did_change_shapes_are_left_to_cattrs(raw):
    assert fastparams.did_change(raw) is None


@pytest.mark.parametrize("raw", [inline(), inline(0, 0, 1), inline(7, 900, 2, extra={"x": 1})])
def test_inline_params_are_what_cattrs_builds(raw):
    fast = fastparams.inline_completion(raw)
    assert fast is not None and fast == by_cattrs(raw, T.InlineCompletionParams)


@pytest.mark.parametrize("raw", [
    inline(kind=3), inline(kind="2"), inline(line=-1), inline(character=2**31), inline(workDoneToken="t"),
    {**inline(), "context": {"triggerKind": 1, "selectedCompletionInfo": None}},
    {**inline(), "textDocument": {"uri": 5}}, {"position": pos(0, 0)}, "params"])
def test_other_inline_shapes_are_left_to_cattrs(raw):
    assert fastparams.inline_completion(raw) is None
