/**
 * VS Code entry point: starts dg-lsp over stdio with vscode-languageclient, wires the status bar, the
 * toggle and the palette commands. The decisions live in the pure modules next to this file.
 */
import * as fs from "node:fs";
import * as os from "node:os";
import * as vscode from "vscode";
import {
  DidChangeConfigurationNotification,
  ExecuteCommandRequest,
  LSPErrorCodes,
  LanguageClient,
  LanguageClientOptions,
  ResponseError,
  RevealOutputChannelOn,
  ServerOptions,
  State,
} from "vscode-languageclient/node";
import {
  CommandDeps,
  EditorSnapshot,
  INSTRUCTION_INPUT,
  fillHole,
  reportServerCommand,
  rewriteSelection,
  rewriteSelectionWithInstruction,
} from "./commands";
import { InlineGate } from "./gate";
import { TRIGGER } from "./nextedit";
import { NextEditUi } from "./nexteditui";
import {
  Launch,
  didChangeConfigurationParams,
  findExecutable,
  missingCommandMessage,
  serverLaunch,
  toServerSettings,
} from "./settings";
import { Probe, ServerCandidate, candidateForFile, findServers, settingsFor } from "./serverpick";
import { StatusModel, StatusView } from "./status";

/** Palette command ids; distinct from the server's dg.fillHole / dg.rewriteSelection (see requests.ts). */
export const COMMANDS = {
  rewriteSelection: "dg.rewriteSelectionCommand",
  rewriteWithInstruction: "dg.rewriteSelectionWithInstructionCommand",
  fillHole: "dg.fillHoleCommand",
  toggle: "dg.toggle",
  showLog: "dg.showLog",
  restart: "dg.restartServer",
  acceptNextEdit: "dg.acceptNextEditCommand",
  dismissNextEdit: "dg.dismissNextEditCommand",
  suggestNextEdit: "dg.suggestNextEditCommand",
  selectServer: "dg.selectServer",
} as const;

const SELECT_SERVER = "Select Server…";

const INLINE_ENABLED_KEY = "dg.inlineEnabled";

export class DgExtension implements vscode.Disposable {
  readonly output: vscode.LogOutputChannel;
  readonly status: StatusModel;
  readonly gate: InlineGate;
  readonly nextEdit: NextEditUi;
  private readonly item: vscode.StatusBarItem;
  private client: LanguageClient | undefined;
  private launchKey = "";
  private readonly disposables: vscode.Disposable[] = [];

  constructor(private readonly context: vscode.ExtensionContext) {
    this.output = vscode.window.createOutputChannel("Dg", { log: true });
    this.item = vscode.window.createStatusBarItem("dg.status", vscode.StatusBarAlignment.Right, 100);
    this.item.name = "Dg";
    this.item.command = COMMANDS.showLog;
    this.status = new StatusModel((view) => this.render(view));
    const enabled = context.globalState.get<boolean>(INLINE_ENABLED_KEY, true);
    this.gate = new InlineGate(enabled, (on) => {
      this.status.setInlineEnabled(on);
      void context.globalState.update(INLINE_ENABLED_KEY, on);
    });
    this.status.setInlineEnabled(enabled);
    this.gate.setLanguages(config().get("languages"));
    this.item.show();
    this.nextEdit = new NextEditUi(
      {
        ready: () => this.client?.isRunning() === true && serverAnswersNextEdits(this.client),
        allowed: (languageId) => this.gate.shouldRequest(languageId),
        sendRequest: (method, params, token) => this.runningClient().sendRequest(method, params, token),
        sendNotification: (method, params) => void this.client?.sendNotification(method, params),
        executeCommand: (command) =>
          this.runningClient().sendRequest(ExecuteCommandRequest.type, { command: command.command, arguments: command.arguments }),
        log: (message) => this.output.info(message),
      },
      vscode.Uri.joinPath(context.extensionUri, "media", "next-edit.svg"),
    );
    this.disposables.push(this.output, this.item, this.nextEdit);
  }

