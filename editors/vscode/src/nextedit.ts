/**
 * Next-edit suggestions on the wire and on screen: the textDocument/copilotInlineEdit request, the reading of its
 * answer (docs/PROTOCOL.md "Next edits"), and the mapping of a proposal to what the editor draws. Pure: LSP
 * shapes only, no vscode import.
 *
 * VS Code's stable API cannot show a multi-line replacement as an inline completion, nor add lines to a view
 * (view zones are internal), so a proposal is drawn with decorations only: the text it removes is struck through
 * in place, a single-line insertion is drawn where it goes, and the new lines of a multi-line edit are drawn as a
 * ghost block to the right of the lines they replace, one `after` attachment per line.
 */
import { LspPosition, LspRange } from "./requests";

export const NEXT_EDIT_REQUEST = "textDocument/copilotInlineEdit";
export const DID_SHOW_NOTIFICATION = "textDocument/didShowInlineEdit";

/** context.triggerKind: 1 when the user asked ("Dg: Suggest Next Edit"), 2 after a pause in typing. */
export const TRIGGER = { invoked: 1, automatic: 2 } as const;

export interface LspCommand {
  title: string;
  command: string;
  arguments?: unknown[];
}

export interface NextEdit {
  range: LspRange;
  text: string;
}

/** One answer to show: every edit against one version of one document, applied together. */
export interface Proposal {
  uri: string;
  version: number;
  edits: NextEdit[];
  /** Run after the edits are applied (the server marks the proposal accepted). */
  command: LspCommand | undefined;
  /** The first edit as the server sent it: the `item` of textDocument/didShowInlineEdit. */
  item: unknown;
}

export function nextEditParams(uri: string, version: number, position: LspPosition, triggerKind: number) {
  return {
    textDocument: { uri, version },
    position: { line: position.line, character: position.character },
    context: { triggerKind },
  };
}

/**
 * The proposal in an answer, or undefined when there is nothing to show: no edits, a malformed answer, edits
 * that overlap, or any edit computed for another document or version than the one asked about (a stale answer).
 */
export function parseProposal(raw: unknown, uri: string, version: number): Proposal | undefined {
  if (raw === null || typeof raw !== "object") return undefined;
  const list = (raw as { edits?: unknown }).edits;
  if (!Array.isArray(list) || list.length === 0) return undefined;
  const edits: NextEdit[] = [];
  let command: LspCommand | undefined;
  for (const e of list) {
    if (e === null || typeof e !== "object") return undefined;
    const r = e as Record<string, unknown>;
    const doc = r.textDocument as { uri?: unknown; version?: unknown } | undefined;
    if (!doc || doc.uri !== uri || doc.version !== version) return undefined;
    const range = asRange(r.range);
    if (!range || typeof r.text !== "string") return undefined;
    edits.push({ range, text: r.text });
    command ??= asCommand(r.command);
  }
  edits.sort((a, b) => compare(a.range.start, b.range.start));
  for (let i = 1; i < edits.length; i++) {
    if (compare(edits[i - 1].range.end, edits[i].range.start) > 0) return undefined;
  }
  return { uri, version, edits, command, item: list[0] };
}

function asPosition(raw: unknown): LspPosition | undefined {
  if (raw === null || typeof raw !== "object") return undefined;
  const { line, character } = raw as Record<string, unknown>;
  if (!Number.isInteger(line) || !Number.isInteger(character) || (line as number) < 0 || (character as number) < 0) {
    return undefined;
  }
  return { line: line as number, character: character as number };
}

function asRange(raw: unknown): LspRange | undefined {
  if (raw === null || typeof raw !== "object") return undefined;
  const start = asPosition((raw as { start?: unknown }).start);
  const end = asPosition((raw as { end?: unknown }).end);
  return start && end && compare(start, end) <= 0 ? { start, end } : undefined;
}

function asCommand(raw: unknown): LspCommand | undefined {
  if (raw === null || typeof raw !== "object") return undefined;
  const c = raw as Record<string, unknown>;
  if (typeof c.command !== "string") return undefined;
  return {
    title: typeof c.title === "string" ? c.title : c.command,
    command: c.command,
    arguments: Array.isArray(c.arguments) ? c.arguments : undefined,
  };
}

export function compare(a: LspPosition, b: LspPosition): number {
  return a.line !== b.line ? a.line - b.line : a.character - b.character;
}

/** What the editor draws for a proposal. */
export interface ProposalView {
  /** Text the proposal removes (struck through). */
  removed: LspRange[];
  /** Single-line insertions, drawn where they go. */
  inserted: { at: LspPosition; text: string }[];
  /** Ghost lines: `text` drawn after the end of line `line`, `pad` columns right of it (aligned blocks). Lines a
   * proposal adds past the end of the document are joined onto the last line with " ⏎ ". */
  ghost: { line: number; text: string; pad: number }[];
  /** The lines the proposal covers (edits and ghost lines): moving the cursor off them dismisses it. */
  firstLine: number;
  lastLine: number;
}

/** The gap between the longest line a ghost block sits beside and the block. */
export const GHOST_GAP = 4;

/** Maps a proposal's edits against the document's current `lines` to decorations. */
export function proposalView(lines: readonly string[], edits: readonly NextEdit[]): ProposalView {
  const view: ProposalView = { removed: [], inserted: [], ghost: [], firstLine: Infinity, lastLine: -1 };
  const last = Math.max(lines.length - 1, 0);
  let freeRow = 0; // ghost rows already taken by an earlier block
  for (const { range, text } of edits) {
    const { start, end } = range;
    view.firstLine = Math.min(view.firstLine, start.line);
    view.lastLine = Math.max(view.lastLine, end.line);
    if (compare(start, end) < 0) view.removed.push(range);
    if (start.line === end.line && !text.includes("\n")) {
      if (text !== "") view.inserted.push({ at: end, text });
      continue;
    }
    // A multi-line edit: the new text of the whole lines it touches, less the lines it leaves as they are.
    const before = lines.slice(start.line, end.line + 1);
    const after = ((lines[start.line] ?? "").slice(0, start.character) + text + (lines[end.line] ?? "").slice(end.character))
      .split("\n");
    let head = 0;
    while (head < before.length && head < after.length && before[head] === after[head]) head++;
    let tail = 0;
    while (
      tail < before.length - head && tail < after.length - head &&
      before[before.length - 1 - tail] === after[after.length - 1 - tail]
    ) tail++;
    const added = after.slice(head, after.length - tail);
    if (added.length === 0) continue; // only removals: the strike-through says it all
    const row0 = Math.min(Math.max(start.line + head, freeRow), last);
    const rows: string[] = [];
    for (const [i, line] of added.entries()) {
      if (row0 + i <= last) rows.push(line);
      else rows[rows.length - 1] += ` ⏎ ${line}`;
    }
    const width = Math.max(...rows.map((_, i) => (lines[row0 + i] ?? "").length));
    for (const [i, line] of rows.entries()) {
      const row = row0 + i;
      view.ghost.push({ line: row, text: line, pad: width - (lines[row] ?? "").length + GHOST_GAP });
    }
    freeRow = row0 + rows.length;
    view.firstLine = Math.min(view.firstLine, row0);
    view.lastLine = Math.max(view.lastLine, row0 + rows.length - 1);
  }
  if (view.lastLine < 0) view.firstLine = view.lastLine = 0;
  return view;
}
