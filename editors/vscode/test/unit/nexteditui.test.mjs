// Next-edit suggestions through the activated extension (stub vscode module, fake language client): a text
// change -> copilotInlineEdit -> decorations and the Tab context key -> Dg: Accept Next Edit applies one undo step
// and runs the server's command; typing dismisses; a stale proposal is not applied.
import assert from "node:assert/strict";
import { createRequire } from "node:module";
import test, { beforeEach } from "node:test";

const { load, vscode, lc } = createRequire(import.meta.url)("./helpers.cjs");
const ext = load("extension");
const S = vscode.__state;
const URI = "file:///w/a.py";
const TEXT = "def area(r):\n    return 3.14 * r * r\n";

const settle = async () => {
  for (let i = 0; i < 5; i++) await new Promise((r) => setImmediate(r));
};
const wait = (ms) => new Promise((r) => setTimeout(r, ms));

beforeEach(async () => {
  await ext.deactivate();
});

async function setup(config = {}) {
  vscode.__reset();
  lc.__instances.length = 0;
  Object.assign(S.config, { "dg.server.pythonPath": process.execPath, "dg.nextEditDebounceMs": 0 }, config);
  const editor = vscode.__textEditor(URI, TEXT, { cursor: [1, 4] });
  S.activeTextEditor = editor;
  S.visibleTextEditors = [editor];
  S.textDocuments = [editor.document];
  await ext.activate({ subscriptions: [], globalState: vscode.__memento(), extensionUri: { fsPath: "/ext" } });
  const client = lc.__instances.at(-1);
  client.answer = async (params) =>
    params.textDocument?.version === undefined
      ? { applied: true }
      : {
          edits: [
            {
              text: "math.pi",
              range: { start: { line: 1, character: 11 }, end: { line: 1, character: 15 } },
              textDocument: { uri: URI, version: params.textDocument.version },
              command: { title: "Accept next edit", command: "dg.acceptNextEdit", arguments: [{ uri: URI, id: "p1" }] },
            },
          ],
        };
  return { editor, client };
}

/** Types one character at the end of line 0, as the user would. */
function type(editor, text = " ") {
  vscode.__replaceText(editor.document, [{ range: new vscode.Range(0, 12, 0, 12), newText: text }]);
}

const typeOf = (match) => S.decorationTypes.find((t) => match(t.options));
const removedType = () => typeOf((o) => o.textDecoration === "line-through");
const insertedType = () => typeOf((o) => o.after && !o.after.fontStyle);

test("a pause after typing asks the server and draws the proposal; Tab's context key is on while shown", async () => {
  const { editor, client } = await setup();
  type(editor);
  await wait(5);
  await settle();
  const asked = client.requests.filter((r) => r.method === "textDocument/copilotInlineEdit");
  assert.equal(asked.length, 1);
  assert.deepEqual(asked[0].params, { textDocument: { uri: URI, version: 2 }, position: { line: 1, character: 4 }, context: { triggerKind: 2 } });
  const removed = editor.decorations.get(removedType());
  assert.equal(removed.length, 1);
  assert.deepEqual([removed[0].range.start, removed[0].range.end], [new vscode.Position(1, 11), new vscode.Position(1, 15)]);
  const inserted = editor.decorations.get(insertedType());
  assert.equal(inserted[0].renderOptions.after.contentText, "math.pi");
  assert.match(removed[0].hoverMessage.value, /-3\.14\n\+math\.pi/);
  assert.equal(S.contexts["dg.nextEditVisible"], true);
  assert.deepEqual(client.notifications.map((n) => n.method), ["textDocument/didShowInlineEdit"]);
  assert.deepEqual(editor.selection.active, new vscode.Position(1, 4), "the cursor did not move");
});

test("Dg: Accept Next Edit applies every edit in one undo step, then runs the server's command", async () => {
  const { editor, client } = await setup();
  type(editor);
  await wait(5);
  await settle();
  const result = await vscode.commands.executeCommand("dg.acceptNextEditCommand");
  assert.deepEqual(result, { accepted: true });
  assert.equal(editor.edits.length, 1);
  assert.deepEqual(editor.edits[0].options, { undoStopBefore: true, undoStopAfter: true });
  assert.equal(editor.document.getText(), "def area(r): \n    return math.pi * r * r\n");
  const exec = client.requests.filter((r) => r.method === "workspace/executeCommand");
  assert.deepEqual(exec.map((r) => r.params), [{ command: "dg.acceptNextEdit", arguments: [{ uri: URI, id: "p1" }] }]);
  assert.equal(S.contexts["dg.nextEditVisible"], false);
  assert.deepEqual(editor.decorations.get(removedType()), []);
});

