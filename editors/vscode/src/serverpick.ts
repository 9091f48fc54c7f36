/**
 * Where a dg-lsp server is on this machine, for "Dg: Select Server…" and for a start with no server setting:
 * PATH, the virtual environment scripts/install.py makes, pipx's, the active virtual environment (VIRTUAL_ENV,
 * CONDA_PREFIX), the workspace's own venvs and ~/.venvs / ~/.virtualenvs. Pure: the file system comes in as
 * functions, so the tests give each platform its own.
 */
import * as nodePath from "node:path";

/** A dg-lsp found on disk, or an interpreter/executable the user browsed to. */
export interface ServerCandidate {
  path: string;
  /** "executable": run it as is (dg.server.command); "python": run `<python> -m dg_lsp` (dg.server.pythonPath). */
  kind: "executable" | "python";
  /** Where it was found, for the picker's description ("on PATH", "scripts/install.py's venv", ...). */
  where: string;
}

export interface Probe {
  platform: string;
  env: Record<string, string | undefined>;
  home: string;
  workspaceFolders: readonly string[];
  isExecutable: (path: string) => boolean;
  /** The names in a folder; [] when it is missing or unreadable. */
  listDir: (path: string) => string[];
}

/** The folder scripts/install.py makes its venv in by default (its default_venv(): keep the two in step). */
export function installerVenv(platform: string, env: Record<string, string | undefined>, home: string): string {
  const p = pathFor(platform);
  if (platform === "win32") return p.join(env.LOCALAPPDATA || p.join(home, "AppData", "Local"), "dg-lsp", "venv");
  if (platform === "darwin") return p.join(home, "Library", "Application Support", "dg-lsp", "venv");
  return p.join(env.XDG_DATA_HOME || p.join(home, ".local", "share"), "dg-lsp", "venv");
}

/** Every dg-lsp executable the probe finds, PATH's first (what a plain "dg-lsp" runs), without duplicates. */
export function findServers(probe: Probe): ServerCandidate[] {
  const p = pathFor(probe.platform);
  const exe = probe.platform === "win32" ? "dg-lsp.exe" : "dg-lsp";
  const bin = probe.platform === "win32" ? "Scripts" : "bin";
  const found: ServerCandidate[] = [];
  const seen = new Set<string>();
  const add = (path: string, where: string) => {
    if (seen.has(path) || !probe.isExecutable(path)) return;
    seen.add(path);
    found.push({ path, kind: "executable", where });
  };
  const sep = probe.platform === "win32" ? ";" : ":";
  for (const dir of (probe.env.PATH ?? "").split(sep).filter((d) => d !== "")) add(p.join(dir, exe), "on PATH");
  add(p.join(installerVenv(probe.platform, probe.env, probe.home), bin, exe), "scripts/install.py's venv");
  const pipxHome = probe.env.PIPX_HOME || p.join(probe.home, ".local", "pipx");
  add(p.join(pipxHome, "venvs", "dg-lsp", bin, exe), "pipx");
  if (probe.env.VIRTUAL_ENV) add(p.join(probe.env.VIRTUAL_ENV, bin, exe), "the active virtual environment");
  if (probe.env.CONDA_PREFIX) add(p.join(probe.env.CONDA_PREFIX, bin, exe), "the active conda environment");
  for (const folder of probe.workspaceFolders) {
    for (const venv of [".venv", "venv", "env"]) add(p.join(folder, venv, bin, exe), `the workspace's ${venv}`);
  }
  for (const parent of [".venvs", ".virtualenvs"]) {
    const dir = p.join(probe.home, parent);
    for (const name of probe.listDir(dir).sort()) add(p.join(dir, name, bin, exe), `~/${parent}/${name}`);
  }
  return found;
}

/** A file the user browsed to: a Python interpreter runs `-m dg_lsp`, anything else runs as the server. */
export function candidateForFile(path: string, platform: string): ServerCandidate {
  const name = pathFor(platform).basename(path).toLowerCase();
  const python = /^python(\d+(\.\d+)*)?(\.exe)?$/.test(name);
  return { path, kind: python ? "python" : "executable", where: "chosen by hand" };
}

/**
 * The user settings that make the server start from `choice`, in the order to write them: the chosen key first,
 * then the other cleared (dg.server.pythonPath wins over dg.server.command, so this order restarts the server
 * once, on the new launch, never on a half-written one).
 */
export function settingsFor(choice: ServerCandidate): [key: string, value: string | undefined][] {
  return choice.kind === "python"
    ? [["server.pythonPath", choice.path], ["server.command", undefined]]
    : [["server.command", choice.path], ["server.pythonPath", undefined]];
}

function pathFor(platform: string): typeof nodePath.posix {
  return platform === "win32" ? nodePath.win32 : nodePath.posix;
}
