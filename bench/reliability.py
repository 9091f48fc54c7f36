"""The hostile suite against the real server (`python -m dg_lsp`, shipped default model, stdio, raw bytes through a
pipe): malformed input, fuzzed incremental edits in every position encoding, a fill racing an edit, and 5 MB
documents. Prints a table, then one JSON line:
{"malformed_sent", "unanswered", "crashes", "wrong_place_edits", "max_block_ms", "rss_growth_mb", "fuzz_edits",
"divergences"}.

- unanswered: requests with an id that got no answer (or more than one) within their timeout, in every phase.
- crashes: server processes that ended without being asked to (or not with code 0 after shutdown + exit).
- wrong_place_edits: `workspace/applyEdit`s whose range is not where the hole is in the version they name, and
  inline answers whose range is not at the cursor in the document the client then holds (issue 11, item 1).
- max_block_ms: the longest a small request on another document waited while an inline completion and a
  dg.fillHole ran on a 5 MB document (one line, and many lines, each on a fresh server); a request still
  unanswered when the bench gives up counts as waiting until then.
- rss_growth_mb: server RSS after a 5 MB document was closed minus before it was opened (after settling; the
  larger of the two shapes).
- divergences: dg/documentState checks where the server's text differed from the client's own copy.

Fixed seed; `--quick` runs fewer cases (for a smoke test). Run: python -m bench.reliability
"""

from __future__ import annotations

import argparse
import collections
import json
import random
import time
from typing import Any

from bench.editfuzz import EditFuzzer
from bench.malformed import DOC_URI, malformed_cases
from bench.rawlsp import RawServer, message, sha256

SEED = 0
ENCODINGS = ("utf-8", "utf-16", "utf-32")
DOC_TEXT = "def add(a, b):\n    return a + b\n"
RACE_TEXT = "import os\n\ndef add(a, b):\n    return \n\nprint(add(1, 2))\n"  # issue 11, item 1
BIG_BYTES = 5_000_000
BLOCK_DEADLINE_S, PING_EVERY_S, SETTLE_S = 30.0, 0.05, 3.0


class Tally:
    def __init__(self) -> None:
        self.unanswered, self.crashes, self.rows = 0, 0, []

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

    def ended(self, server: RawServer) -> None:
        """shutdown + exit. A crash: the server had ended by itself, or ended with another code than 0. A server
        that did not answer shutdown in time is killed: an unanswered request, not a crash."""
        if not server.alive():
            self.crashes += 1
        code = server.close()
        if code is None:
            self.unanswered += 1
        elif code != 0:
            self.crashes += 1


def start(encoding: str = "utf-16", options: dict | None = None) -> RawServer:
    server = RawServer()
    result = server.initialize({"general": {"positionEncodings": [encoding]}, "workspace": {"applyEdit": True}},
                               options, initialized=True)
    got = result["capabilities"].get("positionEncoding")
    if got != encoding:
        raise RuntimeError(f"asked for {encoding}, the server chose {got}")
    return server


def probe(server: RawServer, tally: Tally, timeout: float = 10.0) -> bool:
    got = tally.answer(server, server.request("dg/documentState", {"textDocument": {"uri": DOC_URI}}), timeout)
    return got is not None and got.get("result", {}).get("sha256") == sha256(DOC_TEXT)


def run_malformed(server: RawServer, tally: Tally, count: int) -> int:
    server.open(DOC_URI, DOC_TEXT)
    sent: collections.Counter[str] = collections.Counter()
    deaf: collections.Counter[str] = collections.Counter()  # the probe after the case got no answer
    unexpected: collections.Counter[tuple[str, Any]] = collections.Counter()  # (category, code) not the one owed
    for case in malformed_cases(count, SEED):
        sent[case.category] += 1
        server.send(case.data)
        if not probe(server, tally):
            deaf[case.category] += 1
        for msg_id, codes in case.expect.items():
            got = tally.answer(server, msg_id, 10.0)
            code = None if got is None or "error" not in got else got["error"]["code"]
            if got is not None and (code not in codes if codes is not None else code is not None):
                unexpected[case.category, code] += 1
        if not server.alive():
            break
    for category in sorted(sent):
        odd = ", ".join(f"{code} x{n}" for (cat, code), n in unexpected.items() if cat == category)
        tally.row("malformed", f"{category}: sent / deaf after / unexpected codes",
                  f"{sent[category]} / {deaf[category]} / {odd or '-'}")
    return sum(sent.values())


