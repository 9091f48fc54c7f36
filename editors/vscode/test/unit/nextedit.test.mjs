// Next-edit suggestions: the answer read from the wire, the proposal mapped to decorations, and the policy
// (debounce, stale answers, Tab context key, dismissal, inline completions first) against a fake editor.
import assert from "node:assert/strict";
import { createRequire } from "node:module";
import test from "node:test";

const { load } = createRequire(import.meta.url)("./helpers.cjs");
const ne = load("nextedit");
const { NextEditPolicy } = load("nexteditpolicy");

const URI = "file:///w/a.py";
const pos = (line, character) => ({ line, character });
const range = (l1, c1, l2, c2) => ({ start: pos(l1, c1), end: pos(l2, c2) });
const wireEdit = (r, text, version = 3, uri = URI) => ({
  text,
  range: r,
  textDocument: { uri, version },
  command: { title: "Accept next edit", command: "dg.acceptNextEdit", arguments: [{ uri, version, documentOpen: 1, id: "p1" }] },
});

// ---- the wire ----------------------------------------------------------------------------------------

test("the request follows the contract: uri, version, position, triggerKind", () => {
  assert.equal(ne.NEXT_EDIT_REQUEST, "textDocument/copilotInlineEdit");
  assert.deepEqual(ne.nextEditParams(URI, 7, pos(2, 4), ne.TRIGGER.automatic), {
    textDocument: { uri: URI, version: 7 },
    position: { line: 2, character: 4 },
    context: { triggerKind: 2 },
  });
});

test("an answer becomes a proposal with its edits in document order and its command", () => {
  const later = wireEdit(range(4, 0, 4, 3), "bar");
  const earlier = wireEdit(range(1, 2, 1, 5), "baz");
  const p = ne.parseProposal({ edits: [later, earlier] }, URI, 3);
  assert.deepEqual(p.edits, [{ range: range(1, 2, 1, 5), text: "baz" }, { range: range(4, 0, 4, 3), text: "bar" }]);
  assert.equal(p.command.command, "dg.acceptNextEdit");
  assert.deepEqual(p.command.arguments, [{ uri: URI, version: 3, documentOpen: 1, id: "p1" }]);
  assert.equal(p.item, later);
  assert.equal(p.version, 3);
});

test("nothing to show: empty, null, malformed, overlapping, or computed for another version or document", () => {
  assert.equal(ne.parseProposal({ edits: [] }, URI, 3), undefined);
  assert.equal(ne.parseProposal(null, URI, 3), undefined);
  assert.equal(ne.parseProposal({ edits: [{ text: "x" }] }, URI, 3), undefined);
  assert.equal(ne.parseProposal({ edits: [wireEdit(range(2, 0, 1, 0), "x")] }, URI, 3), undefined, "backwards range");
  assert.equal(ne.parseProposal({ edits: [wireEdit(range(1, 0, 1, 1.5), "x")] }, URI, 3), undefined);
  const overlap = [wireEdit(range(1, 0, 2, 0), "a"), wireEdit(range(1, 5, 1, 6), "b")];
  assert.equal(ne.parseProposal({ edits: overlap }, URI, 3), undefined);
  // A stale answer: one edit for version 2 while version 3 was asked about.
  assert.equal(ne.parseProposal({ edits: [wireEdit(range(1, 0, 1, 1), "a"), wireEdit(range(2, 0, 2, 1), "b", 2)] }, URI, 3), undefined);
  assert.equal(ne.parseProposal({ edits: [wireEdit(range(1, 0, 1, 1), "a", 3, "file:///w/b.py")] }, URI, 3), undefined);
});

// ---- the diff on screen ------------------------------------------------------------------------------

const LINES = ["def area(r):", "    return 3.14 * r * r", "", "print(area(2))"];

test("a one-line change strikes the old text through and draws the new text after it", () => {
  const v = ne.proposalView(LINES, [{ range: range(1, 11, 1, 15), text: "math.pi" }]);
  assert.deepEqual(v.removed, [range(1, 11, 1, 15)]);
  assert.deepEqual(v.inserted, [{ at: pos(1, 15), text: "math.pi" }]);
  assert.deepEqual(v.ghost, []);
  assert.deepEqual([v.firstLine, v.lastLine], [1, 1]);
});

test("a multi-line replacement draws its new lines as a ghost block aligned right of the lines it replaces", () => {
  // Line 1 becomes two lines: the block sits beside lines 1 and 2, 4 columns past the longer of them.
  const v = ne.proposalView(LINES, [{ range: range(1, 4, 1, 23), text: "area = math.pi * r ** 2\n    return area" }]);
  assert.deepEqual(v.removed, [range(1, 4, 1, 23)]);
  assert.deepEqual(v.inserted, []);
  assert.deepEqual(v.ghost, [
    { line: 1, text: "    area = math.pi * r ** 2", pad: 4 },
    { line: 2, text: "    return area", pad: 23 + 4 },
  ]);
  assert.deepEqual([v.firstLine, v.lastLine], [1, 2]);
});

