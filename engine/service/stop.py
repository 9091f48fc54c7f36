"""Stop strings (the OpenAI `stop` field): an answer ends before the first match of any of them.

The final text is cut at the earliest match (finish_reason "stop"). A streamed draft is cut the same way and also
holds back a tail that could still grow into a stop string (`"x\\nde"` with stop `"\\ndef"` shows `"x"`), so no
streamed text shows what the final answer would cut.
"""

from __future__ import annotations

from collections.abc import Sequence

MAX_STOPS = 4  # the OpenAI API's "up to 4 sequences"
MAX_STOP_CHARS = 1024  # bounds the hold-back scan (tail length x stop length)


def cut(text: str, stops: Sequence[str]) -> tuple[str, bool]:
    """`text` up to the earliest match of any stop string, and whether one matched."""
    at = min((i for s in stops if (i := text.find(s)) >= 0), default=-1)
    return (text, False) if at < 0 else (text[:at], True)


def visible(text: str, stops: Sequence[str]) -> str:
    """What a stream may show of `text` now: cut at a match, less a tail that is a proper prefix of a stop string."""
    text, matched = cut(text, stops)
    if matched or not stops:
        return text
    return text[: len(text) - max(_partial(text, s) for s in stops)]


def _partial(text: str, stop: str) -> int:
    """The length of the longest suffix of `text` that is a proper prefix of `stop` (0: none)."""
    start = max(0, len(text) - len(stop) + 1)
    i = text.find(stop[0], start)
    while i >= 0:
        if stop.startswith(text[i:]):
            return len(text) - i  # the leftmost candidate is the longest
        i = text.find(stop[0], i + 1)
    return 0
