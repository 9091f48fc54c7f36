"""Random incremental edits for `bench.reliability`, applied to the client's own copy of the text, which is what the
server's copy must equal: positions as LSP defines them (a line ends at "\\n", "\\r\\n" or a lone "\\r"; a character
is counted in the negotiated encoding's units: utf-8 bytes, utf-16 code units or utf-32 code points)."""

from __future__ import annotations

import bisect
import random
import re
from typing import Any

_BREAK = re.compile(r"\r\n|\r|\n")
# What edits insert: ASCII, 2-, 3- and 4-byte UTF-8 (the last two UTF-16 units), and every kind of line break.
PIECES = ["a", "b", "x", "_", " ", "    ", "(", ")", ":", "=", "é", "ß", "中", "文", "😀", "𝒳", "\n", "\r\n", "\r"]
START_TEXT = "import os\r\n\r\ndef grüße(a, b):  # 中文\n    return a + b\rprint(grüße(1, 2))  # 😀\n"


def units(s: str, encoding: str) -> int:
    if encoding == "utf-8":
        return len(s.encode("utf-8", "surrogatepass"))
    if encoding == "utf-16":
        return len(s.encode("utf-16-le", "surrogatepass")) // 2
    return len(s)


def line_starts(text: str) -> list[int]:
    return [0, *(m.end() for m in _BREAK.finditer(text))]


def position(text: str, starts: list[int], offset: int, encoding: str) -> dict[str, int]:
    line = bisect.bisect_right(starts, offset) - 1
    return {"line": line, "character": units(text[starts[line]:offset], encoding)}


def _inside_crlf(text: str, offset: int) -> bool:
    """Between the "\\r" and "\\n" of one line break: no position names that point."""
    return 0 < offset < len(text) and text[offset - 1] == "\r" and text[offset] == "\n"


class EditFuzzer:
    """Makes random LSP content changes against `text` and applies each to it (`text` is the client's copy)."""

    def __init__(self, rng: random.Random, encoding: str, text: str = START_TEXT) -> None:
        self.rng, self.encoding, self.text = rng, encoding, text

    def _offset(self, lo: int = 0) -> int:
        offset = self.rng.randint(lo, len(self.text))
        return offset + 1 if _inside_crlf(self.text, offset) else offset

    def change(self) -> dict[str, Any]:
        """One content change, already applied to `text`."""
        rng, text = self.rng, self.text
        new = "".join(rng.choice(PIECES) for _ in range(rng.choice([0, 1, 1, 2, 3, 6])))
        if rng.random() < 0.01 or len(text) > 4000:  # a whole-document change, also keeps the text small
            self.text = START_TEXT + new
            return {"text": self.text}
        start = self._offset()
        end = start if rng.random() < 0.5 else min(len(text), start + rng.randint(1, 12))
        if _inside_crlf(text, end):
            end += 1
        starts = line_starts(text)
        rng_ = {"start": position(text, starts, start, self.encoding),
                "end": position(text, starts, end, self.encoding)}
        self.text = text[:start] + new + text[end:]
        return {"range": rng_, "text": new}
