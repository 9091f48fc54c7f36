"""The hostile suite against the real server (`python -m dg_lsp`, shipped default model, stdio, raw bytes through a
pipe) and the engine service: malformed input, fuzzed incremental edits in every position encoding, a fill racing
an edit, a fill racing a reopen, a very long token in every language, 5 MB documents, rounds of many large
documents opened and closed, big prompts to the service. Prints a table, then one JSON line:
{"malformed_sent", "unanswered", "crashes", "native_crashes", "wrong_place_edits", "wrong_document_edits",
"max_block_ms", "rss_growth_mb", "rss_after_close_mb", "service_health_max_ms", "fuzz_edits", "divergences"}.

- unanswered: requests with an id that got no answer (or more than one) within their timeout, in every phase.
- crashes: server processes that ended without being asked to (or not with code 0 after shutdown + exit);
  native_crashes: those of them ended by a signal (SIGSEGV, SIGABRT, ...).
- wrong_place_edits: `workspace/applyEdit`s whose range is not where the hole is in the version they name, and
  inline answers whose range is not at the cursor in the document the client then holds (issue 11, item 1).
- wrong_document_edits: fills that reached the client after their document was closed and reopened (or opened
  again) with another text at the same version: applyEdits and inline items (bench/reliability_docs.py).
- max_block_ms: the longest a small request on another document waited while an inline completion and a
  dg.fillHole ran on a 5 MB document (one line, and many lines, each on a fresh server); a request still
  unanswered when the bench gives up counts as waiting until then.
- rss_growth_mb: server RSS after a 5 MB document was closed minus before it was opened (after settling; the
  larger of the two shapes).
- rss_after_close_mb: server RSS after a round of 200 documents of 200 KB was opened and closed, minus before the
  first round (after settling; the largest of 3 rounds).
- service_health_max_ms: the longest `GET /health` on the engine service while it took 1,000,000-character
  prompts, one round of bench/service_loop.py (as text, text + suffix, a chat message, token ids).
- divergences: dg/documentState checks where the server's text differed from the client's own copy.

Fixed seed; `--quick` runs fewer and smaller cases (for a smoke test: one encoding fuzzed, one 1 MB document, one
long token, one race of each kind, 10 documents of 20 KB, prompts of 300,000 characters: over the token limit, so
each is tokenized whole and answered 413) on two servers instead of six (fuzz on the malformed phase's server, big
documents and open/close rounds on the fill phases' one: a server's start is ~3.7 CPU-s, most of this mode's cost),
so its RSS figures are not the measurement's either. Run:
python -m bench.reliability
"""

from __future__ import annotations

import argparse
import collections
import itertools
import json
import random
import time
from typing import Any

from bench.editfuzz import EditFuzzer
from bench.malformed import DOC_URI, malformed_cases
from bench.rawlsp import RawServer, message, sha256
from bench.reliability_docs import LANGS, SHAPES, run_long_tokens, run_open_close, run_reopen_races
from bench.service_loop import measure
from bench.tally import FILL_OPTIONS, Tally, start

SEED = 0
ENCODINGS = ("utf-8", "utf-16", "utf-32")
DOC_TEXT = "def add(a, b):\n    return a + b\n"
RACE_TEXT = "import os\n\ndef add(a, b):\n    return \n\nprint(add(1, 2))\n"  # issue 11, item 1
BIG_BYTES, QUICK_BIG_BYTES = 5_000_000, 1_000_000
BLOCK_DEADLINE_S, PING_EVERY_S, SETTLE_S = 30.0, 0.05, 3.0


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


def run_fuzz(tally: Tally, edits_per_encoding: int, encodings: tuple[str, ...] = ENCODINGS,
             shared: RawServer | None = None) -> tuple[int, int]:
    """Fuzzed edits on a fresh server per encoding (or, with `shared`, on that one, in its encoding: --quick)."""
    rng = random.Random(SEED)
    sent = diverged = 0
    for encoding in encodings:
        server = start(encoding) if shared is None else shared
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
        if shared is None:
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


