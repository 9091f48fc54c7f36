"""What `bench.reliability` counts across its phases (requests unanswered, servers that crashed, native crashes
apart, table rows), and the server each phase starts."""

from __future__ import annotations

import signal
import tempfile
from typing import IO, Any

from bench.rawlsp import RawServer

# The fill phases check where fills land, so every fill must land: no debounce, no confidence gate (the shipped
# model's calibrated gate withholds most fills; the gate has its own tests).
FILL_OPTIONS = {"debounceMs": 0, "minConfidence": 0}


class Tally:
    def __init__(self) -> None:
        self.unanswered, self.crashes, self.native_crashes, self.rows = 0, 0, 0, []
        self.crashed: list[str] = []  # what each crash was, with the end of its server's stderr

    def row(self, phase: str, what: str, value: Any) -> None:
        self.rows.append((phase, what, value))

    def phase_end(self, phase: str, since: int) -> int:
        """A row with the requests left unanswered since `since` (an earlier `unanswered`); the count now."""
        self.row(phase, "requests unanswered in this phase", self.unanswered - since)
        return self.unanswered

    def answer(self, server: RawServer, msg_id: Any, timeout: float) -> dict | None:
        """The one answer to `msg_id`; a missing or repeated answer counts as unanswered."""
        got = server.answer(msg_id, timeout)
        if got is None or len(server.answers.get(msg_id, [])) != 1:
            self.unanswered += 1
        return got

    def ended(self, server: RawServer) -> str | None:
        """shutdown + exit. A crash: the server had ended by itself, or ended with another code than 0; a native
        crash: it was ended by a signal we did not send (SIGSEGV, SIGABRT, ...). A server that did not answer
        shutdown in time is killed: an unanswered request, not a crash. Returns what a crash was ("exit 1",
        "SIGSEGV"), or None."""
        died = not server.alive()
        code = server.close()
        if code is None:
            self.unanswered += 1
            return None
        if not died and code == 0:
            return None
        self.crashes += 1
        what = signal.Signals(-code).name if code < 0 else f"exit {code}"
        self.native_crashes += code < 0
        log = getattr(server, "stderr_log", None)
        tail = ""
        if log is not None:
            log.seek(0)
            tail = log.read()[-1500:].decode("utf-8", "replace")
        self.crashed.append(f"{what} (died by itself: {died}); stderr ends: {tail!r}")
        return what


def start(encoding: str = "utf-16", options: dict | None = None,
          stderr: IO[bytes] | int | None = None) -> RawServer:
    """A fresh `python -m dg_lsp` past `initialized`, speaking `encoding`; `options` are its initializationOptions."""
    log = tempfile.TemporaryFile() if stderr is None else None  # read back if the server crashes
    server = RawServer(stderr=log if stderr is None else stderr)
    server.stderr_log = log
    result = server.initialize({"general": {"positionEncodings": [encoding]}, "workspace": {"applyEdit": True}},
                               options, initialized=True)
    got = result["capabilities"].get("positionEncoding")
    if got != encoding:
        server.close()
        raise RuntimeError(f"asked for {encoding}, the server chose {got}")
    return server
