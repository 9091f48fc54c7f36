"""Framing through a pipe: bad headers, wrong lengths and garbage get a Parse error (id null) and the server reads
on from the next Content-Length header, so the messages after them are answered; in process, the framer gives
the same events however the bytes are chunked."""

from __future__ import annotations

import json
import random

import pytest

from bench.rawlsp import RawServer, frame, message
from dg_lsp.wire.framing import BODY_LIMIT, BadFrame, Frame, Framer
from dg_lsp.wire.jsonrpc import Refused, read_message

URI = "file:///framing.txt"


@pytest.fixture(scope="module")
def server():
    with RawServer() as s:
        s.initialize()  # no `initialized`: the model is not loaded, framing needs none
        yield s


def state_request(msg_id: str) -> bytes:
    return message(id=msg_id, method="dg/documentState", params={"textDocument": {"uri": URI}})


def answered_after(server: RawServer, bad: bytes) -> tuple[dict | None, list[dict]]:
    """Send `bad` then a valid request in one write: its answer, and the id-null errors before it."""
    msg_id = f"after-{server.new_id()}"
    server.open(URI, "text\n", "plaintext")
    mark = server.mark()
    server.send(bad + state_request(msg_id))
    got = server.answer(msg_id, 15)
    return got, server.null_errors(mark)


@pytest.mark.parametrize("value", [b"-5", b"abc", b"0x10", b"1e3", b"", b"+3", b"\xd9\xa1\xd9\xa2"])
def test_a_content_length_that_is_not_a_byte_count_is_answered_and_skipped(server, value):
    bad = frame(json.dumps({"jsonrpc": "2.0", "id": "lost", "method": "shutdown"}),
                header=b"Content-Length: " + value + b"\r\n\r\n")
    got, errors = answered_after(server, bad)
    assert got is not None and got["result"]["version"] == 1
    assert [e["error"]["code"] for e in errors] == [-32700] and "Content-Length" in errors[0]["error"]["message"]
    assert "lost" not in server.answers  # the unreadable request was not run (it was a shutdown)
    assert server.serving()


def test_content_length_zero_is_an_empty_body_not_a_stall(server):
    got, errors = answered_after(server, b"Content-Length: 0\r\n\r\n")
    assert got is not None and [e["error"]["code"] for e in errors] == [-32700]


def test_a_huge_content_length_is_refused_at_once_not_waited_for(server):
    mark = server.mark()
    server.send(b"Content-Length: 1000000000000\r\n\r\n")  # nothing follows: a waiting reader would hang
    err = server.wait(lambda m: "error" in m and m.get("id", 0) is None, 15, since=mark)
    assert err is not None and err["error"]["code"] == -32700 and str(BODY_LIMIT) in err["error"]["message"]
    assert server.serving()


def test_a_header_line_over_a_mebibyte_does_not_kill_the_server(server):
    got, errors = answered_after(server, b"X-Long: " + b"x" * (1 << 20) + b"\r\n\r\n")
    assert got is not None and server.alive()
    assert [e["error"]["code"] for e in errors] == [-32700] and "limit" in errors[0]["error"]["message"]


def test_a_too_short_length_before_a_large_body_loses_only_that_message(server):
    body = json.dumps({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": {
        "uri": "file:///big.txt", "languageId": "plaintext", "version": 1, "text": "x" * (2 << 20)}}}).encode()
    got, errors = answered_after(server, b"Content-Length: 10\r\n\r\n" + body)
    assert got is not None and got["result"]["version"] == 1
    assert errors and all(e["error"]["code"] == -32700 for e in errors)


@pytest.mark.parametrize("delta", [-1, 1])
def test_a_length_one_byte_off_loses_that_message_and_finds_the_next(server, delta):
    body = json.dumps({"jsonrpc": "2.0", "id": f"off-{delta}", "method": "dg/documentState",
                       "params": {"textDocument": {"uri": URI}}}).encode()
    bad = b"Content-Length: %d\r\n\r\n" % (len(body) + delta) + body
    got, errors = answered_after(server, bad)
    assert got is not None and got["result"]["version"] == 1
    assert [e["error"]["code"] for e in errors] == [-32700]


@pytest.mark.parametrize("header", [b"content-length: %d\r\n\r\n", b"CONTENT-LENGTH:%d\r\n\r\n",
                                    b"Content-Length: %d\n\n", b"Content-Length: %d  \r\nContent-Type: x\r\n\r\n",
                                    b"Content-Length: %d\r\nContent-Length: %d\r\n\r\n"])
