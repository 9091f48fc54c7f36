"""JSON-RPC through a pipe: every body that is not a usable message gets the error the specification asks for
(with the request's id whenever it can be read), every request exactly one answer, errors carry no internals,
and the server answers the next valid message."""

from __future__ import annotations

import json

import pytest

from bench.rawlsp import ROOT, RawServer, frame, message
from dg_lsp.wire.jsonrpc import top_level_id


@pytest.fixture(scope="module")
def server():
    with RawServer() as s:
        s.initialize()
        yield s


def answers_to(server: RawServer, body: bytes | str, timeout: float = 15.0) -> list[dict]:
    """Send one framed body, then a probe: the error answers that came back before the probe's answer."""
    mark = server.mark()
    server.send(frame(body))
    assert server.serving(timeout), "the server stopped answering valid messages"
    return [m for m in server.messages[mark:] if "error" in m]


def codes(errors: list[dict]) -> list[tuple]:
    return [(e.get("id"), e["error"]["code"]) for e in errors]


@pytest.mark.parametrize("body", ["[]", "1", "null", '"text"', "true", "3.5"])
def test_json_that_is_not_an_object_is_an_invalid_request_with_id_null(server, body):
    assert codes(answers_to(server, body)) == [(None, -32600)]


def test_a_batch_gets_one_invalid_request_per_request_in_it(server):
    batch = [{"jsonrpc": "2.0", "id": "b1", "method": "dg/documentState"}, {"jsonrpc": "2.0", "method": "x"},
             {"jsonrpc": "2.0", "id": "b2", "method": "shutdown"}]
    assert codes(answers_to(server, json.dumps(batch))) == [("b1", -32600), ("b2", -32600)]  # and nothing run


@pytest.mark.parametrize("fields, expected", [
    ({"id": "j1", "method": "dg/documentState"}, ("j1", -32600)),  # no jsonrpc
    ({"jsonrpc": "1.0", "id": "j2", "method": "dg/documentState"}, ("j2", -32600)),
    ({"jsonrpc": 2.0, "id": "j3", "method": "dg/documentState"}, ("j3", -32600)),
    ({"jsonrpc": "2.0", "id": "j4"}, ("j4", -32600)),  # no method, not a response
    ({"jsonrpc": "2.0", "id": "j5", "method": 7}, ("j5", -32600)),
    ({"jsonrpc": "2.0", "id": "j6", "method": "dg/documentState", "params": 3}, ("j6", -32600)),
    ({}, (None, -32600)),
    ({"jsonrpc": "2.0", "id": None, "method": "dg/documentState"}, (None, -32600)),
    ({"jsonrpc": "2.0", "id": 1.5, "method": "dg/documentState"}, (None, -32600)),
    ({"jsonrpc": "2.0", "id": True, "method": "dg/documentState"}, (None, -32600)),
    ({"jsonrpc": "2.0", "id": {"a": 1}, "method": "dg/documentState"}, (None, -32600)),
    ({"jsonrpc": "2.0", "id": "j7", "method": "no/such/method"}, ("j7", -32601)),
    ({"jsonrpc": "2.0", "id": "j8", "method": "textDocument/inlineCompletion", "params": {"bogus": 1}},
     ("j8", -32602)),
    ({"jsonrpc": "2.0", "id": "j9", "method": "initialized", "params": {}}, ("j9", -32600)),  # a notification
    ({"jsonrpc": "2.0", "id": "j10", "method": "exit"}, ("j10", -32600)),  # answered, and no exit
])
def test_malformed_envelopes_get_one_answer(server, fields, expected):
    assert codes(answers_to(server, json.dumps(fields))) == [expected]
    assert server.alive()


@pytest.mark.parametrize("body", ['{"jsonrpc": "2.0", "method": "x"}', '{"jsonrpc": "2.0", "method": "shutdown"}',
                                  '{"jsonrpc": "2.0", "id": "r1", "result": {}}'])
def test_notifications_nobody_can_answer_get_no_answer(server, body):
    """An unknown notification, a request's method sent without an id (dropped, not run: the server is not shut
    down) and a response to nothing we asked are not answered."""
    assert answers_to(server, body) == []


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_non_json_constants_are_parse_errors(server, constant):
    body = '{"jsonrpc": "2.0", "id": "c1", "method": "dg/documentState", "params": {"x": CONST}}'.replace(
        "CONST", constant)
    assert codes(answers_to(server, body)) == [(None, -32700)]


@pytest.mark.parametrize("body", [b"\xff\xfe{}", b'{"jsonrpc": "2.0", "id": "u", "method": "m\xc3"}', b"\xef\xbb\xbf{}",
                                  b'{"jsonrpc": "2.0", "id": "t", "method": "dg/doc'])
def test_bodies_that_are_not_utf8_json_are_parse_errors(server, body):
    assert codes(answers_to(server, body)) == [(None, -32700)]


@pytest.mark.parametrize("depth", [1_000, 5_000, 200_000])
def test_params_nested_too_deep_get_an_answer_with_the_id(server, depth):
    nested = "[" * depth + "]" * depth
    body = f'{{"jsonrpc": "2.0", "id": "deep", "method": "dg/documentState", "params": {{"x": {nested}}}}}'
    assert codes(answers_to(server, body)) == [("deep", -32600)]
    assert server.alive()


def test_params_nested_below_the_limit_are_read(server):
    nested = "[" * 500 + "]" * 500
    body = f'{{"jsonrpc": "2.0", "id": "nested", "method": "no/such", "params": {{"x": {nested}}}}}'
    assert codes(answers_to(server, body)) == [("nested", -32601)]


def test_the_id_of_a_deep_message_is_found_without_recursing():
    deep = "[" * 100_000 + "]" * 100_000
    assert top_level_id(f'{{"params": {deep}, "id": 7}}') == 7
    assert top_level_id(f'{{"id": "a\\"b", "params": {deep}}}') == 'a"b'
    assert top_level_id(f'{{"params": {{"id": 3, "x": {deep}}}}}') is None  # not at the top level
    assert top_level_id(f'{{"method": "id", "params": {deep}}}') is None
    assert top_level_id('{"id": 1.5}') is None


def test_every_request_in_a_burst_gets_exactly_one_answer(server):
    ids = [f"burst-{i}" for i in range(60)]
    good = [message(id=i, method="dg/documentState", params={"textDocument": {"uri": "file:///nowhere"}})
            for i in ids[:30]]
    unknown = [message(id=i, method="no/such", params={}) for i in ids[30:]]
    server.send(b"".join(x for pair in zip(good, unknown, strict=True) for x in pair))
    for msg_id in ids:
        assert server.answer(msg_id, 15) is not None, msg_id
    assert server.serving()
    assert all(len(server.answers[i]) == 1 for i in ids)


def test_an_internal_error_carries_no_traceback_or_server_path(server):
    server.open("file:///internal.py", "x = 1\n")
    args = [{"textDocument": {"uri": "file:///internal.py"}, "position": {"line": 2**40, "character": 2**40}}]
    got = server.call("workspace/executeCommand", {"command": "dg.fillHole", "arguments": args}, 15)
    assert got is not None and "error" in got and "data" not in got["error"]
    text = got["error"]["message"]
    assert "Traceback" not in text and ".py" not in text and str(ROOT) not in text, text
