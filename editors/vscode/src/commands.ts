/**
 * The palette commands "Dg: Rewrite Selection", "Dg: Rewrite Selection…" (with an instruction) and "Dg: Fill
 * Hole": check the editor state, send the server's command, report the outcome. Dependencies come in as an
 * interface, so this has no vscode import.
 */
import {
  SERVER_COMMANDS,
  CommandResult,
  ExecuteCommandParams,
  LOW_CONFIDENCE,
  LspPosition,
  LspRange,
  fillHoleParams,
  isEmptyRange,
  normalizeInstruction,
  parseCommandResult,
  resultMessage,
  rewriteSelectionParams,
  withForce,
} from "./requests";

/** The active editor, already converted to LSP coordinates (UTF-16, like VS Code itself). */
export interface EditorSnapshot {
  uri: string;
  selection: LspRange;
  cursor: LspPosition;
}

/** A cancellation token as the language client accepts it. */
export type Token = unknown;

export interface CommandDeps {
  /** Whether the language client is up; commands refuse to queue behind a dead server. */
  isRunning(): boolean;
  /** workspace/executeCommand to the server. */
  execute(params: ExecuteCommandParams, token: Token): Promise<unknown>;
  /** Runs `task` under a cancellable progress notification. */
  withProgress<T>(title: string, task: (token: Token) => Promise<T>): Promise<T>;
  info(message: string): void;
  error(message: string): void;
  /** Shows `message` with a button `action`; true when the user pressed it. */
  offer(message: string, action: string): Promise<boolean>;
  /** True for the error the client raises when the user cancelled the request. */
  isCancellation(err: unknown): boolean;
  /** Asks for the rewrite's instruction: the text typed ("" for none), or undefined when the user cancelled. */
  askInstruction(): Promise<string | undefined>;
  /** The active editor now (the input box stays open while the user looks around, so it may have changed). */
  activeEditor(): EditorSnapshot | undefined;
}

/** The button on a message about a fill the server's confidence gate withheld. */
export const APPLY_ANYWAY = "Apply anyway";

/** The input box of "Dg: Rewrite Selection…"; extension.ts hands these to window.showInputBox. */
export const INSTRUCTION_INPUT = {
  title: "Dg: Rewrite Selection…",
  prompt: "How should the selection be rewritten? Leave empty for a plain re-fill; Escape cancels.",
  placeHolder: "e.g. make it async",
} as const;

export async function rewriteSelection(
  deps: CommandDeps,
  editor: EditorSnapshot | undefined,
  widen = false,
): Promise<CommandResult | undefined> {
  if (!hasSelection(deps, editor)) return undefined;
  const params = rewriteSelectionParams(editor.uri, editor.selection, widen);
  return run(deps, "rewrite", "Dg: rewriting selection…", params);
}

/**
 * "Dg: Rewrite Selection…": asks for an instruction first. Escape sends nothing; an empty instruction is a
 * plain re-fill. The selection is the one the command started with; if it moved while the box was open (an
 * edit shifts it too), nothing is sent, since the range would no longer name the code the user chose.
 */
export async function rewriteSelectionWithInstruction(
  deps: CommandDeps,
  editor: EditorSnapshot | undefined,
  widen = false,
): Promise<CommandResult | undefined> {
  if (!hasSelection(deps, editor)) return undefined;
  // Checked before asking too: typing an instruction for a server that is down would be wasted.
  if (!deps.isRunning()) return notRunning(deps);
  const typed = await deps.askInstruction();
  if (typed === undefined) return undefined;
  if (!sameSelection(editor, deps.activeEditor())) {
    deps.info("Dg: the selection changed while the instruction was typed; nothing was sent.");
    return undefined;
  }
  const instruction = normalizeInstruction(typed);
  const params = rewriteSelectionParams(editor.uri, editor.selection, widen, instruction);
  const title = instruction ? `Dg: rewriting selection (${quoteShort(instruction)})…` : "Dg: rewriting selection…";
  return run(deps, "rewrite", title, params);
}

function hasSelection(deps: CommandDeps, editor: EditorSnapshot | undefined): editor is EditorSnapshot {
  if (!editor) {
    deps.info("Dg: open a file and select the code to rewrite.");
    return false;
  }
  if (isEmptyRange(editor.selection)) {
    deps.info("Dg: select the code to rewrite first.");
    return false;
  }
  return true;
}

function sameSelection(a: EditorSnapshot, b: EditorSnapshot | undefined): boolean {
  return b !== undefined && a.uri === b.uri && JSON.stringify(a.selection) === JSON.stringify(b.selection);
}

/** `"make it async"`, cut to 40 characters for the progress notification. */
function quoteShort(text: string): string {
  const chars = [...text];
  return JSON.stringify(chars.length > 40 ? `${chars.slice(0, 39).join("")}…` : text);
}

function notRunning(deps: CommandDeps): undefined {
  deps.error("Dg: the language server is not running (see Dg: Show Log).");
  return undefined;
}

export async function fillHole(deps: CommandDeps, editor: EditorSnapshot | undefined): Promise<CommandResult | undefined> {
  if (!editor) {
    deps.info("Dg: open a file and put the cursor in a hole.");
    return undefined;
  }
  return run(deps, "fill", "Dg: filling hole…", fillHoleParams(editor.uri, editor.cursor));
}

async function run(
  deps: CommandDeps,
  what: "rewrite" | "fill",
  title: string,
  params: ExecuteCommandParams,
): Promise<CommandResult | undefined> {
  if (!deps.isRunning()) return notRunning(deps);
  try {
    const result = parseCommandResult(await deps.withProgress(title, (token) => deps.execute(params, token)));
    const message = resultMessage(what, result);
    if (message && result.reason === LOW_CONFIDENCE && !params.arguments.some((a) => (a as { force?: boolean }).force)) {
      // The gate withheld it: the same command with force applies the same fill (the server refuses it if the
      // document changed meanwhile).
      if (await deps.offer(message, APPLY_ANYWAY)) return run(deps, what, title, withForce(params, result));
      return result;
    }
    if (message) deps.info(message);
    return result;
  } catch (err) {
    if (deps.isCancellation(err)) return undefined;
    deps.error(`Dg: ${what} failed: ${err instanceof Error ? err.message : String(err)}`);
    return undefined;
  }
}

/**
 * For the server's own commands run through the language client (its code actions, "Fill hole" and
 * "Rewrite selection"): the same "not applied" message the palette commands show, instead of silence.
 * Returns the raw result unchanged.
 */
export function reportServerCommand(command: string, raw: unknown, info: (message: string) => void): unknown {
  const what = command === SERVER_COMMANDS.rewriteSelection ? "rewrite" : command === SERVER_COMMANDS.fillHole ? "fill" : undefined;
  if (what) {
    const message = resultMessage(what, parseCommandResult(raw));
    if (message) info(message);
  }
  return raw;
}