def big_texts(size: int) -> list[tuple[str, str, dict[str, int]]]:
    """(shape, text of `size` bytes, a cursor in its middle)."""
    one = "a = [" + "1, " * (size // 3) + "]\n"
    line = "x = 1  # padding " + "y" * 40
    many = (line + "\n") * (size // (len(line) + 1))
    return [("one line", one, {"line": 0, "character": len(one) // 2}),
            ("many lines", many, {"line": many.count("\n") // 2, "character": len(line)})]


def run_big(shape: str, text: str, mid: dict[str, int], tally: Tally, settle_s: float,
            shared: RawServer | None = None) -> tuple[float, float]:
    """On a fresh server (or `shared`, started with FILL_OPTIONS: --quick): small requests on another document while
    an inline completion and a fill run on a big one; then the big document closed. The longest wait (ms) and the
    RSS growth (MB)."""
    server = start(options=FILL_OPTIONS) if shared is None else shared
    small = "file:///small.py"
    server.open(small, DOC_TEXT)
    server.wait_ready()
    time.sleep(settle_s)
    rss0 = server.rss_mb()
    uri = "file:///big.py"
    t0 = time.monotonic()
    server.open(uri, text)
    tally.answer(server, server.request("dg/documentState", {"textDocument": {"uri": uri}}), BLOCK_DEADLINE_S)
    tally.row("big", f"{shape}: didOpen until the next answer (ms)", round((time.monotonic() - t0) * 1e3))
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
    tally.row("big", f"{shape}: inline + fill answered within {BLOCK_DEADLINE_S:.0f} s / pings (unanswered) / "
              "longest wait (ms)", f"{in_time} / {len(pings)} ({late}) / {longest:.0f}")
    busy = server.state(small, BLOCK_DEADLINE_S) is None
    time.sleep(settle_s)
    growth = server.rss_mb() - rss0
    tally.row("big", f"{shape}: RSS before / growth after closing (MB)",
              f"{rss0:.0f} / {growth:.1f}" + (" (server still busy, close not yet read)" if busy else ""))
    if shared is None:
        tally.ended(server)
    return longest, growth


def run_service_loop(tally: Tally, chars: int) -> float:
    """The engine service's /health polled while it takes prompts of `chars` characters (bench.service_loop: as
    text, text + suffix, a chat message, token ids up to the body limit). The longest poll (ms)."""
    result = measure(None, chars, 1)
    for row in result["requests"]:
        tally.row("service", f"{row['request']} ({chars:,} chars): HTTP / s / polls / longest /health (ms)",
                  f"{row['status']} / {row['seconds']} / {row['polls']} / {row['health_max_ms']}")
    tally.row("service", "/health polls (failed) / p50 / longest (ms)", f"{result['health_polls']} "
              f"({result['health_failed']}) / {result['service_health_p50_ms']} / {result['service_health_max_ms']}")
    return result["service_health_max_ms"]


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer and smaller cases: a smoke test, not the measurement")
    args = ap.parse_args(argv)
    if args.quick:
        malformed_n, fuzz_n, trials, encodings, bigs = 120, 60, 1, ("utf-16",), big_texts(QUICK_BIG_BYTES)[:1]
        long_cases, rounds, chars, settle = [(LANGS[0], "comment")], (1, 10, 20_000), 300_000, 1.5
    else:
        malformed_n, fuzz_n, trials, encodings, bigs = 1100, 400, 3, ENCODINGS, big_texts(BIG_BYTES)
        long_cases = [(lang, shape) for lang in LANGS for shape in SHAPES]
        rounds, chars, settle = (3, 200, 200_000), 1_000_000, SETTLE_S
    tally = Tally()
    laps = [time.monotonic()]
    server = start()  # utf-16
    malformed = run_malformed(server, tally, malformed_n)
    if not args.quick:
        tally.ended(server)
    mark = tally.phase_end("malformed", 0)
    laps.append(time.monotonic())
    fuzz_sent, divergences = run_fuzz(tally, fuzz_n, encodings, server if args.quick and server.alive() else None)
    if args.quick:
        tally.ended(server)
    mark = tally.phase_end("fuzz", mark)
    laps.append(time.monotonic())
    server = start(options=FILL_OPTIONS)
    server.open(DOC_URI, DOC_TEXT)
    ready = server.wait_ready()
    tally.row("model", "state before the fill phases", ready["params"]["state"] if ready else "no status")
    wrong = run_wrong_place(server, tally, trials)
    mark = tally.phase_end("wrong place", mark)
    wrong_document = run_reopen_races(server, tally, trials)
    mark = tally.phase_end("reopen", mark)
    laps.append(time.monotonic())
    run_long_tokens(server, tally, long_cases, SEED, keep=args.quick)  # last on this server but with --quick
    shared = server if args.quick and server.alive() else None
    mark = tally.phase_end("long token", mark)
    laps.append(time.monotonic())
    blocks, growths = zip(*(run_big(*big, tally, settle, shared) for big in bigs), strict=True)
    max_block, growth = max(blocks), max(growths)
    mark = tally.phase_end("big", mark)
    laps.append(time.monotonic())
    after_close = run_open_close(tally, *rounds, settle, shared)
    if shared is not None:
        tally.ended(shared)
    mark = tally.phase_end("open/close", mark)
    laps.append(time.monotonic())
    health_ms = run_service_loop(tally, chars)
    tally.phase_end("service", mark)
    laps.append(time.monotonic())
    tally.row("all", "wall time (s): malformed / fuzz / wrong place + reopen / long token / big / open-close / "
              "service", " / ".join(f"{b - a:.0f}" for a, b in itertools.pairwise(laps)))
    print(f"{'phase':<12} {'what':<70} value")
    for phase, what, value in tally.rows:
        print(f"{phase:<12} {what:<70} {value}")
    for crash in tally.crashed:
        print(f"crash: {crash}")
    result = {"malformed_sent": malformed, "unanswered": tally.unanswered, "crashes": tally.crashes,
              "native_crashes": tally.native_crashes, "wrong_place_edits": wrong,
              "wrong_document_edits": wrong_document, "max_block_ms": round(max_block, 1),
              "rss_growth_mb": round(growth, 1), "rss_after_close_mb": round(after_close, 1),
              "service_health_max_ms": round(health_ms, 1), "fuzz_edits": fuzz_sent, "divergences": divergences}
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
