"""Malformed LSP input for `bench.reliability`: generated variations (fixed seed) of every kind of bad frame and bad
message, each with the answers the server owes for it.

A `Case` holds the bytes to send and `expect`: the request ids in it that must get exactly one answer, each with
the error codes allowed (None: a result). Requests whose frame is damaged cannot be read, so they expect nothing;
the bench sends a valid probe after every case to check the server still reads and answers.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bench.rawlsp import frame

BODY_LIMIT = 64 * 1024 * 1024  # docs/PROTOCOL.md
PARSE, INVALID, NOT_FOUND, PARAMS = -32700, -32600, -32601, -32602
RESULT = None  # expected instead of error codes: the request is read and answered with a result
DOC_URI = "file:///bench-doc.py"  # the bench opens it first: a dg/documentState on it has a result


@dataclass
class Case:
    category: str
    data: bytes
    expect: dict[Any, frozenset[int] | None] = field(default_factory=dict)


def _req(msg_id: Any, method: str = "dg/documentState", params: Any = None, **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"jsonrpc": "2.0", "id": msg_id, "method": method, **extra}
    out["params"] = params if params is not None else {"textDocument": {"uri": DOC_URI}}
    return out


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj).encode()


def _bad_length(rng: random.Random, n: str) -> Case:
    value = rng.choice([b"-%d" % rng.randint(1, 10**6), b"abc", b"0x1f", b"1e3", b"", b"+12", b"1.5", b"12 34",
                        "٣٤".encode(), b"\xff\xfe", b"99999999999999999999999"])
    return Case("Content-Length not a byte count", b"Content-Length: " + value + b"\r\n\r\n" + _dumps(_req(n)))


def _zero_length(rng: random.Random, n: str) -> Case:
    return Case("Content-Length 0", b"Content-Length: 0\r\n\r\n")


def _huge_length(rng: random.Random, n: str) -> Case:
    value = rng.choice([10**12, 2**63, 10**19, BODY_LIMIT + 1, rng.randint(BODY_LIMIT + 1, 10**15)])
    return Case("Content-Length over the limit", b"Content-Length: %d\r\n\r\n" % value + _dumps(_req(n)))


def _long_header(rng: random.Random, n: str) -> Case:
    size = rng.choice([70_000, 300_000, (1 << 20) + 1])
    return Case("header line over the limit", b"X-Junk: " + b"x" * size + b"\r\n\r\n")


def _short_length(rng: random.Random, n: str) -> Case:
    body = _dumps(_req(n, params={"textDocument": {"uri": "file:///x.py"}, "pad": "p" * rng.randint(0, 4000)}))
    return Case("Content-Length too short", b"Content-Length: %d\r\n\r\n" % rng.randint(1, len(body) - 1) + body)


def _long_length(rng: random.Random, n: str) -> Case:
    body = _dumps(_req(n))
    return Case("Content-Length too long", b"Content-Length: %d\r\n\r\n" % (len(body) + rng.randint(1, 20)) + body)


def _lenient_header(rng: random.Random, n: str) -> Case:
    body = _dumps(_req(n))
    header = rng.choice([b"content-length: %d\r\n\r\n", b"CONTENT-LENGTH:%d\r\n\r\n", b"Content-Length: %d\n\n",
                         b"Content-Type: application/vscode-jsonrpc; charset=utf-8\r\nContent-Length: %d\r\n\r\n",
                         b"Content-Length: %d\r\nContent-Length: %d\r\n\r\n", b"Content-Length:   %d  \r\n\r\n"])
    return Case("lenient header (read)", header.replace(b"%d", b"%d" % len(body)) + body, {n: RESULT})


def _no_frame(rng: random.Random, n: str) -> Case:
    body = _dumps(_req(n))
    data = rng.choice([b"Content-Type: text/plain\r\n\r\n" + body, b"Content-Length: 5\r\nContent-Length: 6\r\n\r\n",
                       bytes(rng.randrange(256) for _ in range(rng.randint(1, 300))) + b"\r\n", body,
                       b"Content-Length 5\r\n\r\nhello", b"\r\n" * rng.randint(1, 5) + b"garbage\n"])
    return Case("not a frame", data)


def _not_utf8(rng: random.Random, n: str) -> Case:
    bad = bytes(rng.choice([0xFF, 0xFE, 0xC3, 0x80, 0xED]) for _ in range(rng.randint(1, 8)))
    return Case("body not UTF-8", frame(b'{"jsonrpc": "2.0", "id": "' + n.encode() + b'", "method": "' + bad + b'"}'))


def _not_json(rng: random.Random, n: str) -> Case:
    text = _dumps(_req(n))
    # a strict prefix of an object never parses, nor does it with these tails
    return Case("body not JSON", frame(text[:rng.randint(0, len(text) - 1)] + rng.choice([b"", b",,", b"'", b"]"])))


def _constant(rng: random.Random, n: str) -> Case:
    const = rng.choice(["NaN", "Infinity", "-Infinity"])
    return Case("NaN/Infinity", frame(_dumps(_req(n, params={"x": 0})).replace(b"0}", const.encode() + b"}")))


def _not_object(rng: random.Random, n: str) -> Case:
    body = rng.choice([b"[]", b"1", b"null", b'"s"', b"true", b"-3.5", b"[1, 2]"])
    return Case("JSON not an object", frame(body))


def _batch(rng: random.Random, n: str) -> Case:
    ids = [f"{n}.{i}" for i in range(rng.randint(1, 5))]
    return Case("batch", frame(_dumps([_req(i) for i in ids])), {i: frozenset({INVALID}) for i in ids})


def _bad_envelope(rng: random.Random, n: str) -> Case:
    msg = _req(n)
    kind = rng.randrange(5)
    if kind == 0:
        del msg["jsonrpc"]
    elif kind == 1:
        msg["jsonrpc"] = rng.choice(["1.0", 2, None, "2"])
    elif kind == 2:
        del msg["method"]
    elif kind == 3:
        msg["method"] = rng.choice([1, None, ["x"], {"a": 1}])
    else:
        msg["params"] = rng.choice([1, "s", True])
    return Case("bad jsonrpc/method/params", frame(_dumps(msg)), {n: frozenset({INVALID})})


def _bad_id(rng: random.Random, n: str) -> Case:
    return Case("bad id", frame(_dumps(_req(rng.choice([None, 1.5, True, False, {"a": 1}, [1]])))))


def _deep(rng: random.Random, n: str) -> Case:
    depth = rng.choice([1_000, 1_500, 5_000, 50_000])
    opener, closer = rng.choice([("[", "]"), ('{"a":', "}")])
    body = json.dumps(_req(n, params={"x": 0})).replace('"x": 0', '"x": ' + opener * depth + "1" + closer * depth)
    return Case("nested >= 1,000 deep", frame(body), {n: frozenset({INVALID})})


def _unknown_method(rng: random.Random, n: str) -> Case:
    method = rng.choice(["no/such", "textDocument/noSuch", "$/unknown", "dg/nothing"])
    return Case("unknown method", frame(_dumps(_req(n, method=method))), {n: frozenset({NOT_FOUND})})


def _invalid_params(rng: random.Random, n: str) -> Case:
    method, params = rng.choice([
        ("textDocument/inlineCompletion", {"bogus": 1}), ("textDocument/completion", {"position": "x"}),
        ("textDocument/codeAction", []), ("workspace/executeCommand", {"command": 5}),
        ("workspace/executeCommand", {"command": "dg.fillHole", "arguments": ["x"]}),
        ("workspace/executeCommand", {"command": "dg.nope", "arguments": []}),
        ("workspace/executeCommand", {"command": "dg.fillHole", "arguments": [
            {"textDocument": {"uri": DOC_URI}, "position": {"line": 2**40, "character": 2**40}}]}),
        ("dg/documentState", {"textDocument": {}})])
    return Case("invalid params", frame(_dumps(_req(n, method=method, params=params))), {n: frozenset({PARAMS})})


def _kind_mismatch(rng: random.Random, n: str) -> Case:
    if rng.random() < 0.5:
        method = rng.choice(["initialized", "exit", "textDocument/didOpen", "$/cancelRequest"])
        return Case("notification sent as request", frame(_dumps(_req(n, method=method, params={}))),
                    {n: frozenset({INVALID})})
    method = rng.choice(["shutdown", "initialize", "textDocument/inlineCompletion"])
    return Case("request sent as notification", frame(_dumps({"jsonrpc": "2.0", "method": method, "params": {}})))


GENERATORS: list[tuple[Callable[[random.Random, str], Case], int]] = [  # (generator, weight)
    (_bad_length, 8), (_zero_length, 2), (_huge_length, 4), (_long_header, 1), (_short_length, 6), (_long_length, 6),
    (_lenient_header, 5), (_no_frame, 6), (_not_utf8, 5), (_not_json, 6), (_constant, 4), (_not_object, 4),
    (_batch, 4), (_bad_envelope, 8), (_bad_id, 4), (_deep, 3), (_unknown_method, 4), (_invalid_params, 6),
    (_kind_mismatch, 5)]


def malformed_cases(count: int, seed: int = 0) -> list[Case]:
    """`count` cases drawn by weight, with ids m0, m1, ... (a batch's requests m<i>.<j>)."""
    rng = random.Random(seed)
    gens, weights = zip(*GENERATORS, strict=True)
    return [rng.choices(gens, weights)[0](rng, f"m{i}") for i in range(count)]
