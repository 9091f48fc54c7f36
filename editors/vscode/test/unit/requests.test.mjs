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

test("an instruction goes in the argument object beside range and widen; blank ones are left out", () => {
  assert.deepEqual(r.rewriteSelectionParams("file:///a.py", range(1, 4, 3, 0), false, "make it async"), {
    command: "dg.rewriteSelection",
    arguments: [{ textDocument: { uri: "file:///a.py" }, range: range(1, 4, 3, 0), widen: false, instruction: "make it async" }],
  });
  assert.equal(r.rewriteSelectionParams("u", range(0, 0, 0, 1), true, "  add types\n").arguments[0].instruction, "add types");
  for (const blank of [undefined, "", "   \t"]) {
    assert.ok(!("instruction" in r.rewriteSelectionParams("u", range(0, 0, 0, 1), false, blank).arguments[0]), String(blank));
  }
  assert.equal(r.normalizeInstruction(" ünïcode "), "ünïcode");
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
    askInstruction: async () => {
      log.asked = (log.asked ?? 0) + 1;
      return "make it async";
    },
    activeEditor: () => editor,
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

test("Rewrite Selection… asks, then sends the selection with the instruction", async () => {
  const { d, log } = deps();
  const result = await c.rewriteSelectionWithInstruction(d, editor);
  assert.deepEqual(result, { applied: true, reason: null, latencyMs: 5 });
  assert.equal(log.asked, 1);
  assert.deepEqual(log.sent, [
    { params: r.rewriteSelectionParams(editor.uri, editor.selection, false, "make it async"), token: "TOKEN" },
  ]);
  assert.equal(log.sent[0].params.arguments[0].instruction, "make it async");
  assert.deepEqual(log.progress, ['Dg: rewriting selection ("make it async")…']);
});

test("Rewrite Selection… with an empty instruction is a plain re-fill", async () => {
  const { d, log } = deps({ askInstruction: async () => "  " });
  await c.rewriteSelectionWithInstruction(d, editor, true);
  assert.deepEqual(log.sent[0].params, r.rewriteSelectionParams(editor.uri, editor.selection, true));
  assert.ok(!("instruction" in log.sent[0].params.arguments[0]));
  assert.deepEqual(log.progress, ["Dg: rewriting selection…"]);
});

test("Rewrite Selection… cancelled at the input box sends nothing and says nothing", async () => {
  const { d, log } = deps({ askInstruction: async () => undefined });
  assert.equal(await c.rewriteSelectionWithInstruction(d, editor), undefined);
  assert.equal(log.sent.length, 0);
  assert.equal(log.info.length + log.error.length + log.progress.length, 0);
});

test("Rewrite Selection… does not ask without a selection or a running server", async () => {
  let { d, log } = deps();
  await c.rewriteSelectionWithInstruction(d, { ...editor, selection: range(3, 3, 3, 3) });
  await c.rewriteSelectionWithInstruction(d, undefined);
  assert.equal(log.asked, undefined);
  assert.deepEqual(log.info, ["Dg: select the code to rewrite first.", "Dg: open a file and select the code to rewrite."]);
  ({ d, log } = deps({ isRunning: () => false }));
  await c.rewriteSelectionWithInstruction(d, editor);
  assert.equal(log.asked, undefined);
  assert.equal(log.sent.length, 0);
  assert.match(log.error[0], /not running/);
});

test("Rewrite Selection… sends nothing when the selection moved while the box was open", async () => {
  for (const now of [undefined, { ...editor, selection: range(2, 0, 4, 11) }, { ...editor, uri: "file:///w/b.py" }]) {
    const { d, log } = deps({ activeEditor: () => now });
    assert.equal(await c.rewriteSelectionWithInstruction(d, editor), undefined);
    assert.equal(log.sent.length, 0);
    assert.deepEqual(log.info, ["Dg: the selection changed while the instruction was typed; nothing was sent."]);
  }
});

test("the server's refusal of an instruction is shown as it says it", async () => {
  const reason = "this model's prompt format (fim) cannot take an instruction; use a chat-format checkpoint";
  const { d, log } = deps({ execute: async () => ({ applied: false, reason, latencyMs: 0.4 }) });
  const result = await c.rewriteSelectionWithInstruction(d, editor);
  assert.equal(result.applied, false);
  assert.deepEqual(log.info, [`Dg: rewrite not applied: ${reason}`]);
});

test("a long instruction is cut in the progress title but sent whole", async () => {
  const long = "rewrite this loop as a list comprehension and add type hints to every name";
  const { d, log } = deps({ askInstruction: async () => long });
  await c.rewriteSelectionWithInstruction(d, editor);
  assert.equal(log.sent[0].params.arguments[0].instruction, long);
  assert.equal(log.progress[0], `Dg: rewriting selection (${JSON.stringify(`${[...long].slice(0, 39).join("")}…`)})…`);
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
