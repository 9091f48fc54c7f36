/**
 * Builds the workspace/executeCommand requests for the server's dg.fillHole and dg.rewriteSelection
 * (docs/PROTOCOL.md) and reads their results. Pure: LSP shapes only, no vscode import.
 */

/** Command ids the server lists in executeCommandProvider. The language client registers these itself, so
 * the extension's palette commands use other ids (see package.json) and send these over the wire. */
export const SERVER_COMMANDS = {
  fillHole: "dg.fillHole",
  rewriteSelection: "dg.rewriteSelection",
} as const;

export interface LspPosition {
  line: number;
  character: number;
}

export interface LspRange {
  start: LspPosition;
  end: LspPosition;
}

export interface ExecuteCommandParams {
  command: string;
  arguments: unknown[];
}

/** What the server answers to both commands. */
export interface CommandResult {
  applied: boolean;
  reason: string | null;
  latencyMs: number | null;
  /** The fill's confidence and the gate it missed, when the server's confidence gate withheld it. */
  confidence?: number;
  minConfidence?: number;
  /** The document (version and open) a withheld fill was computed for, to resend with force. */
  version?: number;
  documentOpen?: number;
}

/** The reason the server gives when its confidence gate withheld a command's fill (docs/PROTOCOL.md). */
export const LOW_CONFIDENCE = "low confidence";

/**
 * Rewrites exactly `range` (widen=false) or the smallest syntax node around it (widen=true). A non-empty
 * `instruction` ("make it async") goes along as the argument's `instruction` field; an empty or blank one
 * is left out, which the server treats as a plain re-fill.
 */
export function rewriteSelectionParams(
  uri: string,
  range: LspRange,
  widen = false,
  instruction?: string,
): ExecuteCommandParams {
  if (isEmptyRange(range)) throw new Error("rewriteSelection needs a non-empty range");
  const argument: Record<string, unknown> = { textDocument: { uri }, range: orderedRange(range), widen };
  const text = normalizeInstruction(instruction);
  if (text !== undefined) argument.instruction = text;
  return { command: SERVER_COMMANDS.rewriteSelection, arguments: [argument] };
}

/** What the user typed as an instruction, trimmed; undefined when there is nothing to send. */
export function normalizeInstruction(instruction: string | undefined): string | undefined {
  const text = instruction?.trim();
  return text ? text : undefined;
}

/** Fills the syntactic hole at `position`. */
export function fillHoleParams(uri: string, position: LspPosition): ExecuteCommandParams {
  return {
    command: SERVER_COMMANDS.fillHole,
    arguments: [{ textDocument: { uri }, position: { line: position.line, character: position.character } }],
  };
}

export function isEmptyRange(range: LspRange): boolean {
  return range.start.line === range.end.line && range.start.character === range.end.character;
}

/** A backwards selection (anchor after active) still names the same text; the server wants start <= end. */
export function orderedRange(range: LspRange): LspRange {
  const { start, end } = range;
  const swapped = start.line > end.line || (start.line === end.line && start.character > end.character);
  const [a, b] = swapped ? [end, start] : [start, end];
  return { start: { line: a.line, character: a.character }, end: { line: b.line, character: b.character } };
}

/** Tolerant reading of the server's answer: a null or malformed result counts as "not applied". */
export function parseCommandResult(raw: unknown): CommandResult {
  if (raw === null || typeof raw !== "object") {
    return { applied: false, reason: "the server returned no result", latencyMs: null };
  }
  const r = raw as Record<string, unknown>;
  const out: CommandResult = {
    applied: r.applied === true,
    reason: typeof r.reason === "string" ? r.reason : null,
    latencyMs: typeof r.latencyMs === "number" ? r.latencyMs : null,
  };
  if (typeof r.confidence === "number") out.confidence = r.confidence;
  if (typeof r.minConfidence === "number") out.minConfidence = r.minConfidence;
  if (typeof r.version === "number") out.version = r.version;
  if (typeof r.documentOpen === "number") out.documentOpen = r.documentOpen;
  return out;
}

/**
 * The same command with force: true, which applies a fill the confidence gate withheld; pinned to the document
 * (version, open) the withheld fill was computed for when the server said which, so an edit in between is refused.
 */
export function withForce(params: ExecuteCommandParams, withheld?: CommandResult): ExecuteCommandParams {
  const [first, ...rest] = params.arguments;
  const arg: Record<string, unknown> = { ...(first as Record<string, unknown>), force: true };
  if (withheld?.version !== undefined) {
    arg.textDocument = { ...(arg.textDocument as Record<string, unknown>), version: withheld.version };
  }
  if (withheld?.documentOpen !== undefined) arg.documentOpen = withheld.documentOpen;
  return { command: params.command, arguments: [arg, ...rest] };
}

/** The message to show after a command, or undefined when the edit landed (the text change speaks). */
export function resultMessage(what: "rewrite" | "fill", result: CommandResult): string | undefined {
  if (result.applied) return undefined;
  if (result.reason === LOW_CONFIDENCE && result.confidence !== undefined) {
    const gate = result.minConfidence !== undefined ? ` is below minConfidence ${result.minConfidence.toFixed(2)}` : "";
    return `Dg: ${what} withheld: confidence ${result.confidence.toFixed(2)}${gate}`;
  }
  const reason = result.reason ?? "no reason given";
  return `Dg: ${what} not applied: ${reason}`;
}
