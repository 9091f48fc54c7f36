// activate() against the stub vscode module and a fake language client: command ids, launch, settings
// flow, status bar, toggle middleware, missing-command error.
import assert from "node:assert/strict";
import { createRequire } from "node:module";
import test, { beforeEach } from "node:test";

const { load, vscode, lc } = createRequire(import.meta.url)("./helpers.cjs");
const ext = load("extension");
const S = vscode.__state;

const settle = () => new Promise((r) => setImmediate(r));

async function activate(config = {}, globalState = {}) {
  vscode.__reset();
  lc.__instances.length = 0;
  // The node binary stands in for a Python interpreter: it exists and is executable.
  Object.assign(S.config, { "dg.server.pythonPath": process.execPath }, config);
  const context = { subscriptions: [], globalState: vscode.__memento(globalState), extensionUri: { fsPath: "/ext" } };
  const api = await ext.activate(context);
  return { api, context, client: lc.__instances.at(-1), item: S.statusItems[0] };
}

beforeEach(async () => {
  await ext.deactivate();
});

test("palette commands do not collide with the server's executeCommand ids", async () => {
  await activate();
  const ids = [...S.commands.keys()];
  for (const id of ["dg.rewriteSelectionCommand", "dg.rewriteSelectionWithInstructionCommand", "dg.fillHoleCommand", "dg.toggle", "dg.showLog", "dg.restartServer"]) {
    assert.ok(ids.includes(id), id);
  }
  assert.ok(!ids.includes("dg.fillHole") && !ids.includes("dg.rewriteSelection"));
});

test("package.json contributes exactly the registered commands, with the context menu on a selection", async () => {
  await activate();
  const { readFile } = await import("node:fs/promises");
  const pkg = JSON.parse(await readFile(new URL("../../package.json", import.meta.url), "utf8"));
  const contributed = pkg.contributes.commands.map((c) => c.command).sort();
  assert.deepEqual(contributed, [...S.commands.keys()].sort());
  const titles = Object.fromEntries(pkg.contributes.commands.map((c) => [c.command, `${c.category}: ${c.title}`]));
  assert.equal(titles["dg.rewriteSelectionCommand"], "Dg: Rewrite Selection");
  assert.equal(titles["dg.rewriteSelectionWithInstructionCommand"], "Dg: Rewrite Selection…");
  assert.equal(titles["dg.fillHoleCommand"], "Dg: Fill Hole");
  assert.equal(titles["dg.toggle"], "Dg: Toggle");
  assert.deepEqual(pkg.contributes.menus["editor/context"][0].command, "dg.rewriteSelectionCommand");
  assert.equal(pkg.contributes.menus["editor/context"][0].when, "editorHasSelection");
  const context = pkg.contributes.menus["editor/context"].find((m) => m.command === "dg.rewriteSelectionWithInstructionCommand");
  assert.equal(context?.when, "editorHasSelection");
  const palette = pkg.contributes.menus.commandPalette.map((m) => m.command);
  assert.ok(palette.includes("dg.rewriteSelectionWithInstructionCommand"));
});

test("pythonPath launches `<python> -m dg_lsp` over stdio with the settings as initializationOptions", async () => {
  const { client } = await activate({ "dg.steps": 12, "dg.modelPath": "" });
  assert.equal(client.serverOptions.command, process.execPath);
  assert.deepEqual(client.serverOptions.args, ["-m", "dg_lsp"]);
  assert.equal(client.serverOptions.transport, undefined, "no --stdio flag appended");
  assert.deepEqual(client.initializationOptions, { steps: 12, modelPath: null });
  assert.deepEqual(client.clientOptions.documentSelector, [{ scheme: "file" }, { scheme: "untitled" }]);
});