test("typing dismisses: decorations cleared, context key off, nothing applied", async () => {
  const { editor } = await setup({ "dg.nextEditDebounceMs": 5000 });
  await vscode.commands.executeCommand("dg.suggestNextEditCommand");
  await settle();
  assert.equal(S.contexts["dg.nextEditVisible"], true);
  type(editor, "x");
  assert.equal(S.contexts["dg.nextEditVisible"], false);
  assert.deepEqual(editor.decorations.get(removedType()), []);
  assert.deepEqual(await vscode.commands.executeCommand("dg.acceptNextEditCommand"), { accepted: false, reason: "no next edit is shown" });
  assert.equal(editor.document.getText(), `def area(r):x\n    return 3.14 * r * r\n`);
});

test("a proposal for an older version is not applied, and the editor's text stays as typed", async () => {
  const { editor } = await setup({ "dg.nextEditDebounceMs": 5000 });
  await vscode.commands.executeCommand("dg.suggestNextEditCommand");
  await settle();
  editor.document.version++; // the document moved on before the change event reached the extension
  assert.deepEqual(await vscode.commands.executeCommand("dg.acceptNextEditCommand"), { accepted: false, reason: "document changed" });
  assert.equal(editor.edits.length, 0);
  assert.equal(editor.document.getText(), TEXT);
});

test("no request when the server does not answer next edits, or with dg.nextEdit off", async () => {
  let { editor, client } = await setup();
  client.initializeResult = { capabilities: {} };
  type(editor);
  await wait(5);
  await settle();
  assert.equal(client.requests.length, 0);
  ({ editor, client } = await setup({ "dg.nextEdit": false }));
  type(editor);
  await wait(5);
  await settle();
  assert.equal(client.requests.length, 0);
});

test("Dg: Suggest Next Edit asks at the cursor (triggerKind 1) and says so when there is nothing", async () => {
  const { client } = await setup({ "dg.nextEditDebounceMs": 5000 });
  client.answer = async () => ({ edits: [] });
  assert.equal(await vscode.commands.executeCommand("dg.suggestNextEditCommand"), undefined);
  assert.equal(client.requests[0].params.context.triggerKind, 1);
  assert.deepEqual(S.messages.map((m) => [m.level, m.text]), [["statusbar", "Dg: no next edit here"]]);
});

test("indicator-only: a gutter mark on the proposal's first line, Tab left alone", async () => {
  const { editor } = await setup({ "dg.nextEditIndicatorOnly": true });
  type(editor);
  await wait(5);
  await settle();
  const gutter = typeOf((o) => o.gutterIconPath);
  assert.equal(gutter.options.gutterIconPath.fsPath, "/ext/media/next-edit.svg");
  assert.equal(editor.decorations.get(gutter).length, 1);
  assert.equal(editor.decorations.get(gutter)[0].range.start.line, 1);
  assert.equal(editor.decorations.get(removedType()), undefined);
  assert.equal(S.contexts["dg.nextEditVisible"], false);
  assert.deepEqual(await vscode.commands.executeCommand("dg.acceptNextEditCommand"), { accepted: true });
});

test("package.json: Tab accepts only while dg.nextEditVisible and no ghost text or suggest widget is shown", async () => {
  const { readFile } = await import("node:fs/promises");
  const pkg = JSON.parse(await readFile(new URL("../../package.json", import.meta.url), "utf8"));
  const tab = pkg.contributes.keybindings.find((k) => k.key === "tab");
  assert.equal(tab.command, "dg.acceptNextEditCommand");
  for (const clause of ["dg.nextEditVisible", "!inlineSuggestionVisible", "!suggestWidgetVisible", "editorTextFocus"]) {
    assert.ok(tab.when.split(" && ").includes(clause), clause);
  }
  const esc = pkg.contributes.keybindings.find((k) => k.key === "escape");
  assert.equal(esc.command, "dg.dismissNextEditCommand");
  assert.ok(esc.when.includes("dg.nextEditVisible"));
});