  registerCommands(): void {
    const reg = (id: string, fn: (...args: any[]) => unknown) =>
      this.disposables.push(vscode.commands.registerCommand(id, fn));
    reg(COMMANDS.rewriteSelection, (arg?: { widen?: boolean }) =>
      rewriteSelection(this.commandDeps(), this.editorSnapshot(), arg?.widen === true),
    );
    reg(COMMANDS.rewriteWithInstruction, (arg?: { widen?: boolean }) =>
      rewriteSelectionWithInstruction(this.commandDeps(), this.editorSnapshot(), arg?.widen === true),
    );
    reg(COMMANDS.fillHole, () => fillHole(this.commandDeps(), this.editorSnapshot()));
    reg(COMMANDS.toggle, () => this.toggle());
    reg(COMMANDS.showLog, () => this.output.show(true));
    reg(COMMANDS.restart, () => this.restart());
    reg(COMMANDS.selectServer, () => this.selectServer());
    reg(COMMANDS.acceptNextEdit, () => this.nextEdit.policy.accept());
    reg(COMMANDS.dismissNextEdit, () => this.nextEdit.policy.dismiss("Escape"));
    reg(COMMANDS.suggestNextEdit, async () => {
      const proposal = await this.nextEdit.policy.ask(TRIGGER.invoked);
      if (!proposal) vscode.window.setStatusBarMessage("Dg: no next edit here", 3000);
      return proposal;
    });
    this.disposables.push(vscode.workspace.onDidChangeConfiguration((e) => this.onConfigurationChanged(e)));
  }

  toggle(): boolean {
    const on = this.gate.toggle();
    // Turning off should also take away ghost text and a next edit that are already on screen.
    if (!on) {
      void vscode.commands.executeCommand("editor.action.inlineSuggest.hide");
      this.nextEdit.policy.dismiss("Dg: Toggle");
    }
    return on;
  }

  async start(): Promise<void> {
    const launch = currentLaunch();
    this.launchKey = JSON.stringify(launch);
    this.status.clientStarting();
    let resolved = resolveLaunch(launch);
    if (!resolved && isDefaultLaunch(launch)) {
      // No server setting and no dg-lsp on PATH: one in a per-user place (never the workspace's: an untrusted
      // folder must not choose what runs) is what the user installed.
      const found = findServers(probe([]))[0];
      if (found) {
        resolved = found.path;
        this.output.info(`dg-lsp is not on PATH; using ${found.path} (${found.where}). ${SELECT_SERVER} picks another.`);
      }
    }
    if (!resolved) {
      const message = missingCommandMessage(launch);
      this.output.error(message);
      this.status.clientFailed(message);
      void vscode.window.showErrorMessage(message, SELECT_SERVER, "Set the path", "Show Log").then((choice) => {
        if (choice === SELECT_SERVER) void this.selectServer();
        if (choice === "Set the path") void vscode.commands.executeCommand("workbench.action.openSettings", launch.setting);
        if (choice === "Show Log") this.output.show(true);
      });
      return;
    }
    this.output.info(`starting ${[resolved, ...launch.args].join(" ")}`);
    const client = this.createClient({ ...launch, command: resolved });
    this.client = client;
    try {
      await client.start();
    } catch (err) {
      if (this.client !== client) return;
      const message = `Dg: the language server failed to start: ${err instanceof Error ? err.message : String(err)}`;
      this.output.error(message);
      this.status.clientFailed(message);
      void vscode.window.showErrorMessage(message, SELECT_SERVER, "Show Log").then((choice) => {
        if (choice === SELECT_SERVER) void this.selectServer();
        if (choice === "Show Log") this.output.show(true);
      });
    }
  }

  /**
   * "Dg: Select Server…": a quick pick of the dg-lsp executables found (PATH, the installer's venv, pipx, the
   * active and the workspace's venvs) and Browse… for any file (a Python interpreter runs `-m dg_lsp`). The choice
   * goes to the user settings; the configuration change restarts the server on it.
   */
  async selectServer(): Promise<ServerCandidate | undefined> {
    const folders = (vscode.workspace.workspaceFolders ?? []).map((f) => f.uri.fsPath);
    const found = findServers(probe(folders));
    type Item = vscode.QuickPickItem & { candidate?: ServerCandidate };
    const items: Item[] = found.map((c) => ({ label: c.path, description: c.where, candidate: c }));
    items.push({ label: "Browse…", description: "a dg-lsp executable, or a Python interpreter that has dg_lsp" });
    const pick = await vscode.window.showQuickPick(items, {
      title: "Dg: the language server to run",
      placeHolder: found.length
        ? "a dg-lsp found on this machine"
        : "no dg-lsp found (install: python3 scripts/install.py in your dg-lsp clone); Browse… to pick one",
      ignoreFocusOut: true,
    });
    if (!pick) return undefined;
    let choice = pick.candidate;
    if (!choice) {
      const uris = await vscode.window.showOpenDialog({ canSelectFiles: true, canSelectFolders: false, canSelectMany: false, title: "Dg: the language server to run" });
      if (!uris?.length) return undefined;
      choice = candidateForFile(uris[0].fsPath, process.platform);
    }
    const cfg = config();
    for (const [key, value] of settingsFor(choice)) await cfg.update(key, value, vscode.ConfigurationTarget.Global);
    const setting = choice.kind === "python" ? "dg.server.pythonPath" : "dg.server.command";
    this.output.info(`server: ${choice.path} (${setting}, in the user settings)`);
    const shadowed = ["server.command", "server.pythonPath"].filter((k) => {
      const seen = cfg.inspect(k);
      return seen?.workspaceValue !== undefined || seen?.workspaceFolderValue !== undefined;
    });
    if (shadowed.length) {
      void vscode.window.showWarningMessage(
        `Dg: this workspace sets ${shadowed.map((k) => `dg.${k}`).join(" and ")}, which wins over the user setting just written.`,
      );
    }
    return choice;
  }