def run_fuzz(tally: Tally, edits_per_encoding: int) -> tuple[int, int]:
    rng = random.Random(SEED)
    sent = diverged = 0
    for encoding in ENCODINGS:
        server = start(encoding)
        uri, version = f"file:///fuzz-{encoding}.py", 1
        fuzz = EditFuzzer(rng, encoding)
        server.open(uri, fuzz.text)
        done = bad = 0
        while done < edits_per_encoding and server.alive():
            burst = b""
            for _ in range(rng.randint(1, 5)):  # several didChanges in one write, as a fast typist's editor sends
                changes = [fuzz.change() for _ in range(rng.choice([1, 1, 1, 2, 3]))]
                version += 1
                done += len(changes)
                burst += message(method="textDocument/didChange", params={
                    "textDocument": {"uri": uri, "version": version}, "contentChanges": changes})
            server.send(burst)
            got = tally.answer(server, server.request("dg/documentState", {"textDocument": {"uri": uri}}), 10.0)
            state = (got or {}).get("result") or {}
            if state != {"version": version, "length": len(fuzz.text), "sha256": sha256(fuzz.text)}:
                bad += 1
                version += 1  # start again from the client's copy, so one slip is counted once
                server.notify("textDocument/didClose", {"textDocument": {"uri": uri}})
                server.open(uri, fuzz.text, version=version)
        tally.row("fuzz", f"{encoding}: edits / checks that diverged", f"{done} / {bad}")
        sent, diverged = sent + done, diverged + bad
        tally.ended(server)
    return sent, diverged


def _contains(rng: dict, line: int, char: int) -> bool:
    start, end = rng["start"], rng["end"]
    return (start["line"], start["character"]) <= (line, char) <= (end["line"], end["character"])


def run_wrong_place(server: RawServer, tally: Tally, trials: int) -> int:
    """A fill asked for at (3, 11) of version 1, and in the same write an edit inserting two lines at the top:
    version 2's hole is at (5, 11). Right: nothing, or an edit at the hole of the version it names."""
    wrong = stale = right = 0
    hole = {1: (3, 11), 2: (5, 11)}
    for trial in range(2 * trials + 1):
        uri = f"file:///race-{trial}.py"
        server.open(uri, RACE_TEXT)
        server.state(uri)
        edit = message(method="textDocument/didChange", params={"textDocument": {"uri": uri, "version": 2},
                       "contentChanges": [{"range": {"start": {"line": 0, "character": 0},
                                                     "end": {"line": 0, "character": 0}}, "text": "\n\n"}]})
        pos = {"line": 3, "character": 11}
        if trial == 2 * trials:  # control: the edit first, then a fill at version 2's coordinates
            pos = {"line": 5, "character": 11}
        msg_id = server.new_id()
        kind = "inline" if trial % 2 else "command"
        if kind == "inline":
            ask = message(id=msg_id, method="textDocument/inlineCompletion", params={
                "textDocument": {"uri": uri}, "position": pos, "context": {"triggerKind": 1}})
        else:
            ask = message(id=msg_id, method="workspace/executeCommand", params={
                "command": "dg.fillHole", "arguments": [{"textDocument": {"uri": uri}, "position": pos}]})
        mark = len(server.applied)
        server.send(edit + ask if trial == 2 * trials else ask + edit)
        got = tally.answer(server, msg_id, 120.0)
        if kind == "inline":
            for item in ((got or {}).get("result") or {}).get("items", []):
                ok = "range" in item and _contains(item["range"], *hole[2])
                wrong, right = wrong + (not ok), right + ok
        for _, params in server.applied[mark:]:
            for change in params["edit"].get("documentChanges", []):
                version = change["textDocument"]["version"]
                ok = version in hole and all(_contains(e["range"], *hole[version]) for e in change["edits"])
                wrong, right, stale = wrong + (not ok), right + ok, stale + (ok and version == 1)
    tally.row("wrong place", f"{2 * trials} fills racing an edit + 1 control: wrong / right / right but stale",
              f"{wrong} / {right} / {stale}")
    return wrong


