"""Next-edit suggestions through the real server: held-out edit tasks replayed over stdio and scored.

    python -m bench.next_edit [--model DIR] [--tasks 120] [--seed 0] [--quick] [--min-confidence X] [--out FILE]

Tasks (bench/next_edit_tasks.py): real code the shipped model never saw (the training corpus's held-out standard
library files), each a file, the user's edit, the cursor and the expected next state of the window: rename
propagation, a parameter added then its call sites, a repeated pattern edited once, and "no edit needed" cases
(over a quarter of all). For each task one server (`python -m dg_lsp`, the shipped model unless --model) gets the
file (didOpen), the user's edit as keystrokes (didChange, one per key), then `textDocument/copilotInlineEdit` at the
cursor (NES_PROTOCOL.md: the edits answer the request's version); the answer is checked against the wire contract,
applied to the document and compared with the expected state. All tasks run twice in one server: with the seeded
canvas the server uses by default (`nextEditNoise` 0.5, set through the `dg` settings) and from pure noise (1.0).

Figures: exact (the whole file after the proposal equals the expected one: the window matches and nothing else was
touched), no-edit precision (share of no-edit tasks where nothing was proposed), reversals (share of shown
proposals that put the user's edited line back as it was before the edit), syntax breaks (proposals after which the
whole file has more tree-sitter ERROR/MISSING nodes than before, or Python's parser rejects it and accepted it
before), shown (share of tasks with a non-empty answer), latency p50/p95 (request to answer, no debounce). The top
level is the default setting (0.5); `seeded_vs_noise` holds both. Last line JSON: {"tasks", "exact",
"no_edit_precision", "reversals", "syntax_breaks", "shown", "p50_ms", "p95_ms", "seeded_vs_noise"}.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

from lsprotocol import types as T

from bench.common import emit, machine, pick_model
from bench.launch import Client, stop, wait_for
from bench.launch import start as start_server
from bench.next_edit_score import applicable, by_kind, contract_errors, score, summarize
from bench.next_edit_tasks import LINES_ABOVE, LINES_BELOW, MIX, Task, build_tasks
from dg_lsp.devtools.client import as_dict, edit_doc, open_doc

ROOT = Path(__file__).resolve().parent.parent
METHOD = "textDocument/copilotInlineEdit"
NOISES = (0.5, 1.0)  # the seeded canvas (the server's default) and a fill from noise
HEADLINE = ("tasks", "exact", "no_edit_precision", "reversals", "syntax_breaks", "shown", "p50_ms", "p95_ms")


async def start(model: Path, extra: dict) -> Client:
    """bench.launch's launcher with next edits on in the window this bench scores; checks the server says it
    has them (capabilities.experimental.dgNextEdit)."""
    client = await start_server(model, {"nextEdit": True, "nextEditLinesAbove": LINES_ABOVE,
                                         "nextEditLinesBelow": LINES_BELOW, **extra})
    experimental = as_dict(client.init_result.capabilities.experimental) or {}
    if not experimental.get("dgNextEdit"):
        await stop(client)
        raise RuntimeError("the server does not advertise capabilities.experimental.dgNextEdit")
    return client


async def ask(client: Client, task: Task, uri: str, rid: str, debounce_s: float) -> tuple[dict, float, list[str],
                                                                                        dict]:
    """Open the task's file, type the user's edit, ask for the next edit: (answer, ms, contract errors, the
    server's figures for the request from dg/status: why nothing was shown, engine time, canvas...)."""
    open_doc(client, uri, task.before)
    for l0, c0, l1, c1, text in task.changes:
        edit_doc(client, uri, l0, c0, text, end=(l1, c1))
    version = client.versions[uri]
    await asyncio.sleep(debounce_s)  # a client asks after nextEditDebounceMs without a keystroke (triggerKind 2)
    params = {"textDocument": {"uri": uri, "version": version},
              "position": {"line": task.cursor[0], "character": task.cursor[1]}, "context": {"triggerKind": 2}}
    t0 = time.perf_counter()
    try:
        res = as_dict(await asyncio.wait_for(client.protocol.send_request_async(METHOD, params, rid), 120))
        errs = contract_errors(res, uri, version)
    except Exception as e:  # noqa: BLE001 -- an error answer (or none) is a contract failure, counted and shown
        res, errs = {"edits": []}, [f"request failed: {type(e).__name__}: {str(e)[:160]}"]
    ms = (time.perf_counter() - t0) * 1e3
    try:  # sent just after the answer; none when the server answered before running the model
        stats = await wait_for(lambda: client.request_stats(rid), 2.0)
    except TimeoutError:
        stats = {}
    client.text_document_did_close(T.DidCloseTextDocumentParams(T.TextDocumentIdentifier(uri=uri)))
    return (res if applicable(res) else {"edits": []}), ms, errs, stats


async def run(model: Path, tasks: list[Task], debounce_ms: int, extra: dict,
              verbose: bool) -> tuple[dict[float, list[dict]], list[str]]:
    client = await start(model, extra)
    rows: dict[float, list[dict]] = {}
    errors: list[str] = []
    try:
        for noise in NOISES:
            client.configure(nextEdit=True, nextEditNoise=noise, nextEditLinesAbove=LINES_ABOVE,
                             nextEditLinesBelow=LINES_BELOW, **extra)
            rows[noise] = []
            for i, task in enumerate(tasks):
                uri = Path(tempfile.gettempdir(), "nesbench", str(noise), str(i), Path(task.path).name).as_uri()
                res, ms, errs, stats = await ask(client, task, uri, f"nes-{noise}-{i}", debounce_ms / 1e3)
                errors += [f"{task.id} (noise {noise}): {e}" for e in errs]
                r = score(task, res, ms)
                r.update({"reason": stats.get("reason") if stats else "answered before the model ran",
                          "engine_ms": stats.get("engineMs"), "canvas": stats.get("canvasLength"),
                          "context_tokens": stats.get("contextTokens"), "confidence": stats.get("confidence"),
                          "tree_fresh": stats.get("treeFresh"), "check_prepared": stats.get("checkPrepared")})
                rows[noise].append(r)
                if verbose:
                    print(f"{noise} {task.id}: shown={r['shown']} exact={r['exact']} {ms:.0f} ms "
                          f"(reason {r['reason']}, engine {r['engine_ms']} ms, canvas {r['canvas']}, "
                          f"context {r['context_tokens']}, confidence {r['confidence']}, tree fresh "
                          f"{r['tree_fresh']}, check prepared {r['check_prepared']})", file=sys.stderr)
    finally:
        await stop(client)
    return rows, errors


def table(rows: dict[float, list[dict]]) -> str:
    head = f"{'kind':<26} {'n':>4}" + "".join(f" | {'exact':>6} {'shown':>6} {'rev':>4} {'brk':>4} @{n}"
                                              for n in rows)
    out = [head]
    kinds = {n: by_kind(rs) for n, rs in rows.items()}
    for k, v in next(iter(kinds.values())).items():
        out.append(f"{k:<26} {v['n']:>4}" + "".join(
            f" | {kinds[n][k]['exact']:>6.3f} {kinds[n][k]['shown']:>6.3f} {kinds[n][k]['reversals']:>4} "
            f"{kinds[n][k]['syntax_breaks']:>4}    " for n in rows))
    return "\n".join(out)


def reasons(rows: list[dict]) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in rows:
        if not r["shown"]:
            out[str(r["reason"])] = out.get(str(r["reason"]), 0) + 1
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, default=None, help="checkpoint dir (default: shipped model, else random)")
    ap.add_argument("--tasks", type=int, default=120)
    ap.add_argument("--debounce-ms", type=int, default=400, help="the pause after the edit before the request, as a "
                    "client waits nextEditDebounceMs (the contract's default: 400); not in the latency")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="5 tasks (one of each kind, two no-edit): a code-path "
                    "check, not a measurement")
    ap.add_argument("--out", type=Path, help="write the result (the last line and the details) here as JSON")
    ap.add_argument("--rows", type=Path, help="write one JSON line per task and setting here")
    ap.add_argument("--min-confidence", type=float, help="the confidence gate for every answer (default: the "
                    "server's, the checkpoint's calibrated one); 0 shows what the model proposes ungated")
    ap.add_argument("--only", help="run only the tasks whose id contains this (e.g. pattern/attr)")
    ap.add_argument("--verbose", action="store_true", help="print every answer's figures to stderr")
    args = ap.parse_args(argv)
    t0 = time.time()
    # --quick builds one task of each kind (MIX) and runs five of them: building (and checking) the full 120 took
    # ~14 of the quick run's ~30 s
    tasks = build_tasks(len(MIX) if args.quick else args.tasks, args.seed)
    if args.quick:
        tasks = [next(t for t in tasks if t.kind == k) for k in ("rename", "add_param", "pattern")] + \
            [t for t in tasks if t.no_edit][:2]
    tasks = [t for t in tasks if args.only is None or args.only in t.id]
    with tempfile.TemporaryDirectory() as tmp:
        model, label = pick_model(Path(tmp), args.model, tokenizer=True)
        extra = {} if args.min_confidence is None else {"minConfidence": args.min_confidence}
        rows, errors = asyncio.run(run(model, tasks, args.debounce_ms, extra, args.verbose))
    sums = {str(n): summarize(rs) for n, rs in rows.items()}
    default = sums[str(NOISES[0])]
    result = {k: default[k] for k in HEADLINE}
    result["seeded_vs_noise"] = sums
    kinds: dict[str, int] = {}
    for t in tasks:
        kinds[f"{t.kind}/{t.subkind}"] = kinds.get(f"{t.kind}/{t.subkind}", 0) + 1
    print(f"model: {label} ({model}); {len(tasks)} tasks (seed {args.seed}), "
          f"{sum(t.no_edit for t in tasks)} need no edit; window: cursor -{LINES_ABOVE}/+{LINES_BELOW} lines")
    print(table(rows))
    for n, s in sums.items():
        print(f"nextEditNoise {n}: " + ", ".join(f"{k} {v}" for k, v in s.items()))
    print(f"a server that never proposes anything: exact {sum(t.no_edit for t in tasks) / len(tasks):.3f}, "
          "no-edit precision 1.0")
    for n, rs in rows.items():
        why = reasons(rs)
        print(f"not shown at {n}, by the server's reason: " + ", ".join(f"{k} {v}" for k, v in why.items()))
    if errors:
        print(f"{len(errors)} answers break the wire contract; first ones:")
        for e in errors[:10]:
            print("  " + e)
    if args.rows:
        args.rows.write_text("".join(json.dumps({"noise": n, **r}) + "\n" for n, rs in rows.items() for r in rs))
    if args.out:
        detail = {**result, "model": label, "tasks_by_kind": kinds, "seed": args.seed, "quick": args.quick,
                  "by_kind": {str(n): by_kind(rs) for n, rs in rows.items()}, "contract_errors": len(errors),
                  "contract_error_examples": errors[:20],
                  "not_shown_reasons": {str(n): reasons(rs) for n, rs in rows.items()},
                  "debounce_ms": args.debounce_ms, "min_confidence": args.min_confidence,
                  "seconds": round(time.time() - t0, 1),
                  "command": "python -m bench.next_edit " + " ".join(argv if argv is not None else sys.argv[1:]),
                  "machine": machine()}
        args.out.write_text(json.dumps(detail, indent=1, sort_keys=True) + "\n")
    emit(result)
    return result


if __name__ == "__main__":
    main()
