// Where "Dg: Select Server…" and a start with no server setting look for dg-lsp, per platform.
import assert from "node:assert/strict";
import { createRequire } from "node:module";
import test from "node:test";

const { load } = createRequire(import.meta.url)("./helpers.cjs");
const p = load("serverpick");

function probe({ platform = "linux", env = {}, home = "/home/u", folders = [], files = [], dirs = {} } = {}) {
  const present = new Set(files);
  return { platform, env, home, workspaceFolders: folders, isExecutable: (f) => present.has(f), listDir: (d) => dirs[d] ?? [] };
}

test("the installer's venv is where scripts/install.py puts it, on each platform", () => {
  assert.equal(p.installerVenv("linux", {}, "/home/u"), "/home/u/.local/share/dg-lsp/venv");
  assert.equal(p.installerVenv("linux", { XDG_DATA_HOME: "/data" }, "/home/u"), "/data/dg-lsp/venv");
  assert.equal(p.installerVenv("darwin", {}, "/Users/u"), "/Users/u/Library/Application Support/dg-lsp/venv");
  assert.equal(p.installerVenv("win32", { LOCALAPPDATA: "C:\\Users\\u\\AppData\\Local" }, "C:\\Users\\u"),
    "C:\\Users\\u\\AppData\\Local\\dg-lsp\\venv");
});

test("found: PATH first, then the installer's venv, pipx, the active venv, the workspace's, ~/.venvs; each once", () => {
  const files = [
    "/usr/local/bin/dg-lsp",
    "/home/u/.local/share/dg-lsp/venv/bin/dg-lsp",
    "/home/u/.local/pipx/venvs/dg-lsp/bin/dg-lsp",
    "/home/u/proj/.venv/bin/dg-lsp",
    "/home/u/.venvs/b/bin/dg-lsp",
    "/home/u/.venvs/a/bin/dg-lsp",
  ];
  const found = p.findServers(probe({
    env: { PATH: "/usr/bin:/usr/local/bin", VIRTUAL_ENV: "/home/u/proj/.venv" },
    folders: ["/home/u/proj"],
    files,
    dirs: { "/home/u/.venvs": ["b", "a", "c"] },
  }));
  assert.deepEqual(found.map((c) => [c.path, c.where]), [
    ["/usr/local/bin/dg-lsp", "on PATH"],
    ["/home/u/.local/share/dg-lsp/venv/bin/dg-lsp", "scripts/install.py's venv"],
    ["/home/u/.local/pipx/venvs/dg-lsp/bin/dg-lsp", "pipx"],
    ["/home/u/proj/.venv/bin/dg-lsp", "the active virtual environment"],
    ["/home/u/.venvs/a/bin/dg-lsp", "~/.venvs/a"],
    ["/home/u/.venvs/b/bin/dg-lsp", "~/.venvs/b"],
  ]);
  assert.ok(found.every((c) => c.kind === "executable"));
});

test("nothing installed: nothing found", () => {
  assert.deepEqual(p.findServers(probe({ env: { PATH: "/usr/bin" }, folders: ["/w"] })), []);
});

test("Windows: Scripts\\dg-lsp.exe in the installer's venv", () => {
  const exe = "C:\\L\\dg-lsp\\venv\\Scripts\\dg-lsp.exe";
  const found = p.findServers(probe({ platform: "win32", env: { LOCALAPPDATA: "C:\\L", PATH: "C:\\bin" }, home: "C:\\u", files: [exe] }));
  assert.deepEqual(found.map((c) => c.path), [exe]);
});

test("a file browsed to: an interpreter runs -m dg_lsp, anything else runs as the server", () => {
  assert.equal(p.candidateForFile("/v/bin/python3.12", "linux").kind, "python");
  assert.equal(p.candidateForFile("/v/bin/python", "linux").kind, "python");
  assert.equal(p.candidateForFile("C:\\v\\Scripts\\python.exe", "win32").kind, "python");
  assert.equal(p.candidateForFile("/v/bin/dg-lsp", "linux").kind, "executable");
  assert.equal(p.candidateForFile("/v/bin/python-config", "linux").kind, "executable");
});

test("the chosen key is written first, then the other cleared", () => {
  assert.deepEqual(p.settingsFor({ path: "/x/dg-lsp", kind: "executable", where: "" }),
    [["server.command", "/x/dg-lsp"], ["server.pythonPath", undefined]]);
  assert.deepEqual(p.settingsFor({ path: "/x/python", kind: "python", where: "" }),
    [["server.pythonPath", "/x/python"], ["server.command", undefined]]);
});