test("a settings change sends didChangeConfiguration with settings.dg", async () => {
  const { client } = await activate();
  vscode.__setConfig({ "dg.debounceMs": 200 });
  await settle();
  assert.deepEqual(client.notifications, [
    { method: "workspace/didChangeConfiguration", params: { settings: { dg: { debounceMs: 200 } } } },
  ]);
  // The line the real-editor tests wait for before relying on a new setting.
  assert.ok(S.outputs[0].lines.includes('info: settings sent to the server: {"debounceMs":200}'), S.outputs[0].lines.join("\n"));
});

test("changing dg.server.* restarts the server with the new command", async () => {
  const { client } = await activate();
  vscode.__setConfig({ "dg.server.args": ["--log", "debug"] });
  await settle();
  await settle();
  assert.equal(lc.__instances.length, 2);
  assert.ok(client.disposed);
  assert.deepEqual(lc.__instances[1].serverOptions.args, ["-m", "dg_lsp", "--log", "debug"]);
  assert.equal(client.notifications.length, 0);
});

test("the status bar follows dg/status and opens the log on click", async () => {
  const { client, item } = await activate();
  assert.ok(item.visible);
  assert.equal(item.command, "dg.showLog");
  assert.match(item.text, /Dg: starting/);
  client.notify("dg/status", { state: "loading", message: "loading model", model: null, lastLatencyMs: null });
  assert.match(item.text, /Dg: loading/);
  client.notify("dg/status", { state: "ready", message: "", model: "m", lastLatencyMs: 90 });
  assert.match(item.text, /Dg: ready · 90 ms/);
  client.notify("dg/status", { state: "error", message: "bad", model: null, lastLatencyMs: null });
  assert.equal(item.backgroundColor.id, "statusBarItem.errorBackground");
  await vscode.commands.executeCommand("dg.showLog");
  assert.equal(S.outputs[0].shown, 1);
});

test("toggle gates the inline completion middleware, persists, and hides ghost text", async () => {
  const { client, item, context } = await activate();
  client.notify("dg/status", { state: "ready", message: "", model: null, lastLatencyMs: null });
  const provide = client.clientOptions.middleware.provideInlineCompletionItems;
  const doc = { languageId: "python", uri: { toString: () => "file:///w/a.py" }, version: 1 };
  const next = () => ["ITEM"];
  assert.deepEqual(await provide(doc, {}, {}, {}, next), ["ITEM"]);
  await vscode.commands.executeCommand("dg.toggle");
  assert.equal(await provide(doc, {}, {}, {}, next), undefined);
  assert.match(item.text, /Dg: off/);
  assert.equal(context.globalState.data["dg.inlineEnabled"], false);
  assert.ok(S.executed.some((e) => e.id === "editor.action.inlineSuggest.hide"));
  await vscode.commands.executeCommand("dg.toggle");
  assert.deepEqual(await provide(doc, {}, {}, {}, next), ["ITEM"]);
  assert.match(item.text, /Dg: ready/);
});

test("the toggle state survives a reload", async () => {
  const { client, item } = await activate({}, { "dg.inlineEnabled": false });
  client.notify("dg/status", { state: "ready", message: "", model: null, lastLatencyMs: null });
  assert.match(item.text, /Dg: off/);
  assert.equal(await client.clientOptions.middleware.provideInlineCompletionItems({ languageId: "c" }, {}, {}, {}, () => 1), undefined);
});

test("dg.languages limits which documents ask for inline completions", async () => {
  const { client } = await activate({ "dg.languages": ["rust"] });
  const provide = client.clientOptions.middleware.provideInlineCompletionItems;
  const doc = (languageId) => ({ languageId, uri: { toString: () => "file:///w/a" }, version: 1 });
  assert.equal(await provide(doc("python"), {}, {}, {}, () => 1), undefined);
  assert.equal(await provide(doc("rust"), {}, {}, {}, () => 1), 1);
});

