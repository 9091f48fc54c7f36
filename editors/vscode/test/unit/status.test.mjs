// The status bar state machine: client lifecycle + dg/status + dg/draft + toggle -> one view.
import assert from "node:assert/strict";
import { createRequire } from "node:module";
import test from "node:test";

const { load } = createRequire(import.meta.url)("./helpers.cjs");
const { StatusModel, parseDgStatus, formatLatency } = load("status");

const st = (state, extra = {}) => ({ state, message: `${state} msg`, model: "tiny", lastLatencyMs: null, ...extra });

test("starting -> loading -> ready -> busy -> ready with latency", () => {
  const seen = [];
  const m = new StatusModel((v) => seen.push(v.state));
  m.clientStarting();
  assert.equal(m.view().state, "starting");
  m.clientRunning();
  assert.equal(m.view().state, "starting", "running but silent server still reads as starting");
  m.serverStatus(st("loading"));
  assert.match(m.view().text, /Dg: loading/);
  m.serverStatus(st("ready"));
  assert.equal(m.view().text, "$(sparkle) Dg: ready");
  m.serverStatus(st("busy"));
  m.serverStatus(st("ready", { lastLatencyMs: 182.4 }));
  assert.equal(m.view().text, "$(sparkle) Dg: ready · 182 ms");
  assert.match(m.view().tooltip, /Model: tiny/);
  assert.match(m.view().tooltip, /Last fill: 182 ms/);
  assert.deepEqual(seen, ["starting", "starting", "loading", "ready", "busy", "ready"]);
});

test("a status notification before the client's Running event still counts", () => {
  const m = new StatusModel();
  m.clientStarting();
  m.serverStatus(st("ready"));
  assert.equal(m.view().state, "ready");
});

test("the last latency survives a status without one", () => {
  const m = new StatusModel();
  m.serverStatus(st("ready", { lastLatencyMs: 2500 }));
  m.serverStatus(st("busy"));
  m.serverStatus(st("ready"));
  assert.match(m.view().text, /2.5 s/);
});

test("error and disabled from the server; failures and stops from the client", () => {
  const m = new StatusModel();
  m.serverStatus(st("error", { message: "CUDA out of memory" }));
  assert.deepEqual([m.view().state, m.view().severity], ["error", "error"]);
  assert.match(m.view().tooltip, /CUDA out of memory/);
  m.serverStatus(st("disabled"));
  assert.equal(m.view().state, "disabled");
  m.clientStopped();
  assert.deepEqual([m.view().state, m.view().severity], ["stopped", "warning"]);
  m.clientFailed("dg-lsp not found");
  assert.equal(m.view().state, "error");
  assert.match(m.view().tooltip, /dg-lsp not found/);
  m.clientStarting();
  assert.equal(m.view().state, "starting", "a restart clears the old server state");
});

test("toggle off shows 'off' over idle states but not over loading/busy/error", () => {
  const m = new StatusModel();
  m.serverStatus(st("ready"));
  m.setInlineEnabled(false);
  assert.equal(m.view().state, "off");
  assert.match(m.view().tooltip, /Inline completions: off/);
  m.serverStatus(st("loading"));
  assert.equal(m.view().state, "loading");
  m.serverStatus(st("error"));
  assert.equal(m.view().state, "error");
  m.setInlineEnabled(true);
  m.serverStatus(st("ready"));
  assert.equal(m.view().state, "ready");
});

test("draft progress shows while busy and clears when done", () => {
  const m = new StatusModel();
  m.serverStatus(st("busy"));
  m.serverDraft({ step: 3, steps: 8, done: false });
  assert.match(m.view().text, /Dg: busy 3\/8$/);
  m.serverDraft({ step: 8, steps: 8, done: true });
  assert.match(m.view().text, /Dg: busy$/);
  m.serverDraft({ step: 1, steps: 8, done: false });
  m.serverStatus(st("ready"));
  assert.match(m.view().text, /Dg: ready$/);
});

test("malformed dg/status payloads are ignored", () => {
  const m = new StatusModel();
  m.serverStatus(st("ready"));
  assert.equal(m.serverStatus({ state: "sleeping" }), false);
  assert.equal(m.serverStatus(null), false);
  assert.equal(m.view().state, "ready");
  assert.deepEqual(parseDgStatus({ state: "busy" }), { state: "busy", message: "", model: null, lastLatencyMs: null });
});

test("latency formatting", () => {
  assert.equal(formatLatency(0.4), "0 ms");
  assert.equal(formatLatency(999), "999 ms");
  assert.equal(formatLatency(1049), "1.0 s");
});
