"""The fill pipeline: one snapshot and hole -> prompt -> engine steps (or the LRU) -> the checkpoint's answer ->
post-processing -> a `FillOutcome` with its figures.

`run_fill` runs on the event loop; the engine job runs on the engine thread (dg_lsp.fill.worker) while the loop awaits
it and serves other messages. It reports through its arguments only: the outcome it returns, the spans it records on
the request's `Trace` (dg_lsp.trace: a span per stage, around it), and `FillEvents` (drafts, progress, "busy"); the
figures (`FillStats`) are read from the spans and the engine's result once the fill is done, and the handler that
called it sends them in dg/status.
A result for a document that changed meanwhile is dropped ("document changed"). A backend that fails a fill (a
remote server's error) gives the reason "error", its message in `FillOutcome.error` and the figures' `error`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from lsprotocol import types as T

from dg_lsp.config import Settings
from dg_lsp.context.layout import Snippet
from dg_lsp.documents import Encoding, Snapshot
from dg_lsp.fill.cache import FillCaches, fill_key
from dg_lsp.fill.edits import postprocess, to_lsp_range
from dg_lsp.fill.holes import Hole
from dg_lsp.fill.prompt import Prompt, build_prompt
from dg_lsp.fill.syntax import COMMAND_PARSE_BYTES, KEYSTROKE_PARSE_BYTES, SyntaxCheck, prepare_check
from dg_lsp.fill.worker import SEED, Loaded, Ticket, Worker
from dg_lsp.trace import Trace
from engine.seam import FillResult, PromptFormat, RequestKind, StepDraft
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
    cross_file_items: tuple[dict[str, Any], ...] = ()  # each excerpt's path, line, name, kind
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
                                 "items": list(self.cross_file_items), "index": self.index}
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
    """How a fill's prompt is built and its answer finished: a hole's fill by default (dg_lsp.fill.prompt.build_prompt,
    dg_lsp.fill.edits.postprocess); a next edit (dg_lsp.nextedit) brings its own window prompt and answer. `seed_noise`
    (not None) seeds the canvas from the hole's text at that noise level, whatever the rewrite settings say;
    `drafts` False: no dg/draft for this fill (a next edit's window is not a hole a client shows drafts in)."""

    build: Callable[..., Prompt] = build_prompt
    finish: Callable[..., str | None] = postprocess
    seed_noise: float | None = None
    drafts: bool = True

    def policy(self, policy: Policy) -> Policy:
        """`policy` with this shape's seed noise and drafts."""
        if self.seed_noise is None and self.drafts:
            return policy
        return replace(policy, seed_noise=policy.seed_noise if self.seed_noise is None else self.seed_noise,
                       drafts=policy.drafts and self.drafts)


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
    """prompt -> engine (or cache) -> answer -> postprocess, for one snapshot, each stage under its span of `trace`;
    the figures are read from the spans and the engine's result at the end (see the module docstring). `engine`:
    the one backend (and its load) the prompt is built for and the job runs on."""

    def current() -> bool:  # the same open of the document, at the same version (Snapshot.identity)
        return identity_of(snap.uri) == snap.identity

    with trace.span("fill"):
        policy, fmt, encode = shape.policy(policy), engine.backend.prompt_format, caches.encoder(engine.backend)
        with trace.span("prompt"):
            prompt = _prompt(snap, hole, policy, fmt, encode, related, shape)
        init_ids = seed_ids(hole, fmt.name, policy, encode, prompt)
        key = (engine.generation, fill_key(prompt.context_ids, prompt.canvas_length, policy.steps,
                                           policy.entropy_bound, SEED, prompt.max_canvases),
               None if init_ids is None else (tuple(init_ids), policy.seed_noise))

        # The syntax check's baseline does not depend on the fill: the loop, idle while the engine runs, prepares
        # it after the engine's first step. Not before the engine starts (it would sit on the keystroke's path) nor
        # in another thread (tree-sitter holds the GIL while it parses, so the engine thread would wait for it).
        prepared: list[SyntaxCheck | None] = []

        def prepare() -> None:
            if not prepared and current():
                try:
                    prepared.append(prepare_check(snap, hole))
                except Exception:  # noqa: BLE001 -- postprocess then builds the check itself
                    log.exception("syntax check baseline failed")
                    prepared.append(None)

        def draft(body: dict[str, Any]) -> None:  # a step handed to the loop after a keystroke or a reopen is stale
            if current():
                events.draft(body)

        hit = caches.fills.get(key)
        if hit is not None:
            run = EngineRun(*hit)
        else:
            run = await _run_engine(snap, hole, prompt, policy, engine, worker, request_id, trace,
                                    replace(events, draft=draft), prepare, init_ids)
            if run.reason is None:
                caches.fills.put(key, (run.text, run.confidence))
            prepared.append(None)  # too late now: postprocess prepares it itself
        fill, reason, check_prepared = None, run.reason, None
        if reason is None and current():
            with trace.span("post"):
                check = prepared[0] if prepared else None
                check_prepared = check is not None
                code = fmt.answer(run.text, prompt.prefix, prompt.suffix)  # a chat answer's fences and echoes cut
                fill = shape.finish(snap, hole, code, check, policy.parse_budget) or None
            if fill is None:
                reason = "empty fill"
        withheld = None
        if fill is not None and run.confidence is not None and run.confidence < policy.min_confidence \
                and not policy.force:
            withheld, fill, reason = fill, None, LOW_CONFIDENCE
        if not current():  # also explains a cancel caused by a keystroke
            fill, withheld, reason = None, None, "document changed"

    stats = _figures(request_id, snap, policy, prompt, run, hit is not None, check_prepared, reason, trace,
                     related is not None)
    log.info("fill %s %s v%s: %s", request_id, snap.uri, snap.version, stats)
    return FillOutcome(fill, reason, stats, withheld)


def _prompt(snap: Snapshot, hole: Hole, policy: Policy, fmt: PromptFormat, encode: Callable[[str], list[int]],
            related: Related | None, shape: Shape) -> Prompt:
    """The prompt stage: context from other files (when on), then the shape's prompt within the format's budget."""
    budget = fmt.context_budget(policy.context_tokens)
    snippets, path = ((), "")
    if related is not None and policy.cross_file_tokens > 0:
        snippets, path = related(snap, hole.start, encode, min(policy.cross_file_tokens, budget // 2))
    return shape.build(snap, hole, encode, fmt, budget, snippets, path)


def _figures(request_id: str, snap: Snapshot, policy: Policy, prompt: Prompt, run: EngineRun, cached: bool,
             check_prepared: bool | None, reason: str | None, trace: Trace, related: bool) -> FillStats:
    """A finished fill's figures: its stages' times from the trace's spans, the engine's from its result."""
    total_ms = trace.ms("fill") or 0.0
    return FillStats(id=request_id, uri=snap.uri, version=snap.version, tree_fresh=snap.tree_fresh,
                     cached="lru" if cached else False, steps=run.steps, cancelled=run.cancelled,
                     steps_after_cancel=run.steps_after_cancel, reused_prefix_tokens=run.reused_prefix_tokens,
                     engine_ms=run.engine_ms, context_tokens=len(prompt.context_ids),
                     canvas_length=prompt.canvas_length, prompt_ms=trace.ms("prompt") or 0.0,
                     engine_wall_ms=trace.ms("engine"), post_ms=trace.ms("post"), check_prepared=check_prepared,
                     total_ms=total_ms, server_ms=round(total_ms - run.engine_ms, 3), reason=reason,
                     confidence=run.confidence, min_confidence=policy.min_confidence, error=run.error,
                     cross_file=prompt.cross_file if related and policy.cross_file_tokens else None,
                     cross_file_tokens=prompt.cross_file_tokens, cross_file_items=prompt.cross_file_items)


def seed_ids(hole: Hole, fmt_name: str, policy: Policy, encode: Callable[[str], list[int]],
             prompt: Prompt) -> list[int] | None:
    """The seed canvas of a rewrite (setting rewriteFromSelection): the selection's own token ids, which a FIM
    checkpoint's canvas holds as they are (its answer is the middle itself); cut to what the canvases hold. None
    for other fills, and for chat checkpoints (their answer is wrapped; dg.rewriteSelection refuses them first)."""
    if policy.seed_noise is None or hole.kind != "selection" or fmt_name != "fim":
        return None
    return list(encode(hole.replaced))[: prompt.canvas_length * prompt.max_canvases]  # the prompt's memo encoder


@dataclass(frozen=True)
class EngineRun:
    """What the engine gave for one fill (or the LRU, from an earlier one): the text and its confidence, or why
    there is none ("cancelled", "error" with the backend's message), and the job's figures (engine.seam.FillResult's
    meanings; zeros for an LRU hit)."""

    text: str
    confidence: float | None
    reason: str | None = None
    error: str | None = None
    steps: int = 0
    cancelled: bool = False  # a cancel reached the job (Ticket.steps_at_cancel)
    steps_after_cancel: int | None = None
    reused_prefix_tokens: int = 0
    engine_ms: float = 0.0  # the FillResult's timings["total_ms"]


async def _run_engine(snap: Snapshot, hole: Hole, prompt: Prompt, policy: Policy, engine: Loaded,
                      worker: Worker, request_id: str, trace: Trace, events: FillEvents,
                      first_step: Callable[[], None], init_ids: list[int] | None = None) -> EngineRun:
    """Run the engine job under the trace's "engine" span (the engine thread's own as "engine_thread"). A cancelled
    task ends here as "cancelled"."""
    draft_range = to_lsp_range(snap, hole.start, hole.end, policy.encoding) if policy.drafts else None
    on_step = _step_listener(snap, request_id, draft_range, events, first_step)
    inputs = FillInputs(list(prompt.context_ids), prompt.canvas_length, policy.steps, policy.entropy_bound,
                        prompt.max_canvases, SEED, draft_text=policy.drafts, init_ids=init_ids,
                        start_noise=1.0 if init_ids is None else float(policy.seed_noise or 0.0))
    ticket = worker.ticket(snap.uri, request_id, policy.kind, engine, inputs, on_step)
    busy = asyncio.get_running_loop().call_later(BUSY_AFTER_S, events.busy)
    res: FillResult | None = None
    try:
        with trace.span("engine"):
            res = await worker.infill(ticket)
    except asyncio.CancelledError:  # $/cancelRequest: the request is answered already; keep the figures
        pass
    finally:
        busy.cancel()
        worker.release(ticket)
    if res is not None and ticket.started_at is not None and ticket.finished_at is not None:
        trace.record("engine_thread", ticket.started_at, ticket.finished_at)
    run = _engine_run(ticket, res)
    if run.reason is None and draft_range is not None:
        events.draft(_draft_body(snap, request_id, draft_range, run.steps, run.steps, run.text, True))
    return run


def _engine_run(ticket: Ticket, res: FillResult | None) -> EngineRun:
    """An engine job's outcome from its ticket and result (None: the task was cancelled before it came back). A
    failure is "error", never a cancel."""
    if ticket.steps_at_cancel is not None:
        log.info("request %s cancelled (%s) after step %d; %d step(s) ran after the cancel",
                 ticket.request_id, ticket.why_cancelled, ticket.steps_at_cancel, ticket.steps_after_cancel)
    cancelled, after = ticket.steps_at_cancel is not None, ticket.steps_after_cancel
    if res is None:
        return EngineRun("", None, "cancelled", steps=ticket.steps_done, cancelled=cancelled, steps_after_cancel=after)
    reason = "error" if res.error is not None else "cancelled" if res.cancelled else None
    return EngineRun(res.text if reason is None else "", res.confidence if reason is None else None, reason,
                     res.error, res.steps, cancelled, after, res.reused_prefix_tokens,
                     round(float(res.timings.get("total_ms", 0.0)), 3))


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