test("Dg: Rewrite Selection sends workspace/executeCommand dg.rewriteSelection for the selection", async () => {
  const { client } = await activate();
  S.activeTextEditor = {
    document: { uri: { toString: () => "file:///w/a.py" } },
    selection: { start: { line: 1, character: 4 }, end: { line: 2, character: 0 }, active: { line: 2, character: 0 } },
  };
  const result = await vscode.commands.executeCommand("dg.rewriteSelectionCommand");
  assert.deepEqual(result, { applied: true, reason: null, latencyMs: 12 });
  assert.equal(client.requests.length, 1);
  assert.equal(client.requests[0].method, "workspace/executeCommand");
  assert.deepEqual(client.requests[0].params, {
    command: "dg.rewriteSelection",
    arguments: [
      {
        textDocument: { uri: "file:///w/a.py" },
        range: { start: { line: 1, character: 4 }, end: { line: 2, character: 0 } },
        widen: false,
      },
    ],
  });
  await vscode.commands.executeCommand("dg.fillHoleCommand");
  assert.deepEqual(client.requests[1].params.arguments[0].position, { line: 2, character: 0 });
});

test("Dg: Rewrite Selection… asks in an input box and sends the instruction; Escape sends nothing", async () => {
  const { client } = await activate();
  S.activeTextEditor = {
    document: { uri: { toString: () => "file:///w/a.py" } },
    selection: { start: { line: 3, character: 0 }, end: { line: 1, character: 2 }, active: { line: 1, character: 2 } },
  };
  S.inputBoxAnswer = "make it async";
  await vscode.commands.executeCommand("dg.rewriteSelectionWithInstructionCommand");
  assert.equal(S.inputBoxes.length, 1);
  assert.equal(S.inputBoxes[0].ignoreFocusOut, true);
  assert.match(S.inputBoxes[0].prompt, /empty for a plain re-fill/);
  assert.deepEqual(client.requests.map((q) => q.params), [
    {
      command: "dg.rewriteSelection",
      arguments: [
        {
          textDocument: { uri: "file:///w/a.py" },
          range: { start: { line: 1, character: 2 }, end: { line: 3, character: 0 } },
          widen: false,
          instruction: "make it async",
        },
      ],
    },
  ]);
  S.inputBoxAnswer = undefined; // Escape
  await vscode.commands.executeCommand("dg.rewriteSelectionWithInstructionCommand");
  assert.equal(S.inputBoxes.length, 2);
  assert.equal(client.requests.length, 1);
  assert.deepEqual(S.messages, []);
});

test("the fim refusal of an instruction reaches the user as a notification", async () => {
  const { client } = await activate();
  S.activeTextEditor = {
    document: { uri: { toString: () => "file:///w/a.py" } },
    selection: { start: { line: 0, character: 0 }, end: { line: 0, character: 3 }, active: { line: 0, character: 3 } },
  };
  const reason = "this model's prompt format (fim) cannot take an instruction; use a chat-format checkpoint";
  client.answer = async () => ({ applied: false, reason, latencyMs: 1 });
  S.inputBoxAnswer = "make it async";
  await vscode.commands.executeCommand("dg.rewriteSelectionWithInstructionCommand");
  assert.deepEqual(S.messages.map((m) => [m.level, m.text]), [["info", `Dg: rewrite not applied: ${reason}`]]);
});

test("a fill the confidence gate withheld offers Apply anyway, which resends it with force", async () => {
  const { client } = await activate();
  S.activeTextEditor = {
    document: { uri: { toString: () => "file:///w/a.py" } },
    selection: { start: { line: 2, character: 4 }, end: { line: 2, character: 4 }, active: { line: 2, character: 4 } },
  };
  client.answer = async (params) =>
    params.arguments[0].force
      ? { applied: true, reason: null, latencyMs: 3 }
      : { applied: false, reason: "low confidence", confidence: 0.7712, minConfidence: 0.9, latencyMs: 2 };
  S.messageChoice = "Apply anyway";
  const result = await vscode.commands.executeCommand("dg.fillHoleCommand");
  assert.deepEqual(S.messages.map((m) => [m.level, m.text, m.items]), [
    ["info", "Dg: fill withheld: confidence 0.77 is below minConfidence 0.90", ["Apply anyway"]],
  ]);
  assert.equal(client.requests.length, 2);
  assert.equal(client.requests[0].params.arguments[0].force, undefined);
  assert.deepEqual(client.requests[1].params.arguments[0], {
    textDocument: { uri: "file:///w/a.py" }, position: { line: 2, character: 4 }, force: true,
  });
  assert.deepEqual(result, { applied: true, reason: null, latencyMs: 3 });
});

