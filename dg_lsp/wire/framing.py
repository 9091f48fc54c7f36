"""LSP base-protocol framing without I/O: bytes in, `Frame`s and `BadFrame`s out, resyncing after any bad input.

A message is a header block (`Name: value` lines, then a blank line) and a body of exactly `Content-Length` bytes.
Lenient where it costs nothing: header names in any case, LF-only line ends, other headers ignored, stray blank
lines between messages skipped. Strict where a guess could swallow the next message:
- a header block over `HEADER_LIMIT` bytes (one line of 1 MiB included), a `Content-Length` that is not a decimal
  byte count (`-5`, `abc`), two different ones, one over `BODY_LIMIT` (refused at once, never waited for), a block
  without one, or bytes that are not a header line: each gives one `BadFrame`, and the framer then skips to the
  next `Content-Length: N` line it finds, wherever it starts (a body is often followed by the next header on the
  same line). Inside valid JSON that pattern cannot occur (a raw line break cannot sit inside a JSON string).
- a body whose length was wrong (one byte short or long, or far too short before a large body) fails to parse:
  the consumer calls `reject(frame)` and the framer looks for the next header from the body's first byte, so the
  message that followed is found again instead of being eaten.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

HEADER_LIMIT = 64 * 1024  # bytes in one header block
BODY_LIMIT = 64 * 1024 * 1024  # bytes in one body
_HEADER = re.compile(rb"([!#$%&'*+.^_`|~0-9A-Za-z-]+):[ \t]*(.*?)[ \t]*")  # RFC 9110 token ":" value
_LENGTH = re.compile(rb"\d{1,20}")
# What resync looks for: a Content-Length line with a byte count. A partial match at the buffer's end is kept.
_RESYNC = re.compile(rb"content-length:[ \t]{0,8}\d{1,20}[ \t]{0,8}\r?\n", re.IGNORECASE)
_RESYNC_KEEP = 64  # longer than any _RESYNC match


@dataclass(frozen=True)
class Frame:
    """One message body; `start` and `end` are its first byte's and its end's offsets in the stream."""

    body: bytes
    start: int
    end: int


@dataclass(frozen=True)
class BadFrame:
    """Bytes that are not a well-formed message, starting at stream offset `at`."""

    reason: str
    at: int


class Framer:
    """Feed it bytes (`feed`), take events (`next` until None). `reject` must come before the next `feed`."""

    def __init__(self, header_limit: int = HEADER_LIMIT, body_limit: int = BODY_LIMIT) -> None:
        self.header_limit = header_limit
        self.body_limit = body_limit
        self._buf = bytearray()
        self._base = 0  # stream offset of _buf[0]
        self._pos = 0  # index in _buf of the first byte not yet consumed
        self._body: int | None = None  # the length of the body being read, once its header block ended
        self._resync = False  # skipping to the next Content-Length line
        self._start_block()

    def _start_block(self) -> None:
        self._length: int | None = None
        self._block = 0  # bytes of the header block so far
        self._in_block = False  # a header line was read

    @property
    def pending(self) -> int:
        """Bytes held that belong to no event yet (a message cut off by the end of the stream, if any)."""
        return len(self._buf) - self._pos

    def feed(self, data: bytes) -> None:
        if self._pos:
            del self._buf[:self._pos]
            self._base += self._pos
            self._pos = 0
        self._buf += data

    def next(self) -> Frame | BadFrame | None:
        while True:
            if self._resync and not self._skip_to_header():
                return None
            if self._body is not None:
                if len(self._buf) - self._pos < self._body:
                    return None
                start, self._pos = self._pos, self._pos + self._body
                self._body = None
                return Frame(bytes(self._buf[start:self._pos]), self._base + start, self._base + self._pos)
            event = self._header_line()
            if event is not _CONTINUE:
                return event

    def reject(self, frame: Frame) -> None:
        """`frame`'s body did not parse: its length was probably wrong, so look for a header inside it."""
        self._pos = frame.start - self._base
        self._body = None
        self._resync = True
        self._start_block()

    def _header_line(self) -> Frame | BadFrame | None | object:
        buf, pos = self._buf, self._pos
        nl = buf.find(b"\n", pos, pos + self.header_limit - self._block + 1)
        if nl < 0:
            if len(buf) - pos + self._block > self.header_limit:
                return self._bad(f"a header block over the {self.header_limit}-byte limit", pos)
            return None
        self._block += nl + 1 - pos
        self._pos = nl + 1
        line = bytes(buf[pos:nl]).removesuffix(b"\r")
        if not line:
            if not self._in_block:
                self._block = 0  # a stray blank line between messages
                return _CONTINUE
            length = self._length
            self._start_block()
            if length is None:
                return self._bad("a header block without Content-Length", pos, resync_at=self._pos)
            self._body = length
            return _CONTINUE
        m = _HEADER.fullmatch(line)
        if m is None:
            return self._bad("bytes that are not a header line", pos, resync_at=pos)
        self._in_block = True
        if m.group(1).lower() != b"content-length":
            return _CONTINUE
        value = m.group(2)
        if _LENGTH.fullmatch(value) is None:
            shown = value[:40].decode("utf-8", "replace")
            return self._bad(f"Content-Length {shown!r} is not a byte count", pos, resync_at=self._pos)
        n = int(value)
        if n > self.body_limit:
            return self._bad(f"Content-Length {n} is over the {self.body_limit}-byte limit", pos,
                             resync_at=self._pos)
        if self._length is not None and self._length != n:
            return self._bad("two different Content-Length headers", pos, resync_at=self._pos)
        self._length = n
        return _CONTINUE

    def _bad(self, reason: str, at: int, resync_at: int | None = None) -> BadFrame:
        if resync_at is not None:
            self._pos = resync_at
        self._body = None
        self._resync = True
        self._start_block()
        return BadFrame(reason, self._base + at)

    def _skip_to_header(self) -> bool:
        m = _RESYNC.search(self._buf, self._pos)
        if m is None:
            self._pos = max(self._pos, len(self._buf) - _RESYNC_KEEP)
            return False
        self._pos = m.start()
        self._resync = False
        return True


_CONTINUE = object()