def big_texts() -> list[tuple[str, str, dict[str, int]]]:
    """(shape, 5 MB text, a cursor in its middle)."""
    one = "a = [" + "1, " * (BIG_BYTES // 3) + "]\n"
    line = "x = 1  # padding " + "y" * 40
    many = (line + "\n") * (BIG_BYTES // (len(line) + 1))
    return [("one line", one, {"line": 0, "character": len(one) // 2}),
            ("many lines", many, {"line": many.count("\n") // 2, "character": len(line)})]


def run_big(shape: str, text: str, mid: dict[str, int], tally: Tally) -> tuple[float, float]:
    """On a fresh server: small requests on another document while an inline completion and a fill run on a
    5 MB one; then the big document closed. The longest wait (ms) and the RSS growth (MB)."""
    server = start(options={"debounceMs": 0})
    small = "file:///small.py"
    server.open(small, DOC_TEXT)
    server.wait_ready()
    time.sleep(SETTLE_S)
    rss0 = server.rss_mb()
    uri = "file:///big.py"
    t0 = time.monotonic()
    server.open(uri, text)
    tally.answer(server, server.request("dg/documentState", {"textDocument": {"uri": uri}}), BLOCK_DEADLINE_S)
    tally.row("5 MB", f"{shape}: didOpen until the next answer (ms)", round((time.monotonic() - t0) * 1e3))
    big = [server.request("textDocument/inlineCompletion", {"textDocument": {"uri": uri}, "position": mid,
                                                            "context": {"triggerKind": 1}}),
           server.request("workspace/executeCommand", {"command": "dg.fillHole", "arguments": [
               {"textDocument": {"uri": uri}, "position": mid}]})]
    t0, pings = time.monotonic(), {}
    while time.monotonic() - t0 < BLOCK_DEADLINE_S and not all(server.answers.get(i) for i in big):
        pings[server.request("dg/documentState", {"textDocument": {"uri": small}})] = time.monotonic()
        time.sleep(PING_EVERY_S)
    in_time = all(server.answers.get(i) for i in big)
    if not in_time:
        for msg_id in big:
            server.notify("$/cancelRequest", {"id": msg_id})
    server.notify("textDocument/didClose", {"textDocument": {"uri": uri}})
    drain = time.monotonic() + BLOCK_DEADLINE_S
    for msg_id in [*big, *pings]:
        tally.answer(server, msg_id, max(0.0, drain - time.monotonic()))
    now = time.monotonic()
    longest = max((server.answered_at.get(i, now) - sent for i, sent in pings.items()), default=0.0) * 1e3
    late = sum(i not in server.answered_at for i in pings)
    tally.row("5 MB", f"{shape}: inline + fill answered within {BLOCK_DEADLINE_S:.0f} s / pings (unanswered) / "
              "longest wait (ms)", f"{in_time} / {len(pings)} ({late}) / {longest:.0f}")
    busy = server.state(small, BLOCK_DEADLINE_S) is None
    time.sleep(SETTLE_S)
    growth = server.rss_mb() - rss0
    tally.row("5 MB", f"{shape}: RSS before / growth after closing (MB)",
              f"{rss0:.0f} / {growth:.1f}" + (" (server still busy, close not yet read)" if busy else ""))
    tally.ended(server)
    return longest, growth


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer cases: a smoke test, not the measurement")
    args = ap.parse_args()
    malformed_n, fuzz_n, trials = (120, 60, 1) if args.quick else (1100, 400, 3)
    tally = Tally()
    t0 = time.monotonic()
    server = start()
    malformed = run_malformed(server, tally, malformed_n)
    tally.ended(server)
    mark = tally.phase_end("malformed", 0)
    t1 = time.monotonic()
    fuzz_sent, divergences = run_fuzz(tally, fuzz_n)
    mark = tally.phase_end("fuzz", mark)
    t2 = time.monotonic()
    server = start(options={"debounceMs": 0})
    server.open(DOC_URI, DOC_TEXT)
    ready = server.wait_ready()
    tally.row("model", "state before the fill phases", ready["params"]["state"] if ready else "no status")
    wrong = run_wrong_place(server, tally, trials)
    tally.ended(server)
    mark = tally.phase_end("wrong place", mark)
    t3 = time.monotonic()
    blocks, growths = zip(*(run_big(*big, tally) for big in big_texts()), strict=True)
    max_block, growth = max(blocks), max(growths)
    tally.phase_end("5 MB", mark)
    t4 = time.monotonic()
    tally.row("all", "wall time (s): malformed / fuzz / wrong place / 5 MB",
              f"{t1 - t0:.0f} / {t2 - t1:.0f} / {t3 - t2:.0f} / {t4 - t3:.0f}")
    print(f"{'phase':<12} {'what':<70} value")
    for phase, what, value in tally.rows:
        print(f"{phase:<12} {what:<70} {value}")
    print(json.dumps({"malformed_sent": malformed, "unanswered": tally.unanswered, "crashes": tally.crashes,
                      "wrong_place_edits": wrong, "max_block_ms": round(max_block, 1),
                      "rss_growth_mb": round(growth, 1), "fuzz_edits": fuzz_sent, "divergences": divergences}))


if __name__ == "__main__":
    main()