test("Apply anyway is pinned to the document version and open the withheld fill was computed for", async () => {
  const { client } = await activate();
  S.activeTextEditor = {
    document: { uri: { toString: () => "file:///w/a.py" } },
    selection: { start: { line: 1, character: 0 }, end: { line: 1, character: 0 }, active: { line: 1, character: 0 } },
  };
  client.answer = async (params) =>
    params.arguments[0].force
      ? { applied: false, reason: "document changed", latencyMs: 1 }
      : { applied: false, reason: "low confidence", confidence: 0.4, minConfidence: 0.9, version: 7, documentOpen: 3 };
  S.messageChoice = "Apply anyway";
  await vscode.commands.executeCommand("dg.fillHoleCommand");
  assert.deepEqual(client.requests[1].params.arguments[0], {
    textDocument: { uri: "file:///w/a.py", version: 7 }, position: { line: 1, character: 0 }, force: true,
    documentOpen: 3,
  });
});

test("a withheld fill left alone sends nothing more", async () => {
  const { client } = await activate();
  S.activeTextEditor = {
    document: { uri: { toString: () => "file:///w/a.py" } },
    selection: { start: { line: 2, character: 4 }, end: { line: 2, character: 4 }, active: { line: 2, character: 4 } },
  };
  client.answer = async () => ({ applied: false, reason: "low confidence", confidence: 0.5, minConfidence: 0.9 });
  S.messageChoice = undefined; // the notification was dismissed
  const result = await vscode.commands.executeCommand("dg.fillHoleCommand");
  assert.equal(client.requests.length, 1);
  assert.equal(result.applied, false);
});

test("a cancelled rewrite shows nothing", async () => {
  const { client } = await activate();
  S.activeTextEditor = {
    document: { uri: { toString: () => "file:///w/a.py" } },
    selection: { start: { line: 0, character: 0 }, end: { line: 0, character: 3 }, active: { line: 0, character: 3 } },
  };
  client.answer = async () => {
    throw new lc.ResponseError(lc.LSPErrorCodes.RequestCancelled, "cancelled");
  };
  await vscode.commands.executeCommand("dg.rewriteSelectionCommand");
  assert.deepEqual(S.messages, []);
});

test("a missing server command shows an error with 'Set the path' that opens the setting", async () => {
  vscode.__reset();
  lc.__instances.length = 0;
  Object.assign(S.config, { "dg.server.command": "dg-lsp-that-does-not-exist" });
  S.messageChoice = "Set the path";
  await ext.activate({ subscriptions: [], globalState: vscode.__memento(), extensionUri: { fsPath: "/ext" } });
  await settle();
  assert.equal(lc.__instances.length, 0, "no client is started");
  const [msg] = S.messages;
  assert.equal(msg.level, "error");
  assert.match(msg.text, /"dg-lsp-that-does-not-exist" \(dg.server.command\) was not found/);
  assert.deepEqual(msg.items, ["Select Server…", "Set the path", "Show Log"]);
  assert.match(msg.text, /python3 scripts\/install.py in your dg-lsp clone/);
  assert.deepEqual(S.executed.at(-1), { id: "workbench.action.openSettings", args: ["dg.server.command"] });
  assert.match(S.statusItems[0].text, /Dg: error/);
});