  async restart(): Promise<void> {
    await this.stop();
    await this.start();
  }

  async stop(): Promise<void> {
    this.nextEdit.policy.dispose();
    const client = this.client;
    this.client = undefined;
    if (!client) return;
    try {
      if (client.isRunning()) await client.stop(2000);
    } catch (err) {
      this.output.warn(`stopping the server: ${String(err)}`);
    } finally {
      void client.dispose();
    }
  }

  dispose(): void {
    for (const d of this.disposables.splice(0)) d.dispose();
  }

  private createClient(launch: Launch): LanguageClient {
    const folder = vscode.workspace.workspaceFolders?.[0]?.uri.fsPath;
    // No `transport` on purpose: with TransportKind.stdio the client would append "--stdio", and dg-lsp
    // speaks stdio when it gets no arguments.
    const serverOptions: ServerOptions = { command: launch.command, args: launch.args, options: { cwd: folder } };
    const clientOptions: LanguageClientOptions = {
      documentSelector: [{ scheme: "file" }, { scheme: "untitled" }],
      initializationOptions: () => toServerSettings(readDg),
      outputChannel: this.output,
      revealOutputChannelOn: RevealOutputChannelOn.Never,
      initializationFailedHandler: (error) => {
        this.status.clientFailed(`Dg: initialization failed: ${error instanceof Error ? error.message : String(error)}`);
        return false;
      },
      middleware: {
        provideInlineCompletionItems: async (document, position, context, token, next) => {
          if (!this.gate.shouldRequest(document.languageId)) return undefined;
          // The next-edit policy waits for this answer: no next edit while ghost text is shown.
          const uri = document.uri.toString();
          this.nextEdit.policy.inlineRequested(uri, document.version);
          let answer: Awaited<ReturnType<typeof next>> | undefined;
          try {
            answer = await next(document, position, context, token);
            return answer;
          } finally {
            this.nextEdit.policy.inlineAnswered(uri, document.version, hasInlineItems(answer));
          }
        },
        // The server's commands run from its code actions: report "not applied" like the palette commands.
        executeCommand: async (command, args, next) =>
          reportServerCommand(command, await next(command, args), (m) => void vscode.window.showInformationMessage(m)),
      },
    };
    const client = new LanguageClient("dg", "Dg", serverOptions, clientOptions);
    client.onDidChangeState((e) => {
      if (this.client !== client) return;
      if (e.newState === State.Running) this.status.clientRunning();
      else if (e.newState === State.Starting) this.status.clientStarting();
      else if (e.newState === State.Stopped) this.status.clientStopped();
    });
    client.onNotification("dg/status", (params: unknown) => {
      if (this.client === client) this.status.serverStatus(params);
    });
    client.onNotification("dg/draft", (params: unknown) => {
      if (this.client === client) this.status.serverDraft(params);
    });
    return client;
  }

  private onConfigurationChanged(e: vscode.ConfigurationChangeEvent): void {
    if (!e.affectsConfiguration("dg")) return;
    this.gate.setLanguages(config().get("languages"));
    if (e.affectsConfiguration("dg.server") && JSON.stringify(currentLaunch()) !== this.launchKey) {
      void this.restart();
      return;
    }
    const client = this.client;
    if (client?.isRunning()) {
      const settings = toServerSettings(readDg);
      // Logged once written to the server's stdin: the server applies a settings change when it reads it, in
      // order with the requests around it, so every request sent after this line sees these settings (the
      // real-editor tests wait for this line instead of a clock).
      void client
        .sendNotification(DidChangeConfigurationNotification.type, didChangeConfigurationParams(settings))
        .then(
          () => this.output.info(`settings sent to the server: ${JSON.stringify(settings)}`),
          (err) => this.output.warn(`sending the settings to the server: ${String(err)}`),
        );
    }
  }

  private runningClient(): LanguageClient {
    const client = this.client;
    if (!client?.isRunning()) throw new Error("the language server is not running");
    return client;
  }

