/**
 * The VS Code side of next-edit suggestions: decorations for a proposal, the Tab context key, editor events into
 * the policy (nexteditpolicy.ts), and the edit applied as one undo step. The language client comes in as
 * `NextEditClient`, the decisions are the policy's.
 */
import * as vscode from "vscode";
import { DID_SHOW_NOTIFICATION, LspCommand, NEXT_EDIT_REQUEST, NextEdit, Proposal, ProposalView } from "./nextedit";
import { ActiveDocument, NextEditHost, NextEditPolicy, NextEditSettings } from "./nexteditpolicy";
import { LspRange } from "./requests";

/** The context key of the Tab keybinding (package.json): true only while a proposal is drawn in full. */
export const TAB_CONTEXT_KEY = "dg.nextEditVisible";

export interface NextEditClient {
  /** Running, and the server said it answers next-edit requests (capabilities.experimental.dgNextEdit). */
  ready(): boolean;
  /** Whether the user lets the extension ask for this language (Dg: Toggle, dg.languages). */
  allowed(languageId: string): boolean;
  sendRequest(method: string, params: unknown, token: vscode.CancellationToken): Promise<unknown>;
  sendNotification(method: string, params: unknown): void;
  executeCommand(command: LspCommand): Promise<unknown>;
  log(message: string): void;
}

const NBSP = "\u00a0";
const ghostText = (text: string) => text.replace(/ /g, NBSP);
const toRange = (r: LspRange) => new vscode.Range(r.start.line, r.start.character, r.end.line, r.end.character);

export class NextEditUi implements NextEditHost, vscode.Disposable {
  readonly policy: NextEditPolicy;
  private readonly removed: vscode.TextEditorDecorationType;
  private readonly inserted: vscode.TextEditorDecorationType;
  private readonly ghost: vscode.TextEditorDecorationType;
  private readonly indicator: vscode.TextEditorDecorationType;
  private readonly disposables: vscode.Disposable[] = [];
  private drawnIn: vscode.TextEditor | undefined;

  constructor(
    private readonly client: NextEditClient,
    iconPath: vscode.Uri,
  ) {
    const insertedBg = new vscode.ThemeColor("diffEditor.insertedTextBackground");
    this.removed = vscode.window.createTextEditorDecorationType({
      backgroundColor: new vscode.ThemeColor("diffEditor.removedTextBackground"),
      textDecoration: "line-through",
    });
    this.inserted = vscode.window.createTextEditorDecorationType({
      after: { backgroundColor: insertedBg, color: new vscode.ThemeColor("editorGhostText.foreground") },
    });
    this.ghost = vscode.window.createTextEditorDecorationType({
      after: { backgroundColor: insertedBg, color: new vscode.ThemeColor("editorGhostText.foreground"), fontStyle: "italic" },
    });
    this.indicator = vscode.window.createTextEditorDecorationType({
      gutterIconPath: iconPath,
      gutterIconSize: "contain",
      overviewRulerColor: new vscode.ThemeColor("editorGutter.addedBackground"),
      overviewRulerLane: vscode.OverviewRulerLane.Right,
    });
    this.policy = new NextEditPolicy(this);
    this.disposables.push(
      this.removed,
      this.inserted,
      this.ghost,
      this.indicator,
      vscode.workspace.onDidChangeTextDocument((e) => {
        if (e.contentChanges.length > 0) this.policy.textChanged(e.document.uri.toString());
      }),
      vscode.window.onDidChangeTextEditorSelection((e) => {
        if (e.textEditor === vscode.window.activeTextEditor) {
          this.policy.selectionChanged(e.textEditor.document.uri.toString(), e.selections[0].active.line);
        }
      }),
      vscode.window.onDidChangeActiveTextEditor(() => this.policy.editorChanged()),
      vscode.workspace.onDidCloseTextDocument((d) => {
        if (this.policy.shown?.uri === d.uri.toString()) this.policy.dismiss("the document was closed");
      }),
    );
  }

  dispose(): void {
    this.policy.dispose();
    for (const d of this.disposables.splice(0)) d.dispose();
  }

  // -- NextEditHost ----------------------------------------------------------------------------------------

  settings(): NextEditSettings {
    const c = vscode.workspace.getConfiguration("dg");
    const debounce = c.get<number>("nextEditDebounceMs", 400);
    return {
      enabled: c.get<boolean>("nextEdit", true) === true,
      debounceMs: typeof debounce === "number" && debounce >= 0 ? debounce : 400,
      indicatorOnly: c.get<boolean>("nextEditIndicatorOnly", false) === true,
    };
  }

  mayRequest(doc: ActiveDocument): boolean {
    return this.client.ready() && this.client.allowed(doc.languageId);
  }

