"""The stdin reader: the event loop reads a pipe itself (a regular file falls back to a thread-pool reader), the
message loop frames messages and notes when each arrived; the writer notes when each answer was handed to the OS."""

from __future__ import annotations

import asyncio
import io
import json
import os
import tempfile
import time

from bench.rawlsp import frame
from dg_lsp.wire.dispatch import Clock
from dg_lsp.wire.stdio import Arrivals, PipeReader, ThreadReader, TimedWriter, pipe_reader
from dg_lsp.wire.transport import serve_messages


def test_pipe_is_read_by_the_loop_and_eof_gives_what_there_is():
    async def main() -> tuple:
        r, w = os.pipe()
        os.write(w, b"Content-Length: 2\r\n\r\n{}" + b"tail")
        os.close(w)
        with os.fdopen(r, "rb", buffering=0) as f:
            reader = await pipe_reader(f)
            data = b""
            while chunk := await reader.read():
                data += chunk
            out = (type(reader), data, await reader.read(), reader.arrivals.total)
        return out

    kind, data, eof, counted = asyncio.run(main())
    assert kind is PipeReader
    assert data == b"Content-Length: 2\r\n\r\n{}tail" and eof == b""  # the message loop stops on an empty read
    assert counted == len(data)


def test_a_regular_file_falls_back_to_the_thread_pool_reader():
    async def main() -> tuple:
        with tempfile.TemporaryFile() as f:
            f.write(b"Content-Length: 2\r\n\r\n{}")
            f.seek(0)
            reader = await pipe_reader(f)
            return type(reader), await reader.read(), await reader.read()

    kind, data, eof = asyncio.run(main())
    assert kind is ThreadReader and data == b"Content-Length: 2\r\n\r\n{}" and eof == b""


class Recorder:
    """The dispatcher side of the message loop: records each message with the arrival time the reader gave it."""

    shut_down = False
    exit_code = None

    def __init__(self) -> None:
        self.clock = Clock()
        self.seen: list[tuple[object, float]] = []
        self.errors: list[tuple[object, int, str]] = []

    def receive(self, message) -> None:
        self.seen.append((message, self.clock.arrived_at))

    def send_error(self, msg_id, code: int, text: str) -> None:
        self.errors.append((msg_id, code, text))


def test_messages_are_framed_and_timed_before_they_are_parsed():
    async def main() -> tuple:
        r, w = os.pipe()
        proto = Recorder()
        with os.fdopen(r, "rb", buffering=0) as f:
            reader = await pipe_reader(f)
            task = asyncio.ensure_future(serve_messages(reader.read, proto, reader.arrivals))
            os.write(w, frame(msg(a=1)) + b"X-Unknown-Header: 1\r\n" + frame(msg(b=2)))
            while len(proto.seen) < 2:
                await asyncio.sleep(0.001)
            first_chunk = time.perf_counter()
            await asyncio.sleep(0.02)
            os.write(w, b"Content-Type: x\r\n\r\n")  # a header block with no Content-Length: skipped, answered
            os.write(w, frame(msg(c=3))[:10])  # a message in two chunks: it arrives with its last byte
            await asyncio.sleep(0.02)
            last_part = time.perf_counter()
            os.write(w, frame(msg(c=3))[10:])
            os.close(w)
            code = await asyncio.wait_for(task, 5)  # EOF ends the loop
        return proto.seen, proto.errors, first_chunk, last_part, code

    seen, errors, first_chunk, last_part, code = asyncio.run(main())
    assert [m["params"] for m, _ in seen] == [{"a": 1}, {"b": 2}, {"c": 3}]
    assert errors == [(None, -32700, "a header block without Content-Length")]
    assert code == 1  # the stream ended without shutdown
    (_, t_a), (_, t_b), (_, t_c) = seen
    assert t_a == t_b < first_chunk  # one chunk, one arrival
    assert t_c > last_part  # not when its first bytes came


def test_arrivals_forget_chunks_before_the_asked_offset():
    a = Arrivals()
    a.received(10)
    a.received(5)
    t1, t2 = (t for _, t in a._chunks)
    assert a.at(3) == t1 and a.at(10) == t1 and a.at(11) == t2 and a.at(15) == t2
    assert a.at(16) is None and a.at(3) is None  # all forgotten


def test_timed_writer_notes_the_hand_over_within_the_write():
    buf = io.BytesIO()
    w = TimedWriter(buf)
    t0 = time.perf_counter()
    w.write(b"x" * 100)
    assert buf.getvalue() == b"x" * 100
    assert t0 <= w.handed_at <= time.perf_counter()


def msg(**params) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "method": "m", "params": params}).encode()