test("an inserted whole line is a ghost line without strike-through; unchanged lines are not repeated", () => {
  const v = ne.proposalView(LINES, [{ range: range(1, 0, 1, 0), text: "    import math\n" }]);
  assert.deepEqual(v.removed, []);
  assert.deepEqual(v.ghost, [{ line: 1, text: "    import math", pad: 4 }]);
});

test("lines added past the end of the document join the last line", () => {
  const v = ne.proposalView(LINES, [{ range: range(3, 14, 3, 14), text: "\nprint(area(3))\nprint(area(4))" }]);
  assert.deepEqual(v.ghost, [{ line: 3, text: "print(area(3)) ⏎ print(area(4))", pad: 4 }]);
  assert.deepEqual([v.firstLine, v.lastLine], [3, 3]);
});

test("a pure deletion is only struck through", () => {
  const v = ne.proposalView(LINES, [{ range: range(1, 0, 2, 0), text: "" }]);
  assert.deepEqual(v.removed, [range(1, 0, 2, 0)]);
  assert.deepEqual(v.ghost, []);
  assert.deepEqual(v.inserted, []);
});

// ---- the policy against a fake editor ----------------------------------------------------------------

function fakeHost({ lines = [...LINES], version = 3, settings = {} } = {}) {
  const h = {
    doc: { uri: URI, version, languageId: "python", cursor: pos(1, 4), lines },
    settingsValue: { enabled: true, debounceMs: 400, indicatorOnly: false, ...settings },
    timers: [],
    requests: [],
    shown: [],
    hidden: 0,
    tab: [],
    notified: [],
    applied: [],
    executed: [],
    logs: [],
    applyResult: true,
    settings: () => h.settingsValue,
    mayRequest: () => true,
    active: () => ({ uri: h.doc.uri, version: h.doc.version, languageId: h.doc.languageId, cursor: h.doc.cursor }),
    document: (uri) => (uri === h.doc.uri ? { version: h.doc.version, lines: h.doc.lines } : undefined),
    request(params) {
      let resolve;
      const result = new Promise((r) => (resolve = r));
      const req = { params, resolve, cancelled: false };
      h.requests.push(req);
      return { result, cancel: () => (req.cancelled = true) };
    },
    show: (proposal, view, indicatorOnly) => h.shown.push({ proposal, view, indicatorOnly }),
    hide: () => h.hidden++,
    setTabAccepts: (on) => h.tab.push(on),
    notifyShown: (item) => h.notified.push(item),
    apply: async (uri, v, edits) => (h.applied.push({ uri, version: v, edits }), h.applyResult),
    execute: async (command) => h.executed.push(command),
    log: (m) => h.logs.push(m),
    schedule(fn, ms) {
      const t = { fn, ms, cancelled: false };
      h.timers.push(t);
      return () => (t.cancelled = true);
    },
    /** Runs the pending debounce timer (the latest one) as if the time had passed. */
    async elapse() {
      const t = h.timers.filter((x) => !x.cancelled).at(-1);
      assert.ok(t, "a debounce timer is pending");
      t.cancelled = true;
      t.fn();
      await settle();
    },
    /** The user types: the version moves on and the editor reports the change. */
    type(policy) {
      h.doc.version++;
      policy.textChanged(URI);
    },
  };
  return h;
}

const settle = () => new Promise((r) => setImmediate(r));
const ANSWER = (version = 3) => ({ edits: [wireEdit(range(1, 11, 1, 15), "math.pi", version)] });

async function shownProposal(opts) {
  const h = fakeHost(opts);
  const p = new NextEditPolicy(h);
  h.type(p);
  await h.elapse();
  h.requests[0].resolve(ANSWER(h.doc.version));
  await settle();
  return { h, p };
}

test("after a pause of nextEditDebounceMs the policy asks once, with the document's version and triggerKind 2", async () => {
  const h = fakeHost({ settings: { debounceMs: 250 } });
  const p = new NextEditPolicy(h);
  h.type(p);
  h.type(p);
  assert.deepEqual(h.timers.map((t) => [t.ms, t.cancelled]), [[250, true], [250, false]], "each keystroke restarts the wait");
  assert.equal(h.requests.length, 0);
  await h.elapse();
  assert.equal(h.requests.length, 1);
  assert.deepEqual(h.requests[0].params, ne.nextEditParams(URI, 5, pos(1, 4), 2));
});

test("no automatic request with dg.nextEdit off, or for a change to another document", async () => {
  const h = fakeHost({ settings: { enabled: false } });
  const p = new NextEditPolicy(h);
  h.type(p);
  assert.equal(h.timers.length, 0);
  h.settingsValue.enabled = true;
  p.textChanged("output:extension-output-Dg");
  assert.equal(h.timers.length, 0);
});

test("a proposal is shown with the Tab context key on and didShowInlineEdit sent; the cursor is not touched", async () => {
  const { h, p } = await shownProposal();
  assert.equal(h.shown.length, 1);
  assert.deepEqual(h.shown[0].view.removed, [range(1, 11, 1, 15)]);
  assert.deepEqual(h.tab, [true]);
  assert.equal(h.notified.length, 1);
  assert.equal(h.notified[0].command.command, "dg.acceptNextEdit");
  assert.equal(p.shown.version, 4);
  assert.deepEqual(h.doc.cursor, pos(1, 4));
});

