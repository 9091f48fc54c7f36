// executeCommand request building for dg.rewriteSelection / dg.fillHole and the palette command flow.
import assert from "node:assert/strict";
import { createRequire } from "node:module";
import test from "node:test";

const { load } = createRequire(import.meta.url)("./helpers.cjs");
const r = load("requests");
const c = load("commands");

const range = (sl, sc, el, ec) => ({ start: { line: sl, character: sc }, end: { line: el, character: ec } });

test("rewriteSelection params follow PROTOCOL.md", () => {
  assert.deepEqual(r.rewriteSelectionParams("file:///a.py", range(1, 4, 3, 0)), {
    command: "dg.rewriteSelection",
    arguments: [{ textDocument: { uri: "file:///a.py" }, range: range(1, 4, 3, 0), widen: false }],
  });
  assert.equal(r.rewriteSelectionParams("file:///a.py", range(0, 0, 0, 1), true).arguments[0].widen, true);
});

test("a backwards selection is sent start <= end", () => {
  assert.deepEqual(r.rewriteSelectionParams("u", range(5, 2, 1, 7)).arguments[0].range, range(1, 7, 5, 2));
  assert.deepEqual(r.orderedRange(range(2, 9, 2, 3)), range(2, 3, 2, 9));
});

test("an empty range is refused", () => {
  assert.throws(() => r.rewriteSelectionParams("u", range(1, 1, 1, 1)), /non-empty/);
});

test("fillHole params follow PROTOCOL.md", () => {
  assert.deepEqual(r.fillHoleParams("file:///b.rs", { line: 7, character: 2 }), {
    command: "dg.fillHole",
    arguments: [{ textDocument: { uri: "file:///b.rs" }, position: { line: 7, character: 2 } }],
  });
});

test("results are read tolerantly", () => {
  assert.deepEqual(r.parseCommandResult({ applied: true, reason: null, latencyMs: 40.5 }), { applied: true, reason: null, latencyMs: 40.5 });
  assert.deepEqual(r.parseCommandResult(null), { applied: false, reason: "the server returned no result", latencyMs: null });
  assert.equal(r.parseCommandResult({ applied: "yes" }).applied, false);
  assert.equal(r.resultMessage("rewrite", { applied: true, reason: null, latencyMs: 1 }), undefined);
  assert.equal(r.resultMessage("fill", { applied: false, reason: "document changed", latencyMs: 1 }), "Dg: fill not applied: document changed");
});

function deps(overrides = {}) {
  const log = { sent: [], info: [], error: [], progress: [] };
  const d = {
    isRunning: () => true,
    execute: async (params, token) => {
      log.sent.push({ params, token });
      return { applied: true, reason: null, latencyMs: 5 };
    },
    withProgress: async (title, task) => {
      log.progress.push(title);
      return task("TOKEN");
    },
    info: (m) => log.info.push(m),
    error: (m) => log.error.push(m),
    isCancellation: (e) => e?.name === "Canceled",
    ...overrides,
  };
  return { d, log };
}

const editor = { uri: "file:///w/a.py", selection: range(2, 0, 4, 10), cursor: { line: 4, character: 10 } };

test("Rewrite Selection sends exactly the selection with the progress token", async () => {
  const { d, log } = deps();
  const result = await c.rewriteSelection(d, editor);
  assert.deepEqual(result, { applied: true, reason: null, latencyMs: 5 });
  assert.deepEqual(log.sent, [{ params: r.rewriteSelectionParams(editor.uri, editor.selection, false), token: "TOKEN" }]);
  assert.equal(log.info.length + log.error.length, 0);
});

test("Rewrite Selection without a selection or editor asks for one and sends nothing", async () => {
  const { d, log } = deps();
  await c.rewriteSelection(d, { ...editor, selection: range(3, 3, 3, 3) });
  await c.rewriteSelection(d, undefined);
  assert.equal(log.sent.length, 0);
  assert.equal(log.info.length, 2);
});

test("Fill Hole sends the cursor position", async () => {
  const { d, log } = deps();
  await c.fillHole(d, editor);
  assert.deepEqual(log.sent[0].params, r.fillHoleParams(editor.uri, editor.cursor));
});

test("not applied -> the reason is shown; failures -> an error; cancellation -> silence", async () => {
  let { d, log } = deps({ execute: async () => ({ applied: false, reason: "stale version", latencyMs: 3 }) });
  await c.rewriteSelection(d, editor);
  assert.deepEqual(log.info, ["Dg: rewrite not applied: stale version"]);

  ({ d, log } = deps({ execute: async () => { throw new Error("boom"); } }));
  await c.fillHole(d, editor);
  assert.deepEqual(log.error, ["Dg: fill failed: boom"]);

  ({ d, log } = deps({ execute: async () => { const e = new Error("x"); e.name = "Canceled"; throw e; } }));
  assert.equal(await c.rewriteSelection(d, editor), undefined);
  assert.equal(log.info.length + log.error.length, 0);
});

test("a stopped server is reported instead of queueing the request", async () => {
  const { d, log } = deps({ isRunning: () => false });
  await c.rewriteSelection(d, editor);
  assert.equal(log.sent.length, 0);
  assert.match(log.error[0], /not running/);
});

test("the server's commands run from code actions report 'not applied' too", () => {
  const shown = [];
  const raw = { applied: false, reason: "empty fill", latencyMs: 3 };
  assert.equal(c.reportServerCommand("dg.rewriteSelection", raw, (m) => shown.push(m)), raw);
  c.reportServerCommand("dg.fillHole", { applied: true, reason: null, latencyMs: 3 }, (m) => shown.push(m));
  c.reportServerCommand("other.command", null, (m) => shown.push(m));
  assert.deepEqual(shown, ["Dg: rewrite not applied: empty fill"]);
});