test("a server that fails to start leaves an error state and a message", async () => {
  vscode.__reset();
  lc.__instances.length = 0;
  Object.assign(S.config, { "dg.server.pythonPath": process.execPath });
  lc.LanguageClient.nextStartError = new Error("exited with code 1");
  await ext.activate({ subscriptions: [], globalState: vscode.__memento(), extensionUri: { fsPath: "/ext" } });
  assert.match(S.statusItems[0].text, /Dg: error/);
  assert.match(S.messages[0].text, /failed to start: exited with code 1/);
});

test("code actions' server commands go through middleware that reports 'not applied'", async () => {
  const { client } = await activate();
  const mw = client.clientOptions.middleware.executeCommand;
  const raw = await mw("dg.fillHole", [{}], async () => ({ applied: false, reason: "document changed", latencyMs: 1 }));
  assert.equal(raw.applied, false);
  assert.deepEqual(S.messages.map((m) => m.text), ["Dg: fill not applied: document changed"]);
});

// --- finding the server: no setting, "Dg: Select Server…" ------------------------------------------------------

/** A fake home with an executable dg-lsp at each of `rel` (relative to it); PATH holds none. */
async function fakeHome(t, ...rel) {
  const { mkdtemp, mkdir, writeFile } = await import("node:fs/promises");
  const { tmpdir } = await import("node:os");
  const { join, dirname } = await import("node:path");
  const home = await mkdtemp(join(tmpdir(), "dg-home-"));
  const saved = { HOME: process.env.HOME, PATH: process.env.PATH, XDG_DATA_HOME: process.env.XDG_DATA_HOME,
    VIRTUAL_ENV: process.env.VIRTUAL_ENV, CONDA_PREFIX: process.env.CONDA_PREFIX, PIPX_HOME: process.env.PIPX_HOME };
  t.after(() => {
    for (const [k, v] of Object.entries(saved)) (v === undefined ? delete process.env[k] : (process.env[k] = v));
  });
  Object.assign(process.env, { HOME: home, PATH: join(home, "empty-bin") });
  for (const k of ["XDG_DATA_HOME", "VIRTUAL_ENV", "CONDA_PREFIX", "PIPX_HOME"]) delete process.env[k];
  const paths = [];
  for (const r of rel) {
    const path = join(home, r);
    await mkdir(dirname(path), { recursive: true });
    await writeFile(path, "#!/bin/sh\n", { mode: 0o755 });
    paths.push(path);
  }
  return { home, paths };
}

async function activateBare(config = {}) {
  vscode.__reset();
  lc.__instances.length = 0;
  Object.assign(S.config, config);
  await ext.activate({ subscriptions: [], globalState: vscode.__memento(), extensionUri: { fsPath: "/ext" } });
  await settle();
}

test("no server setting and no dg-lsp on PATH: the one scripts/install.py made is started", async (t) => {
  const { paths: [installed] } = await fakeHome(t, ".local/share/dg-lsp/venv/bin/dg-lsp");
  await activateBare({ "dg.server.args": ["--log-level", "debug"] });
  const client = lc.__instances.at(-1);
  assert.equal(client?.serverOptions.command, installed);
  assert.deepEqual(client.serverOptions.args, ["--log-level", "debug"]);
  assert.ok(S.outputs[0].lines.some((l) => l.includes(`dg-lsp is not on PATH; using ${installed}`)), S.outputs[0].lines);
  assert.deepEqual(S.messages, []);
});

test("a dg-lsp in the opened folder's venv is offered, never started on its own", async (t) => {
  const { home, paths: [inFolder] } = await fakeHome(t, "proj/.venv/bin/dg-lsp");
  vscode.__reset();
  lc.__instances.length = 0;
  S.workspaceFolders = [{ uri: { fsPath: `${home}/proj` } }];
  await ext.activate({ subscriptions: [], globalState: vscode.__memento(), extensionUri: { fsPath: "/ext" } });
  await settle();
  assert.equal(lc.__instances.length, 0, "nothing started");
  assert.match(S.messages[0].text, /"dg-lsp" \(dg.server.command\) was not found/);
  S.quickPickAnswer = (items) => items[0];
  await vscode.commands.executeCommand("dg.selectServer");
  assert.deepEqual(S.quickPicks[0].items.map((i) => [i.label, i.description]).slice(0, 1), [[inFolder, "the workspace's .venv"]]);
  assert.equal(lc.__instances.at(-1)?.serverOptions.command, inFolder);
});