test("an answer for a version the user has typed past is discarded, never shown", async () => {
  const h = fakeHost();
  const p = new NextEditPolicy(h);
  h.type(p);
  await h.elapse();
  const asked = h.requests[0];
  h.type(p); // the user types while the model runs
  assert.ok(asked.cancelled, "typing cancels the running request");
  asked.resolve(ANSWER(4));
  await settle();
  assert.equal(h.shown.length, 0);
  assert.deepEqual(h.tab, []);
  // Even an answer that arrives un-cancelled for an old version is dropped by the version check.
  await h.elapse();
  h.doc.version++; // changed without the policy hearing of it yet
  h.requests[1].resolve(ANSWER(5));
  await settle();
  assert.equal(h.shown.length, 0);
  assert.ok(h.logs.some((l) => /discarded \(stale\): computed for v5, the document is at v6/.test(l)), h.logs.join("\n"));
});

test("Tab accepts: every edit applied in one call for the proposal's version, then the command; the key turns off", async () => {
  const { h, p } = await shownProposal();
  const result = await p.accept();
  assert.deepEqual(result, { accepted: true });
  assert.deepEqual(h.applied, [{ uri: URI, version: 4, edits: [{ range: range(1, 11, 1, 15), text: "math.pi" }] }]);
  assert.deepEqual(h.executed.map((c) => c.command), ["dg.acceptNextEdit"]);
  assert.deepEqual(h.tab, [true, false]);
  assert.equal(p.shown, undefined);
  assert.deepEqual(await p.accept(), { accepted: false, reason: "no next edit is shown" });
});

test("a stale proposal is never applied: the document moved on since it was computed", async () => {
  const { h, p } = await shownProposal();
  h.doc.version++; // an edit the policy has not been told about yet (e.g. the same key press)
  assert.deepEqual(await p.accept(), { accepted: false, reason: "document changed" });
  assert.deepEqual(h.applied, []);
  assert.deepEqual(h.executed, []);
  assert.deepEqual(h.tab, [true, false]);
});

test("an edit the editor refuses (its version check) runs no command", async () => {
  const { h, p } = await shownProposal();
  h.applyResult = false;
  assert.deepEqual(await p.accept(), { accepted: false, reason: "document changed" });
  assert.deepEqual(h.executed, []);
});

test("typing dismisses the proposal (decorations gone, Tab key off) and waits for the next pause", async () => {
  const { h, p } = await shownProposal();
  h.type(p);
  assert.equal(p.shown, undefined);
  assert.equal(h.hidden, 1);
  assert.deepEqual(h.tab, [true, false]);
  assert.ok(!h.timers.at(-1).cancelled);
});

test("moving the cursor off the proposal's lines dismisses it; moving within them does not", async () => {
  const { h, p } = await shownProposal();
  p.selectionChanged(URI, 1);
  assert.ok(p.shown);
  p.selectionChanged(URI, 3);
  assert.equal(p.shown, undefined);
  assert.deepEqual(h.tab, [true, false]);
});

test("Escape and another editor dismiss", async () => {
  let { h, p } = await shownProposal();
  p.dismiss("Escape");
  assert.equal(p.shown, undefined);
  ({ h, p } = await shownProposal());
  p.editorChanged();
  assert.equal(p.shown, undefined);
  assert.deepEqual(h.tab, [true, false]);
});

test("indicator-only mode shows the gutter mark and leaves Tab alone; the command still accepts", async () => {
  const { h, p } = await shownProposal({ settings: { indicatorOnly: true } });
  assert.equal(h.shown[0].indicatorOnly, true);
  assert.deepEqual(h.tab, [false]);
  assert.deepEqual(await p.accept(), { accepted: true });
  assert.equal(h.applied.length, 1);
});

test("no next edit while an inline completion runs or is shown; an empty inline answer lets it ask", async () => {
  const h = fakeHost();
  const p = new NextEditPolicy(h);
  h.type(p);
  p.inlineRequested(URI, 4);
  await h.elapse();
  assert.equal(h.requests.length, 0, "held while ghost text may come");
  p.inlineAnswered(URI, 4, true);
  await settle();
  assert.equal(h.requests.length, 0, "ghost text is shown");
  h.type(p);
  p.inlineRequested(URI, 5);
  await h.elapse();
  p.inlineAnswered(URI, 5, false);
  await settle();
  assert.equal(h.requests.length, 1, "no ghost text: ask now");
});

test("ghost text arriving while a proposal is shown takes its place", async () => {
  const { h, p } = await shownProposal();
  p.inlineRequested(URI, 4);
  p.inlineAnswered(URI, 4, true);
  assert.equal(p.shown, undefined);
  assert.deepEqual(h.tab, [true, false]);
});

test("at most one proposal: no request while one is shown", async () => {
  const { h, p } = await shownProposal();
  assert.equal(await p.ask(ne.TRIGGER.invoked), undefined);
  assert.equal(h.requests.length, 1);
});
