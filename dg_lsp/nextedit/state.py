"""A session's next-edit state: the documents' edit histories, the proposals last made, and the counts dg/status
reports. Lives on the event loop (DgServer.next_edits); bounded: one history and one proposal per open document."""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from dg_lsp.documents import Encoding
from dg_lsp.nextedit.history import EditHistory, change_span


@dataclass
class Counts:
    """dg/status "nextEdit": requests, proposals made, shown (didShowInlineEdit), accepted, and why none was made."""

    requested: int = 0
    proposed: int = 0
    shown: int = 0
    accepted: int = 0
    withheld: Counter = field(default_factory=Counter)

    def wire(self) -> dict[str, Any]:
        return {"requested": self.requested, "proposed": self.proposed, "shown": self.shown,
                "accepted": self.accepted, "withheld": dict(sorted(self.withheld.items()))}


@dataclass(frozen=True)
class Proposal:
    """A proposal sent: its id (the accept command's), the document (open, version) it was computed for."""

    id: str
    uri: str
    identity: tuple[int, int]
    edits: int


class NextEdits:
    def __init__(self) -> None:
        self.history = EditHistory()
        self.counts = Counts()
        self.proposals: dict[str, Proposal] = {}  # uri -> the latest proposal there
        self._ids = itertools.count(1)

    def propose(self, uri: str, identity: tuple[int, int], edits: int) -> Proposal:
        p = Proposal(f"ne-{next(self._ids)}", uri, identity, edits)
        self.proposals[uri] = p
        self.counts.proposed += 1
        return p

    def withhold(self, reason: str) -> None:
        self.counts.withheld[reason] += 1

    def accept(self, uri: str, version: int, opened: int | None, pid: str | None) -> tuple[bool, str | None]:
        """The client applied the proposal `pid` for (opened, version) of `uri`: mark the edits made from that
        version on as accepted in the history (later proposals must not undo them). (accepted, why not)."""
        p = self.proposals.get(uri)
        if p is None or (pid is not None and p.id != pid):
            return False, "unknown proposal"
        if p.identity[1] != version or (opened is not None and p.identity[0] != opened):
            return False, "document changed"
        self.proposals.pop(uri, None)
        self.history.mark_accepted(uri, version)
        self.counts.accepted += 1
        return True, None

    def changed(self, uri: str, before_version: int, doc: Any, before: str, starts: Any, changes: Any,
                encoding: Encoding) -> None:
        """A didChange was applied to `doc` (a dg_lsp.documents.Document): record it in the history."""
        changes = list(changes)
        span = change_span(changes, before, doc.text, starts, encoding)
        self.history.changed(uri, before_version, doc.version, before, doc.text, span, doc.starts)

    def closed(self, uri: str) -> None:
        """didClose / didOpen again: the history and the proposal belong to the old open."""
        self.history.forget(uri)
        self.proposals.pop(uri, None)