test("Dg: Select Server… lists what it found and Browse…; the pick goes to the user settings and restarts", async (t) => {
  const { paths: [installed, pipx] } = await fakeHome(t, ".local/share/dg-lsp/venv/bin/dg-lsp", ".local/pipx/venvs/dg-lsp/bin/dg-lsp");
  await activateBare({ "dg.server.pythonPath": process.execPath });
  assert.equal(lc.__instances.at(-1).serverOptions.command, process.execPath);
  S.quickPickAnswer = (items) => items.find((i) => i.label === pipx);
  const choice = await vscode.commands.executeCommand("dg.selectServer");
  const [pick] = S.quickPicks;
  assert.deepEqual(pick.items.map((i) => i.label), [installed, pipx, "Browse…"]);
  assert.deepEqual(pick.items.map((i) => i.description).slice(0, 2), ["scripts/install.py's venv", "pipx"]);
  assert.equal(choice.path, pipx);
  assert.deepEqual(S.configUpdates, [
    { key: "dg.server.command", value: pipx, target: vscode.ConfigurationTarget.Global },
    { key: "dg.server.pythonPath", value: undefined, target: vscode.ConfigurationTarget.Global },
  ]);
  await settle();
  const client = lc.__instances.at(-1);
  assert.equal(client.serverOptions.command, pipx);
  assert.deepEqual(client.serverOptions.args, []);
});

test("Browse… to a Python interpreter sets dg.server.pythonPath: `<python> -m dg_lsp`", async (t) => {
  await fakeHome(t);
  await activateBare({ "dg.server.command": "/opt/dg/nothing-here" });
  S.quickPickAnswer = (items) => items.at(-1);
  S.openDialogAnswer = [{ fsPath: process.execPath.replace(/node$/, "python3") }];
  const choice = await vscode.commands.executeCommand("dg.selectServer");
  assert.equal(S.quickPicks[0].items.length, 1, "only Browse… when nothing is installed");
  assert.match(S.quickPicks[0].options.placeHolder, /python3 scripts\/install.py/);
  assert.equal(choice.kind, "python");
  assert.equal(S.config["dg.server.pythonPath"], choice.path);
  assert.equal("dg.server.command" in S.config, false);
});

test("Escape in the picker changes nothing", async (t) => {
  await fakeHome(t, ".local/share/dg-lsp/venv/bin/dg-lsp");
  await activateBare({ "dg.server.pythonPath": process.execPath });
  S.quickPickAnswer = () => undefined;
  assert.equal(await vscode.commands.executeCommand("dg.selectServer"), undefined);
  assert.deepEqual(S.configUpdates, []);
});

test("a workspace value that shadows the user setting is named", async (t) => {
  const { paths: [installed] } = await fakeHome(t, ".local/share/dg-lsp/venv/bin/dg-lsp");
  await activateBare({ "dg.server.pythonPath": process.execPath });
  S.workspaceConfig["dg.server.pythonPath"] = "/ws/python";
  S.quickPickAnswer = (items) => items[0];
  assert.equal((await vscode.commands.executeCommand("dg.selectServer")).path, installed);
  assert.match(S.messages.at(-1).text, /this workspace sets dg.server.pythonPath/);
});

test("no setting suggests ${workspaceFolder}: the server is rarely installed in the folder a user opens", async () => {
  const { readFile } = await import("node:fs/promises");
  for (const file of ["../../package.json", "../../README.md"]) {
    const text = await readFile(new URL(file, import.meta.url), "utf8");
    assert.ok(!text.includes("${workspaceFolder}"), file);
  }
});
