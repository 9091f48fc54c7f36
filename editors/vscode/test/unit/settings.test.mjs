// dg.* configuration -> the server's initializationOptions / didChangeConfiguration, and the launch command.
import assert from "node:assert/strict";
import { createRequire } from "node:module";
import test from "node:test";

const { load } = createRequire(import.meta.url)("./helpers.cjs");
const s = load("settings");

const reader = (values) => (key) => values[key];

test("every protocol key is mapped, in camelCase, values passed through", () => {
  const values = {
    enabled: false,
    modelPath: "/models/dg",
    device: "cpu",
    dtype: "float32",
    steps: 16,
    entropyBound: 0.5,
    debounceMs: 120,
    languages: ["python", "rust"],
    contextTokens: 2048,
    drafts: true,
    promptFormat: "chat",
    weights: "int4",
    backend: "openai",
    endpoint: "http://gpu-box:8000/v1",
    apiKeyEnv: "DG_API_KEY",
    model: "google/diffusiongemma-26B-A4B-it",
    autoStart: false,
    "server.command": "dg-lsp",
    "server.pythonPath": "/venv/bin/python",
  };
  assert.deepEqual(s.toServerSettings(reader(values)), {
    enabled: false,
    modelPath: "/models/dg",
    device: "cpu",
    dtype: "float32",
    steps: 16,
    entropyBound: 0.5,
    debounceMs: 120,
    languages: ["python", "rust"],
    contextTokens: 2048,
    drafts: true,
    promptFormat: "chat",
    weights: "int4",
    backend: "openai",
    endpoint: "http://gpu-box:8000/v1",
    apiKeyEnv: "DG_API_KEY",
    model: "google/diffusiongemma-26B-A4B-it",
    autoStart: false,
  });
});

test("client-only keys (dg.server.*) never reach the server", () => {
  const out = s.toServerSettings(reader({ "server.command": "x", "server.args": ["--y"] }));
  assert.deepEqual(out, {});
});

test("the package.json defaults give the server its own defaults", async () => {
  const { readFile } = await import("node:fs/promises");
  const pkg = JSON.parse(await readFile(new URL("../../package.json", import.meta.url), "utf8"));
  const props = pkg.contributes.configuration.properties;
  const defaults = Object.fromEntries(Object.entries(props).map(([k, v]) => [k.replace(/^dg\./, ""), v.default]));
  assert.deepEqual(s.toServerSettings(reader(defaults)), {
    enabled: true,
    modelPath: null,
    device: "auto",
    dtype: "auto",
    steps: null,
    entropyBound: null,
    debounceMs: 75,
    languages: null,
    contextTokens: 1024,
    drafts: false,
    promptFormat: "auto",
    weights: "auto",
    backend: "embedded",
    endpoint: null,
    apiKeyEnv: null,
    model: null,
    autoStart: true,
    minConfidence: null,
    openaiDiffusion: "auto",
    rewriteFromSelection: false,
    rewriteNoise: 0.5,
    crossFileTokens: null,
    indexMaxFiles: 5000,
    indexMaxFileBytes: 262144,
    nextEdit: true,
    nextEditDebounceMs: 400,
    nextEditLinesAbove: 2,
    nextEditLinesBelow: 8,
    nextEditIndicatorOnly: false,
    nextEditNoise: 0.5,
  });
  // Every server key has a contributed setting, and every contributed dg.* setting is either a server key
  // or a client-side dg.server.* key.
  for (const key of s.SERVER_SETTING_KEYS) assert.ok(`dg.${key}` in props, `dg.${key} is contributed`);
  for (const key of Object.keys(props)) {
    const bare = key.replace(/^dg\./, "");
    assert.ok(s.SERVER_SETTING_KEYS.includes(bare) || bare.startsWith("server."), `${key} is known`);
  }
});

test("empty modelPath and languages mean null; unset keys are left out", () => {
  assert.deepEqual(s.toServerSettings(reader({ modelPath: "  ", languages: [] })), { modelPath: null, languages: null });
  assert.deepEqual(s.toServerSettings(reader({ steps: undefined })), {});
});

test("bad values are passed through so the server can name the key", () => {
  assert.deepEqual(s.toServerSettings(reader({ steps: "many", device: "tpu" })), { steps: "many", device: "tpu" });
});

test("didChangeConfiguration carries settings.dg", () => {
  assert.deepEqual(s.didChangeConfigurationParams({ steps: 8 }), { settings: { dg: { steps: 8 } } });
});

test("launch: dg.server.command by default, dg-lsp when empty", () => {
  assert.deepEqual(s.serverLaunch(reader({})), { command: "dg-lsp", args: [], setting: "dg.server.command" });
  assert.deepEqual(s.serverLaunch(reader({ "server.command": " " })).command, "dg-lsp");
  assert.deepEqual(s.serverLaunch(reader({ "server.command": "/opt/dg/bin/dg-lsp", "server.args": ["--x", 3] })), {
    command: "/opt/dg/bin/dg-lsp",
    args: ["--x"],
    setting: "dg.server.command",
  });
});

test("launch: dg.server.pythonPath wins and runs -m dg_lsp", () => {
  const launch = s.serverLaunch(reader({ "server.command": "dg-lsp", "server.pythonPath": "/repo/.venv/bin/python" }));
  assert.deepEqual(launch, { command: "/repo/.venv/bin/python", args: ["-m", "dg_lsp"], setting: "dg.server.pythonPath" });
});

test("launch: ${workspaceFolder}, ${userHome} and ~ are expanded", () => {
  const vars = { workspaceFolder: "/ws", home: "/home/u" };
  assert.equal(s.serverLaunch(reader({ "server.pythonPath": "${workspaceFolder}/.venv/bin/python" }), vars).command, "/ws/.venv/bin/python");
  assert.equal(s.serverLaunch(reader({ "server.command": "~/bin/dg-lsp" }), vars).command, "/home/u/bin/dg-lsp");
  assert.equal(s.expand("${userHome}/x", vars), "/home/u/x");
  assert.equal(s.expand("a~b", vars), "a~b");
});

test("findExecutable: PATH lookup, absolute and relative paths, missing", () => {
  const present = new Set(["/usr/bin/dg-lsp", "/abs/python", "/ws/venv/python"]);
  const isExe = (p) => present.has(p);
  assert.equal(s.findExecutable("dg-lsp", { PATH: "/bin:/usr/bin/" }, isExe), "/usr/bin/dg-lsp");
  assert.equal(s.findExecutable("dg-lsp", { PATH: "/bin" }, isExe), undefined);
  assert.equal(s.findExecutable("dg-lsp", {}, isExe), undefined);
  assert.equal(s.findExecutable("/abs/python", { PATH: "" }, isExe), "/abs/python");
  assert.equal(s.findExecutable("venv/python", { PATH: "/usr/bin" }, isExe, { cwd: "/ws" }), "/ws/venv/python");
});

test("findExecutable: Windows PATHEXT", () => {
  const isExe = (p) => p === "C:\\py/dg-lsp.EXE";
  assert.equal(s.findExecutable("dg-lsp", { PATH: "C:\\py", PATHEXT: ".EXE" }, isExe, { platform: "win32" }), "C:\\py/dg-lsp.EXE");
});

test("missing command message names the setting to fix", () => {
  assert.match(s.missingCommandMessage({ command: "dg-lsp", args: [], setting: "dg.server.command" }), /"dg-lsp" \(dg.server.command\) was not found/);
  assert.match(s.missingCommandMessage({ command: "/x/python", args: [], setting: "dg.server.pythonPath" }), /dg.server.pythonPath/);
});
