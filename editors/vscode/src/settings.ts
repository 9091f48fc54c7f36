/**
 * Maps the "dg" section of the VS Code configuration to what the server reads (docs/PROTOCOL.md, Settings)
 * and to the command line that starts it. Pure: takes a reader function, imports nothing from vscode.
 */

/** Reads one key relative to the "dg" section, e.g. read("modelPath") for dg.modelPath. */
export type ConfigReader = (key: string) => unknown;

/** The server's keys, in the order of the protocol table. */
export const SERVER_SETTING_KEYS = [
  "enabled",
  "modelPath",
  "device",
  "dtype",
  "steps",
  "entropyBound",
  "debounceMs",
  "languages",
  "contextTokens",
  "drafts",
  "promptFormat",
  "weights",
  "backend",
  "endpoint",
  "apiKeyEnv",
  "model",
  "autoStart",
  "minConfidence",
  "openaiDiffusion",
  "rewriteFromSelection",
  "rewriteNoise",
  "crossFileTokens",
  "indexMaxFiles",
  "indexMaxFileBytes",
  "nextEdit",
  "nextEditDebounceMs",
  "nextEditLinesAbove",
  "nextEditLinesBelow",
  "nextEditIndicatorOnly",
  "nextEditNoise",
] as const;

export type ServerSettingKey = (typeof SERVER_SETTING_KEYS)[number];

/** What the server receives as initializationOptions and in didChangeConfiguration's settings.dg. */
export type ServerSettings = Partial<Record<ServerSettingKey, unknown>>;

/** Keys whose empty value ("" or []) means "not set" on the server, i.e. null. */
const EMPTY_MEANS_NULL: ReadonlySet<ServerSettingKey> = new Set([
  "modelPath",
  "languages",
  "endpoint",
  "apiKeyEnv",
  "model",
]);

/**
 * The server's settings from the VS Code configuration. Values are passed through unchanged so that the
 * server, which owns validation, can name a bad key in its warning; only "unset" spellings are normalised:
 * undefined is left out (the server keeps its default), and "" / [] for modelPath and languages become null.
 */
export function toServerSettings(read: ConfigReader): ServerSettings {
  const out: ServerSettings = {};
  for (const key of SERVER_SETTING_KEYS) {
    let value = read(key);
    if (value === undefined) continue;
    if (EMPTY_MEANS_NULL.has(key) && isEmpty(value)) value = null;
    out[key] = value;
  }
  return out;
}

/** The body of workspace/didChangeConfiguration, in the shape PROTOCOL.md names first. */
export function didChangeConfigurationParams(settings: ServerSettings): { settings: { dg: ServerSettings } } {
  return { settings: { dg: settings } };
}

function isEmpty(value: unknown): boolean {
  if (typeof value === "string") return value.trim() === "";
  if (Array.isArray(value)) return value.length === 0;
  return false;
}

/** How to start the server: an executable and its arguments, and which setting chose it. */
export interface Launch {
  command: string;
  args: string[];
  /** The setting a user should fix when the command is missing. */
  setting: "dg.server.command" | "dg.server.pythonPath";
}

/** Values substituted in dg.server.command / dg.server.pythonPath. */
export interface LaunchVariables {
  workspaceFolder?: string;
  home?: string;
}

/**
 * dg.server.pythonPath, when set, wins and runs `<python> -m dg_lsp`; otherwise dg.server.command.
 * `${userHome}` and a leading `~` are expanded; so is `${workspaceFolder}` (older settings use it), though the
 * README asks for absolute paths: the server is rarely installed in the folder a user opens.
 */
export function serverLaunch(read: ConfigReader, vars: LaunchVariables = {}): Launch {
  const extra = stringArray(read("server.args"));
  const python = read("server.pythonPath");
  if (typeof python === "string" && python.trim() !== "") {
    return { command: expand(python.trim(), vars), args: ["-m", "dg_lsp", ...extra], setting: "dg.server.pythonPath" };
  }
  const command = read("server.command");
  const name = typeof command === "string" && command.trim() !== "" ? command.trim() : "dg-lsp";
  return { command: expand(name, vars), args: extra, setting: "dg.server.command" };
}

function stringArray(value: unknown): string[] {
  return Array.isArray(value) ? value.filter((v): v is string => typeof v === "string") : [];
}

export function expand(value: string, vars: LaunchVariables): string {
  let out = value;
  if (vars.home !== undefined) {
    out = out.replace(/\$\{userHome\}/g, vars.home);
    if (out === "~" || out.startsWith("~/")) out = vars.home + out.slice(1);
  }
  if (vars.workspaceFolder !== undefined) out = out.replace(/\$\{workspaceFolder\}/g, vars.workspaceFolder);
  return out;
}

/**
 * The absolute path `command` resolves to, or undefined when nothing runnable is there. A command with a
 * slash is a path (relative to cwd when relative); a bare name is looked up on PATH like a shell would.
 */
export function findExecutable(
  command: string,
  env: { PATH?: string; PATHEXT?: string },
  isExecutable: (path: string) => boolean,
  opts: { platform?: string; cwd?: string } = {},
): string | undefined {
  const windows = (opts.platform ?? "linux") === "win32";
  const sep = windows ? ";" : ":";
  const exts = windows ? ["", ...(env.PATHEXT ?? ".EXE;.CMD;.BAT").split(";")] : [""];
  const hasSlash = command.includes("/") || (windows && command.includes("\\"));
  const join = (dir: string, name: string) => (dir.endsWith("/") ? dir + name : `${dir}/${name}`);
  const candidates = hasSlash
    ? [command.startsWith("/") || /^[A-Za-z]:/.test(command) ? command : join(opts.cwd ?? ".", command)]
    : (env.PATH ?? "").split(sep).filter((d) => d !== "").map((d) => join(d, command));
  for (const base of candidates) {
    for (const ext of exts) {
      if (isExecutable(base + ext)) return base + ext;
    }
  }
  return undefined;
}

/** The error shown when the server's executable cannot be found. */
export function missingCommandMessage(launch: Launch): string {
  const what =
    launch.setting === "dg.server.pythonPath"
      ? `the Python interpreter "${launch.command}" (dg.server.pythonPath)`
      : `"${launch.command}" (dg.server.command)`;
  return `Dg: cannot start the language server: ${what} was not found. Install dg-lsp (python3 scripts/install.py in your dg-lsp clone) or pick one: Dg: Select Server….`;
}