def test_lenient_but_unambiguous_headers_are_read(server, header):
    server.open(URI, "text\n", "plaintext")
    body = json.dumps({"jsonrpc": "2.0", "id": "lenient", "method": "dg/documentState",
                       "params": {"textDocument": {"uri": URI}}}).encode()
    mark = server.mark()
    server.send(header.replace(b"%d", b"%d" % len(body)) + body)
    got = server.wait(lambda m: m.get("id") == "lenient", 15, since=mark)
    assert got is not None and got["result"]["version"] == 1 and not server.null_errors(mark)


@pytest.mark.parametrize("bad", [
    b"Content-Type: application/vscode-jsonrpc\r\n\r\n{}",  # no Content-Length
    b"Content-Length: 2\r\nContent-Length: 3\r\n\r\n{}",  # two different ones
    b"\x00\xff garbage \xfe\r\n",  # bytes that are not a header
    b'{"jsonrpc": "2.0", "id": "bare", "method": "shutdown"}',  # a body without a header
    b"Content-Length 5\r\n\r\nhello",  # no colon
])
def test_bytes_that_are_not_a_frame_are_answered_once_and_skipped(server, bad):
    got, errors = answered_after(server, bad)
    assert got is not None and got["result"]["version"] == 1
    assert [e["error"]["code"] for e in errors] == [-32700]


def test_a_message_split_into_single_bytes_and_many_in_one_write_are_answered_in_order(server):
    server.open(URI, "text\n", "plaintext")
    one = state_request("split")
    for i in range(len(one)):
        server.send(one[i:i + 1])
    assert server.answer("split", 15) is not None
    ids = [f"batch-{i}" for i in range(50)]
    mark = server.mark()
    server.send(b"".join(state_request(i) for i in ids))
    assert server.answer(ids[-1], 15) is not None
    assert [m["id"] for m in server.messages[mark:] if m.get("id") in ids] == ids


def events(stream: bytes, cuts: list[int]) -> list[tuple]:
    """The framer's events for `stream` fed in pieces cut at `cuts`, bodies rejected as the server does."""
    framer, out, last = Framer(), [], 0
    for cut in [*cuts, len(stream)]:
        framer.feed(stream[last:cut])
        last = cut
        while (ev := framer.next()) is not None:
            if isinstance(ev, BadFrame):
                out.append(("bad", ev.reason, ev.at))
                continue
            parsed = read_message(ev.body)
            out.append(("frame", ev.body, ev.start, ev.end))
            if isinstance(parsed, Refused) and parsed.code == -32700:
                framer.reject(ev)
    return out


def test_the_framer_gives_the_same_events_however_the_bytes_are_chunked():
    ok = message(id=1, method="m", params={"text": "é😀\r\n"})
    body = json.dumps({"jsonrpc": "2.0", "id": 2, "method": "m"}).encode()
    stream = b"".join([
        ok, b"Content-Length: -5\r\n\r\n{}", ok, b"Content-Length: %d\r\n\r\n" % (len(body) - 1) + body, ok,
        b"X" * 70_000 + b"\r\n", ok, b"Content-Length: 99999999999\r\n\r\n", b"junk" * 50, ok, b"\r\n\r\n",
        b"Content-Length: %d\r\n\r\n" % (len(body) + 1) + body, ok, b"content-length: 2\n\n{}", ok])
    whole = events(stream, [])
    rng = random.Random(0)
    for _ in range(20):
        cuts = sorted(rng.sample(range(1, len(stream)), 40))
        assert events(stream, cuts) == whole
    assert events(stream, list(range(1, len(stream), 997))) == whole
    frames = [e for e in whole if e[0] == "frame" and e[1] == ok[ok.index(b"{"):]]
    assert len(frames) == stream.count(ok)  # every valid message found again
    assert [e[1].split()[0] for e in whole if e[0] == "bad"] == ["Content-Length", "a", "Content-Length"]


def test_a_body_is_not_held_past_its_frame():
    framer = Framer()
    for _ in range(200):
        framer.feed(message(id=1, method="m", params={"x": "y" * 10_000}))
        while isinstance(framer.next(), Frame):
            pass
    assert framer.pending == 0 and len(framer._buf) < 20_000  # noqa: SLF001
