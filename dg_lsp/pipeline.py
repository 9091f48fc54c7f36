"""The fill pipeline: one snapshot and hole -> prompt -> engine steps (or the LRU) -> the checkpoint's answer ->
post-processing -> a `FillOutcome` with its figures.

`run_fill` runs on the event loop; the engine job runs on the engine thread (dg_lsp.worker) while the loop awaits
it and serves other messages. It reports through its arguments only: the outcome it returns, the marks it sets on
the request's `Trace`, and `FillEvents` (drafts, progress, "busy"); the handler that called it sends dg/status.
A result for a document that changed meanwhile is dropped ("document changed"). A backend that fails a fill (a
remote server's error) gives the reason "error", its message in `FillOutcome.error` and the figures' `error`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from lsprotocol import types as T

from dg_lsp.cache import FillCaches, fill_key
from dg_lsp.config import Settings
from dg_lsp.context.layout import Snippet
from dg_lsp.documents import Encoding, Snapshot
from dg_lsp.edits import postprocess, to_lsp_range
from dg_lsp.holes import Hole
from dg_lsp.prompt import Prompt, build_prompt
from dg_lsp.syntax import COMMAND_PARSE_BYTES, KEYSTROKE_PARSE_BYTES, SyntaxCheck, prepare_check
from dg_lsp.trace import Trace
from dg_lsp.worker import SEED, Loaded, Ticket, Worker
from engine.seam import FillResult, RequestKind, StepDraft
from engine.seam_jobs import FillInputs

log = logging.getLogger(__name__)

LOW_CONFIDENCE = "low confidence"  # FillOutcome.reason when the gate withheld the fill
BUSY_AFTER_S = 0.1  # "busy" once an engine job has run this long (a keystroke's fill would make it flicker)


@dataclass(frozen=True)
class Policy:
    """How one fill runs: what asked for it, the engine settings in force, the post-processing budget."""

    kind: RequestKind
    steps: int | None
    entropy_bound: float | None
    context_tokens: int
    drafts: bool
    encoding: Encoding
    min_confidence: float = 0.0  # the gate: a fill less confident than this is withheld (0: none is)
    force: bool = False  # a command's "apply anyway": the gate reports but does not withhold
    seed_noise: float | None = None  # rewrites start from the selection at this noise level (None: from noise)
    cross_file_tokens: int = 0  # context from other files (dg_lsp.context); 0: none

    @classmethod
    def of(cls, settings: Settings, kind: RequestKind, encoding: Encoding, min_confidence: float = 0.0,
           force: bool = False) -> Policy:
        seed = settings.rewrite_noise if settings.rewrite_from_selection else None
        return cls(kind, settings.steps, settings.entropy_bound, settings.context_tokens, settings.drafts, encoding,
                   min_confidence, force, seed, settings.cross_file_budget())

    @property
    def parse_budget(self) -> int:
        return KEYSTROKE_PARSE_BYTES if self.kind == "keystroke" else COMMAND_PARSE_BYTES


@dataclass
class FillStats:
    """The figures of one fill that dg/status reports (`wire()`: the camelCase body of docs/PROTOCOL.md)."""

    id: str
    uri: str
    version: int
    tree_fresh: bool
    cached: Literal[False, "lru", "typed-ahead"] = False
    steps: int = 0
    cancelled: bool = False
    steps_after_cancel: int | None = None
    reused_prefix_tokens: int = 0
    engine_ms: float = 0.0
    context_tokens: int = 0
    canvas_length: int = 0
    prompt_ms: float = 0.0  # on the wire as "canvasMs"
    engine_wall_ms: float | None = None  # engineMs plus the thread hand-offs (only when the engine ran)
    post_ms: float | None = None  # only when post-processing ran
    check_prepared: bool | None = None
    total_ms: float = 0.0
    server_ms: float = 0.0
    reason: str | None = None
    confidence: float | None = None  # the fill's (engine.seam.fill_confidence); None: unknown or no fill
    min_confidence: float = 0.0  # the gate it was held to
    error: str | None = None  # the backend's message when reason is "error"
    cross_file: tuple[str, ...] | None = None  # files the prompt took context from, when context is on
    cross_file_tokens: int = 0
    index: dict[str, Any] | None = None  # the workspace index's state then (dg_lsp.context.workspace.status)

    def wire(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "id": self.id, "uri": self.uri, "version": self.version, "cached": self.cached,
            "treeFresh": self.tree_fresh, "steps": self.steps, "cancelled": self.cancelled,
            "stepsAfterCancel": self.steps_after_cancel, "reusedPrefixTokens": self.reused_prefix_tokens,
            "engineMs": self.engine_ms, "contextTokens": self.context_tokens, "canvasLength": self.canvas_length,
            "canvasMs": self.prompt_ms, "totalMs": self.total_ms, "serverMs": self.server_ms, "reason": self.reason,
            "confidence": None if self.confidence is None else round(self.confidence, 4),
            "minConfidence": self.min_confidence}
        optional = {"engineWallMs": self.engine_wall_ms, "postMs": self.post_ms, "checkPrepared": self.check_prepared,
                    "error": self.error}
        body.update({k: v for k, v in optional.items() if v is not None})
        if self.cross_file is not None:
            body["crossFile"] = {"files": list(self.cross_file), "tokens": self.cross_file_tokens,
                                 "index": self.index}
        return body


@dataclass(frozen=True)
class FillOutcome:
    """A fill (the text to put in the hole) or the reason there is none, and the figures."""

    fill: str | None
    reason: str | None
    stats: FillStats
    withheld: str | None = None  # the fill the confidence gate held back (reason LOW_CONFIDENCE)

    @property
    def confidence(self) -> float | None:
        return self.stats.confidence

    @property
    def error(self) -> str | None:
        """Why the backend failed the fill (reason "error"), for the user."""
        return self.stats.error


@dataclass(frozen=True)
class Shape:
    """How a fill's prompt is built and its answer finished: a hole's fill by default (dg_lsp.prompt.build_prompt,
    dg_lsp.edits.postprocess); a next edit (dg_lsp.nextedit) brings its own window prompt and answer. `seed_noise`
    (not None) seeds the canvas from the hole's text at that noise level, whatever the rewrite settings say;
    `drafts` False: no dg/draft for this fill (a next edit's window is not a hole a client shows drafts in)."""

    build: Callable[..., Prompt] = build_prompt
    finish: Callable[..., str | None] = postprocess
    seed_noise: float | None = None
    drafts: bool = True


HOLE_FILL = Shape()

# Context from other files for a hole: (snapshot, hole offset, encode, token budget) -> (snippets, the current
# file's path as the prompt names it); dg_lsp.session wires it to the workspace index.
Related = Callable[[Snapshot, int, Callable[[str], list[int]], int], tuple[Sequence[Snippet], str]]


@dataclass(frozen=True)
class FillEvents:
    """What a running fill tells the session, each called on the event loop: a dg/draft body, "busy" (the job has
    run BUSY_AFTER_S), and each step (for work-done progress; None: nobody listens)."""

    draft: Callable[[dict[str, Any]], None]
    busy: Callable[[], None]
    progress: Callable[[int, int], None] | None = None


async def run_fill(snap: Snapshot, hole: Hole, policy: Policy, engine: Loaded, caches: FillCaches, *,
                   worker: Worker, request_id: str, trace: Trace,
                   identity_of: Callable[[str], tuple[int, int] | None],
                   events: FillEvents, related: Related | None = None, shape: Shape = HOLE_FILL) -> FillOutcome:
    """prompt -> engine (or cache) -> answer -> postprocess, for one snapshot; see the module docstring. `engine`:
    the one backend (and its load) the prompt is built for and the job runs on."""
    t0 = trace.mark("fill")
    backend = engine.backend
    if shape.seed_noise is not None or not shape.drafts:
        policy = replace(policy, seed_noise=policy.seed_noise if shape.seed_noise is None else shape.seed_noise,
                         drafts=policy.drafts and shape.drafts)
    fmt = backend.prompt_format
    encode, budget = caches.encoder(backend), fmt.context_budget(policy.context_tokens)
    snippets, current = ((), "")
    if related is not None and policy.cross_file_tokens > 0:
        snippets, current = related(snap, hole.start, encode, min(policy.cross_file_tokens, budget // 2))
    prompt = shape.build(snap, hole, encode, fmt, budget, snippets, current)
    stats = FillStats(id=request_id, uri=snap.uri, version=snap.version, tree_fresh=snap.tree_fresh,
                      context_tokens=len(prompt.context_ids), canvas_length=prompt.canvas_length,
                      prompt_ms=round((trace.mark("prompt") - t0) * 1e3, 3),
                      cross_file=prompt.cross_file if related is not None and policy.cross_file_tokens else None,
                      cross_file_tokens=prompt.cross_file_tokens)
    init_ids = seed_ids(hole, fmt.name, policy, encode, prompt)
    key = (engine.generation, fill_key(prompt.context_ids, prompt.canvas_length, policy.steps, policy.entropy_bound,
                                       SEED, prompt.max_canvases),
           None if init_ids is None else (tuple(init_ids), policy.seed_noise))

    def current() -> bool:  # the same open of the document, at the same version (Snapshot.identity)
        return identity_of(snap.uri) == snap.identity

    def draft(body: dict[str, Any]) -> None:  # a step handed to the loop after a keystroke or a reopen is stale
        if current():
            shown_draft(body)

    shown_draft, events = events.draft, replace(events, draft=draft)

    # The syntax check's baseline does not depend on the fill: the loop, idle while the engine runs, prepares it
    # after the engine's first step. Not before the engine starts (it would sit on the keystroke's path) nor in
    # another thread (tree-sitter holds the GIL while it parses, so the engine thread would wait for it).
    prepared: list[SyntaxCheck | None] = []
    reason = None
    hit = caches.fills.get(key)
    raw, confidence = hit if hit is not None else ("", None)
    if hit is not None:
        stats.cached = "lru"
    else:
        def prepare() -> None:
            if not prepared and current():
                try:
                    prepared.append(prepare_check(snap, hole))
                except Exception:  # noqa: BLE001 -- postprocess then builds the check itself
                    log.exception("syntax check baseline failed")
                    prepared.append(None)

        raw, confidence, reason = await _run_engine(snap, hole, prompt, policy, engine, worker, request_id, trace,
                                                    stats, events, prepare, init_ids)
        if reason is None:
            caches.fills.put(key, (raw, confidence))
        prepared.append(None)  # too late now: postprocess prepares it itself
    fill = None
    if reason is None and current():
        t_post = time.perf_counter()
        stats.check_prepared = prepared[0] is not None if prepared else False
        code = fmt.answer(raw, prompt.prefix, prompt.suffix)  # a chat answer's fences and echoes cut away
        fill = shape.finish(snap, hole, code, prepared[0] if prepared else None, policy.parse_budget)
        stats.post_ms = round((trace.mark("post") - t_post) * 1e3, 3)
        if not fill:
            fill, reason = None, "empty fill"
    stats.confidence, stats.min_confidence = confidence, policy.min_confidence
    withheld = None
    if fill is not None and confidence is not None and confidence < policy.min_confidence and not policy.force:
        withheld, fill, reason = fill, None, LOW_CONFIDENCE
    if not current():  # also explains a cancel caused by a keystroke
        fill, withheld, reason = None, None, "document changed"
    stats.total_ms = round((trace.mark("filled") - t0) * 1e3, 3)
    stats.server_ms = round(stats.total_ms - stats.engine_ms, 3)
    stats.reason = reason
    log.info("fill %s %s v%s: %s", request_id, snap.uri, snap.version, stats)
    return FillOutcome(fill, reason, stats, withheld)


def seed_ids(hole: Hole, fmt_name: str, policy: Policy, encode: Callable[[str], list[int]],
             prompt: Prompt) -> list[int] | None:
    """The seed canvas of a rewrite (setting rewriteFromSelection): the selection's own token ids, which a FIM
    checkpoint's canvas holds as they are (its answer is the middle itself); cut to what the canvases hold. None
    for other fills, and for chat checkpoints (their answer is wrapped; dg.rewriteSelection refuses them first)."""
    if policy.seed_noise is None or hole.kind != "selection" or fmt_name != "fim":
        return None
    return list(encode(hole.replaced))[: prompt.canvas_length * prompt.max_canvases]  # the prompt's memo encoder


async def _run_engine(snap: Snapshot, hole: Hole, prompt: Prompt, policy: Policy, engine: Loaded,
                      worker: Worker, request_id: str, trace: Trace, stats: FillStats, events: FillEvents,
                      first_step: Callable[[], None], init_ids: list[int] | None = None
                      ) -> tuple[str, float | None, str | None]:
    """Run the engine job: (engine text, its confidence, None) or ("", None, why not). A cancelled task ends here
    as "cancelled"."""
    draft_range = to_lsp_range(snap, hole.start, hole.end, policy.encoding) if policy.drafts else None
    on_step = _step_listener(snap, request_id, draft_range, events, first_step)
    inputs = FillInputs(list(prompt.context_ids), prompt.canvas_length, policy.steps, policy.entropy_bound,
                        prompt.max_canvases, SEED, draft_text=policy.drafts, init_ids=init_ids,
                        start_noise=1.0 if init_ids is None else float(policy.seed_noise or 0.0))
    ticket = worker.ticket(snap.uri, request_id, policy.kind, engine, inputs, on_step)
    busy = asyncio.get_running_loop().call_later(BUSY_AFTER_S, events.busy)
    res: FillResult | None = None
    try:
        t_engine = time.perf_counter()
        res = await worker.infill(ticket)
        stats.engine_wall_ms = round((trace.mark("resumed") - t_engine) * 1e3, 3)
        if ticket.started_at is not None and ticket.finished_at is not None:
            trace.mark("engine_started", ticket.started_at)
            trace.mark("engine_finished", ticket.finished_at)
    except asyncio.CancelledError:  # $/cancelRequest: the request is answered already; keep the figures
        _job_stats(stats, ticket, None)
        return "", None, "cancelled"
    finally:
        busy.cancel()
        worker.release(ticket)
    _job_stats(stats, ticket, res)
    if res is not None and res.error is not None:  # a failure, never shown as a cancel
        stats.error = res.error
        return "", None, "error"
    if res is None or res.cancelled:
        return "", None, "cancelled"
    if draft_range is not None:
        events.draft(_draft_body(snap, request_id, draft_range, res.steps, res.steps, res.text, True))
    return res.text, res.confidence, None


def _step_listener(snap: Snapshot, request_id: str, draft_range: T.Range | None, events: FillEvents,
                   first_step: Callable[[], None]) -> Callable[[StepDraft], None]:
    """A callback for the engine thread: `first_step` after the first step, then each step as dg/draft (when
    drafts are on) and progress, all handed to the loop."""
    loop = asyncio.get_running_loop()

    def on_step(draft: StepDraft) -> None:  # engine thread: only hands work to the loop
        if draft.step == 1:
            loop.call_soon_threadsafe(first_step)
        if draft_range is not None:
            body = _draft_body(snap, request_id, draft_range, draft.step, draft.steps, draft.text, False)
            loop.call_soon_threadsafe(events.draft, body)
        if events.progress is not None:
            loop.call_soon_threadsafe(events.progress, draft.step, draft.steps)

    return on_step


def _draft_body(snap: Snapshot, request_id: str, rng: T.Range, step: int, steps: int, text: str,
                done: bool) -> dict[str, Any]:
    """A dg/draft notification's params (`rng`: the hole)."""
    return {"uri": snap.uri, "version": snap.version, "requestId": request_id, "step": step, "steps": steps,
            "text": text, "range": rng, "done": done}


def _job_stats(stats: FillStats, ticket: Ticket, res: FillResult | None) -> None:
    """The figures of one engine job from its ticket and result (None when it did not finish)."""
    stats.steps = res.steps if res is not None else ticket.steps_done
    stats.cancelled = ticket.steps_at_cancel is not None
    stats.steps_after_cancel = ticket.steps_after_cancel
    if res is not None:
        stats.reused_prefix_tokens = res.reused_prefix_tokens
        stats.engine_ms = round(float(res.timings.get("total_ms", 0.0)), 3)
    if ticket.steps_at_cancel is not None:
        log.info("request %s cancelled (%s) after step %d; %d step(s) ran after the cancel",
                 ticket.request_id, ticket.why_cancelled, ticket.steps_at_cancel, ticket.steps_after_cancel)
