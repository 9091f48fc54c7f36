"""JSON-RPC 2.0 envelope: a frame's body -> one message object, or the error answer the specification asks for.

- not UTF-8, not JSON, or JSON with `NaN`/`Infinity` (not JSON by RFC 8259) -> Parse error (-32700), id null;
- nested deeper than Python's parser goes (about 1,000 levels) -> Invalid Request (-32600) with the message's id,
  found by a scan that does not recurse;
- JSON that is not an object (`[]`, `1`, `null`, a batch: LSP sends one message per frame) -> Invalid Request,
  answered once with id null, or, for a batch, once per request in it that has an id;
- an object without `"jsonrpc": "2.0"`, without a string `method` (and not a response), with an id that is not
  an integer or a string, or with params that are not an object or array (null reads as absent) -> Invalid
  Request, with its id when it has a valid one, else id null;
- a response (from the client, to a request of ours) that is malformed is logged and dropped: it is never answered.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
_DEEP_SCAN_LIMIT = 1 << 20  # bytes of a too-deep body scanned for its id; past that the answer's id is null
_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|[{}\[\]:,]')


@dataclass(frozen=True)
class Refused:
    """A body that is not a message the server can take: answer `ids` (None: id null; empty: answer nothing)."""

    code: int
    message: str
    ids: tuple[Any, ...] = (None,)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def valid_id(value: Any) -> bool:
    """LSP ids are integers or strings (JSON-RPC also allows null, which LSP does not use)."""
    return type(value) is str or type(value) is int


def read_message(body: bytes) -> dict[str, Any] | Refused:
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as e:
        return Refused(PARSE_ERROR, f"the body is not UTF-8 (byte {e.start})")
    try:
        data = json.loads(text, parse_constant=_no_constant)
    except RecursionError:
        found = top_level_id(text) if len(text) <= _DEEP_SCAN_LIMIT else None
        return Refused(INVALID_REQUEST, "the message is nested deeper than this server parses (about 1,000 levels)",
                       (found,))
    except ValueError as e:  # json.JSONDecodeError included
        return Refused(PARSE_ERROR, f"the body is not JSON: {e}")
    return check_envelope(data)


def check_envelope(data: Any) -> dict[str, Any] | Refused:
    if isinstance(data, list):
        ids = tuple(m["id"] for m in data if isinstance(m, dict) and "method" in m and valid_id(m.get("id")))
        return Refused(INVALID_REQUEST, "batches are not supported: LSP sends one message per frame", ids or (None,))
    if not isinstance(data, dict):
        return Refused(INVALID_REQUEST, f"a message must be a JSON object, not {type(data).__name__}")
    has_id = "id" in data
    msg_id = data["id"] if has_id and valid_id(data["id"]) else None
    if "method" not in data and has_id and ("result" in data or "error" in data):  # a response to our request
        if data.get("jsonrpc") != "2.0" or msg_id is None:
            return Refused(INVALID_REQUEST, "malformed response", ())
        return data
    if data.get("jsonrpc") != "2.0":
        return Refused(INVALID_REQUEST, 'the message needs "jsonrpc": "2.0"', (msg_id,))
    if not isinstance(data.get("method"), str):
        return Refused(INVALID_REQUEST, "the message needs a string method", (msg_id,))
    if has_id and msg_id is None:
        return Refused(INVALID_REQUEST, "a request id must be an integer or a string")
    # `"params": null` is read as absent: JSON-RPC says structured or omitted, but clients send null for "no params"
    # (LSP's shutdown and exit take none) and refusing it would leave their shutdown unanswered
    if data.get("params") is not None and not isinstance(data["params"], (dict, list)):
        return Refused(INVALID_REQUEST, "params must be an object or an array", (msg_id,))
    return data


def top_level_id(text: str) -> Any:
    """The `id` member of the JSON object `text`, found without recursing (None when absent or not valid)."""
    depth, key, value_at = 0, None, None
    for m in _TOKENS.finditer(text):
        tok = m.group()
        if tok in "{[":
            depth += 1
        elif tok in "}]" or (tok == "," and depth == 1):
            if depth == 1 and value_at is not None:
                return _scalar_id(text[value_at:m.start()])
            depth -= tok != ","
        elif depth == 1:
            if tok == ":":
                value_at = m.end() if key == "id" else None
            elif tok[0] == '"':
                key = tok[1:-1]
    return None


def _scalar_id(text: str) -> Any:
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if valid_id(value) else None