  active(): ActiveDocument | undefined {
    const editor = vscode.window.activeTextEditor;
    if (!editor) return undefined;
    const cursor = editor.selection.active;
    return {
      uri: editor.document.uri.toString(),
      version: editor.document.version,
      languageId: editor.document.languageId,
      cursor: { line: cursor.line, character: cursor.character },
    };
  }

  document(uri: string): { version: number; lines: string[] } | undefined {
    const doc = vscode.workspace.textDocuments.find((d) => d.uri.toString() === uri && !d.isClosed);
    return doc ? { version: doc.version, lines: doc.getText().split(/\r\n|\r|\n/) } : undefined;
  }

  request(params: unknown): { result: Promise<unknown>; cancel(): void } {
    const source = new vscode.CancellationTokenSource();
    const result = (async () => this.client.sendRequest(NEXT_EDIT_REQUEST, params, source.token))().finally(() =>
      source.dispose(),
    );
    return { result, cancel: () => source.cancel() };
  }

  show(proposal: Proposal, view: ProposalView, indicatorOnly: boolean): void {
    const editor = vscode.window.visibleTextEditors.find((e) => e.document.uri.toString() === proposal.uri);
    if (!editor) return;
    this.hide();
    this.drawnIn = editor;
    const hover = hoverFor(proposal, editor.document, indicatorOnly);
    if (indicatorOnly) {
      const line = new vscode.Range(view.firstLine, 0, view.firstLine, 0);
      editor.setDecorations(this.indicator, [{ range: line, hoverMessage: hover }]);
      return;
    }
    editor.setDecorations(this.removed, view.removed.map((r) => ({ range: toRange(r), hoverMessage: hover })));
    editor.setDecorations(
      this.inserted,
      view.inserted.map(({ at, text }) => ({
        range: new vscode.Range(at.line, at.character, at.line, at.character),
        hoverMessage: hover,
        renderOptions: { after: { contentText: ghostText(text) } },
      })),
    );
    editor.setDecorations(
      this.ghost,
      view.ghost.map(({ line, text, pad }) => {
        const end = editor.document.lineAt(line).range.end;
        return {
          range: new vscode.Range(end, end),
          hoverMessage: hover,
          renderOptions: { after: { contentText: ghostText(text || " "), margin: `0 0 0 ${pad}ch` } },
        };
      }),
    );
  }

  hide(): void {
    const editor = this.drawnIn;
    this.drawnIn = undefined;
    if (!editor) return;
    for (const type of [this.removed, this.inserted, this.ghost, this.indicator]) editor.setDecorations(type, []);
  }

  setTabAccepts(on: boolean): void {
    void vscode.commands.executeCommand("setContext", TAB_CONTEXT_KEY, on);
  }

  notifyShown(item: unknown): void {
    this.client.sendNotification(DID_SHOW_NOTIFICATION, { item });
  }

  async apply(uri: string, version: number, edits: NextEdit[]): Promise<boolean> {
    const editor = vscode.window.visibleTextEditors.find((e) => e.document.uri.toString() === uri);
    if (!editor || editor.document.version !== version) return false;
    // One edit call with undo stops around it: one undo step. VS Code refuses it if the document moved on.
    return editor.edit(
      (builder) => {
        for (const e of edits) builder.replace(toRange(e.range), e.text);
      },
      { undoStopBefore: true, undoStopAfter: true },
    );
  }

  execute(command: LspCommand): Promise<unknown> {
    return this.client.executeCommand(command);
  }

  log(message: string): void {
    this.client.log(message);
  }

  schedule(fn: () => void, ms: number): () => void {
    const timer = setTimeout(fn, ms);
    return () => clearTimeout(timer);
  }
}

/** The hover on a proposal: the change as a diff, and how to take it. */
function hoverFor(proposal: Proposal, doc: vscode.TextDocument, indicatorOnly: boolean): vscode.MarkdownString {
  const md = new vscode.MarkdownString(undefined, true);
  md.isTrusted = { enabledCommands: ["dg.acceptNextEditCommand", "dg.dismissNextEditCommand"] };
  md.appendMarkdown(`**Dg: next edit**${indicatorOnly ? "" : " (Tab accepts, Escape dismisses)"}\n\n`);
  const lines = (text: string, sign: string) => (text === "" ? [] : text.split("\n").map((l) => sign + l));
  const diff = proposal.edits.flatMap((e) => [
    `@@ line ${e.range.start.line + 1} @@`,
    ...lines(doc.getText(toRange(e.range)), "-"),
    ...lines(e.text, "+"),
  ]);
  md.appendCodeblock(diff.join("\n"), "diff");
  md.appendMarkdown("[Accept](command:dg.acceptNextEditCommand) · [Dismiss](command:dg.dismissNextEditCommand)");
  return md;
}
