// The client-side toggle and language filter for inline completions.
import assert from "node:assert/strict";
import { createRequire } from "node:module";
import test from "node:test";

const { load } = createRequire(import.meta.url)("./helpers.cjs");
const { InlineGate } = load("gate");

test("toggle flips, notifies once per change", () => {
  const changes = [];
  const g = new InlineGate(true, (on) => changes.push(on));
  assert.equal(g.shouldRequest("python"), true);
  assert.equal(g.toggle(), false);
  assert.equal(g.shouldRequest("python"), false);
  g.set(false);
  assert.equal(g.toggle(), true);
  assert.deepEqual(changes, [false, true]);
});

test("languages: null/empty = all, else only the listed ones", () => {
  const g = new InlineGate();
  g.setLanguages(null);
  assert.equal(g.shouldRequest("go"), true);
  g.setLanguages(["python", 3]);
  assert.equal(g.shouldRequest("python"), true);
  assert.equal(g.shouldRequest("go"), false);
  g.setLanguages([]);
  assert.equal(g.shouldRequest("go"), true);
});