  private commandDeps(): CommandDeps {
    return {
      isRunning: () => this.client?.isRunning() === true,
      execute: async (params, token) => {
        const client = this.client;
        if (!client) throw new Error("the language server is not running");
        const ct = token as vscode.CancellationToken;
        const result = await client.sendRequest(ExecuteCommandRequest.type, params, ct);
        if (ct.isCancellationRequested) throw new vscode.CancellationError();
        return result;
      },
      withProgress: (title, task) =>
        Promise.resolve(
          vscode.window.withProgress(
            { location: vscode.ProgressLocation.Notification, title, cancellable: true },
            (_progress, token) => task(token),
          ),
        ),
      info: (m) => void vscode.window.showInformationMessage(m),
      error: (m) => void vscode.window.showErrorMessage(m),
      offer: async (m, action) => (await vscode.window.showInformationMessage(m, action)) === action,
      isCancellation: (err) =>
        err instanceof vscode.CancellationError ||
        (err instanceof ResponseError &&
          (err.code === LSPErrorCodes.RequestCancelled || err.code === LSPErrorCodes.ServerCancelled)),
      // Focus moving away (to read the code) must not cancel the box; only Escape does.
      askInstruction: () => Promise.resolve(vscode.window.showInputBox({ ...INSTRUCTION_INPUT, ignoreFocusOut: true })),
      activeEditor: () => this.editorSnapshot(),
    };
  }

  private editorSnapshot(): EditorSnapshot | undefined {
    const editor = vscode.window.activeTextEditor;
    if (!editor) return undefined;
    const pos = (p: vscode.Position) => ({ line: p.line, character: p.character });
    const sel = editor.selection;
    return {
      uri: editor.document.uri.toString(),
      selection: { start: pos(sel.start), end: pos(sel.end) },
      cursor: pos(sel.active),
    };
  }

  private render(view: StatusView): void {
    this.item.text = view.text;
    this.item.tooltip = view.tooltip;
    this.item.backgroundColor =
      view.severity === "error"
        ? new vscode.ThemeColor("statusBarItem.errorBackground")
        : view.severity === "warning"
          ? new vscode.ThemeColor("statusBarItem.warningBackground")
          : undefined;
  }
}

function hasInlineItems(answer: unknown): boolean {
  const items = Array.isArray(answer) ? answer : (answer as { items?: unknown } | null | undefined)?.items;
  return Array.isArray(items) && items.length > 0;
}

/** The server's initialize result says it answers textDocument/copilotInlineEdit. */
function serverAnswersNextEdits(client: LanguageClient): boolean {
  const experimental = client.initializeResult?.capabilities.experimental as { dgNextEdit?: unknown } | undefined;
  return experimental?.dgNextEdit === true;
}

function config(): vscode.WorkspaceConfiguration {
  return vscode.workspace.getConfiguration("dg");
}

function readDg(key: string): unknown {
  return config().get(key);
}

function currentLaunch(): Launch {
  return serverLaunch(readDg, {
    workspaceFolder: vscode.workspace.workspaceFolders?.[0]?.uri.fsPath,
    home: os.homedir(),
  });
}

/** No dg.server.pythonPath and dg.server.command left at its default. */
function isDefaultLaunch(launch: Launch): boolean {
  return launch.setting === "dg.server.command" && launch.command === "dg-lsp";
}

function probe(workspaceFolders: string[]): Probe {
  return { platform: process.platform, env: process.env, home: os.homedir(), workspaceFolders, isExecutable: isExecutableFile, listDir };
}

function listDir(path: string): string[] {
  try {
    return fs.readdirSync(path);
  } catch {
    return [];
  }
}

function resolveLaunch(launch: Launch): string | undefined {
  const cwd = vscode.workspace.workspaceFolders?.[0]?.uri.fsPath ?? process.cwd();
  return findExecutable(launch.command, { PATH: process.env.PATH, PATHEXT: process.env.PATHEXT }, isExecutableFile, { platform: process.platform, cwd });
}

function isExecutableFile(path: string): boolean {
  try {
    if (!fs.statSync(path).isFile()) return false;
    if (process.platform !== "win32") fs.accessSync(path, fs.constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

let extension: DgExtension | undefined;

export async function activate(context: vscode.ExtensionContext): Promise<DgExtension> {
  extension = new DgExtension(context);
  context.subscriptions.push(extension);
  extension.registerCommands();
  await extension.start();
  return extension;
}

export async function deactivate(): Promise<void> {
  const ext = extension;
  extension = undefined;
  await ext?.stop();
}
