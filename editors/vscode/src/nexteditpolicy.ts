/**
 * When to ask for a next edit, when to show, keep, accept or drop it (docs/PROTOCOL.md "Next edits", trigger
 * policy): after nextEditDebounceMs without typing, at most one proposal, none while ghost text is shown; typing,
 * moving off the proposal's lines, another editor or Escape dismisses it; it is applied only to the document
 * version it was computed for. The editor side comes in as a `NextEditHost`, so this has no vscode import.
 */
import { LspCommand, NextEdit, Proposal, ProposalView, TRIGGER, nextEditParams, parseProposal, proposalView } from "./nextedit";
import { LspPosition } from "./requests";

export interface NextEditSettings {
  enabled: boolean;
  debounceMs: number;
  indicatorOnly: boolean;
}

/** The active editor's document, as the request needs it. */
export interface ActiveDocument {
  uri: string;
  version: number;
  languageId: string;
  cursor: LspPosition;
}

export interface NextEditHost {
  settings(): NextEditSettings;
  /** Whether to ask the server at all for this document: client running, server capability, toggle, languages. */
  mayRequest(doc: ActiveDocument): boolean;
  active(): ActiveDocument | undefined;
  /** The open document's current version and lines, or undefined once it is closed. */
  document(uri: string): { version: number; lines: string[] } | undefined;
  /** textDocument/copilotInlineEdit; `cancel` cancels the request ($/cancelRequest). */
  request(params: ReturnType<typeof nextEditParams>): { result: Promise<unknown>; cancel(): void };
  /** Draws the proposal (decorations, or only the gutter mark in indicator-only mode). */
  show(proposal: Proposal, view: ProposalView, indicatorOnly: boolean): void;
  hide(): void;
  /** The context key the Tab keybinding reads (dg.nextEditVisible). */
  setTabAccepts(on: boolean): void;
  /** textDocument/didShowInlineEdit. */
  notifyShown(item: unknown): void;
  /** Applies every edit as one undo step; false when the editor refused (its document changed meanwhile). */
  apply(uri: string, version: number, edits: NextEdit[]): Promise<boolean>;
  /** workspace/executeCommand of the proposal's command. */
  execute(command: LspCommand): Promise<unknown>;
  log(message: string): void;
  /** setTimeout; returns its cancel. */
  schedule(fn: () => void, ms: number): () => void;
}

export interface AcceptResult {
  accepted: boolean;
  reason?: string;
}

interface Shown {
  proposal: Proposal;
  view: ProposalView;
  /** The lines the cursor may move on without dismissing: the proposal's and the line it was asked from. */
  first: number;
  last: number;
}

export class NextEditPolicy {
  private cancelTimer: (() => void) | undefined;
  private inflight: { uri: string; cancel(): void } | undefined;
  private current: Shown | undefined;
  /** Inline completion requests per document: how many are running, and the version whose answer had items. */
  private inline = new Map<string, { running: number; shownAt: number | undefined }>();
  /** A next-edit request held back until the running inline completion answers (it may show ghost text). */
  private waitingForInline: string | undefined;

  constructor(private readonly host: NextEditHost) {}

  get shown(): Proposal | undefined {
    return this.current?.proposal;
  }

  /** A change to the text of an open document (any: output channels are documents too). */
  textChanged(uri: string): void {
    if (this.current?.proposal.uri === uri) this.dismiss("the document changed");
    if (this.inflight?.uri === uri) this.cancelRequest();
    if (this.host.active()?.uri === uri) this.restartTimer();
  }

  /** The cursor moved in the active editor (typing moves it too; the text change has dismissed already). */
  selectionChanged(uri: string, line: number): void {
    const c = this.current;
    if (c && (c.proposal.uri !== uri || line < c.first || line > c.last)) this.dismiss("the cursor moved away");
  }

  /** Another editor became active, or none. */
  editorChanged(): void {
    this.stopTimer();
    this.cancelRequest();
    if (this.current) this.dismiss("another editor is active");
  }

  /** The language client is about to ask for an inline completion (ghost text) at `version`. */
  inlineRequested(uri: string, version: number): void {
    const s = this.inline.get(uri) ?? { running: 0, shownAt: undefined };
    s.running++;
    if (s.shownAt !== version) s.shownAt = undefined;
    this.inline.set(uri, s);
  }

  /** The inline completion answered; `hasItems`: ghost text is (about to be) shown. */
  inlineAnswered(uri: string, version: number, hasItems: boolean): void {
    const s = this.inline.get(uri);
    if (!s) return;
    s.running = Math.max(0, s.running - 1);
    if (hasItems) {
      s.shownAt = version;
      // Never both: ghost text takes the place of a next edit.
      if (this.current?.proposal.uri === uri) this.dismiss("an inline completion is shown");
    }
    if (this.waitingForInline === uri && s.running === 0) {
      this.waitingForInline = undefined;
      void this.ask(TRIGGER.automatic);
    }
  }

  /** Escape. */
  dismiss(reason = "dismissed"): void {
    const c = this.current;
    if (!c) return;
    this.current = undefined;
    this.host.setTabAccepts(false);
    this.host.hide();
    this.host.log(`next edit dismissed (${reason}): ${c.proposal.uri} v${c.proposal.version}`);
  }

  /**
   * Asks now (the user asked, or the debounce ran out). Nothing while a proposal is shown, while an inline
   * completion is running or shown for this version (automatic only), or when the answer is for an older version.
   */
  async ask(triggerKind: number = TRIGGER.invoked): Promise<Proposal | undefined> {
    const doc = this.host.active();
    const settings = this.host.settings();
    if (!doc || this.current || !this.host.mayRequest(doc)) return undefined;
    if (triggerKind === TRIGGER.automatic) {
      if (!settings.enabled) return undefined;
      const inline = this.inline.get(doc.uri);
      if (inline?.running) {
        this.waitingForInline = doc.uri;
        return undefined;
      }
      if (inline?.shownAt === doc.version) {
        this.host.log(`next edit not asked for v${doc.version}: an inline completion is shown`);
        return undefined;
      }
    }
    this.cancelRequest();
    const req = this.host.request(nextEditParams(doc.uri, doc.version, doc.cursor, triggerKind));
    const mine = { uri: doc.uri, cancel: req.cancel };
    this.inflight = mine;
    this.host.log(`next edit asked for v${doc.version}`);
    let raw: unknown;
    try {
      raw = await req.result;
    } catch (err) {
      if (this.inflight === mine) this.host.log(`next edit request failed: ${err instanceof Error ? err.message : String(err)}`);
      raw = undefined;
    }
    // Cancelled (typing, another editor) or superseded by a newer request meanwhile: its answer is not wanted.
    if (this.inflight !== mine) {
      this.host.log(`next edit for v${doc.version}: cancelled`);
      return undefined;
    }
    this.inflight = undefined;
    const now = this.host.document(doc.uri);
    if (!now || now.version !== doc.version) {
      this.host.log(`next edit discarded (stale): computed for v${doc.version}, the document is at ${now ? `v${now.version}` : "closed"}`);
      return undefined;
    }
    const proposal = parseProposal(raw, doc.uri, doc.version);
    const inline = this.inline.get(doc.uri);
    const blocked = triggerKind === TRIGGER.automatic && (inline?.running || inline?.shownAt === doc.version);
    if (!proposal || this.current || this.host.active()?.uri !== doc.uri || blocked) {
      const why = !proposal ? "nothing to show" : blocked ? "an inline completion is shown" : "not shown";
      this.host.log(`next edit for v${doc.version}: ${why}`);
      return undefined;
    }
    this.showProposal(proposal, now.lines, doc.cursor.line);
    return proposal;
  }

  /**
   * Tab or "Dg: Accept Next Edit": applies every edit as one undo step if the document is still at the proposal's
   * version (else drops it), then runs the proposal's command.
   */
  async accept(): Promise<AcceptResult> {
    const c = this.current;
    if (!c) return { accepted: false, reason: "no next edit is shown" };
    const { proposal } = c;
    this.dismiss("accepted");
    const now = this.host.document(proposal.uri);
    if (!now || now.version !== proposal.version) {
      this.host.log(`next edit not applied: computed for v${proposal.version}, the document is at ${now ? `v${now.version}` : "closed"}`);
      return { accepted: false, reason: "document changed" };
    }
    if (!(await this.host.apply(proposal.uri, proposal.version, proposal.edits))) {
      this.host.log(`next edit not applied: the editor refused the edit (v${proposal.version})`);
      return { accepted: false, reason: "document changed" };
    }
    this.host.log(`next edit accepted: ${proposal.uri} v${proposal.version}`);
    if (proposal.command) {
      try {
        await this.host.execute(proposal.command);
      } catch (err) {
        this.host.log(`${proposal.command.command} failed: ${err instanceof Error ? err.message : String(err)}`);
      }
    }
    return { accepted: true };
  }

  dispose(): void {
    this.stopTimer();
    this.cancelRequest();
    this.dismiss("stopped");
  }

  private showProposal(proposal: Proposal, lines: string[], cursorLine: number): void {
    const view = proposalView(lines, proposal.edits);
    const indicatorOnly = this.host.settings().indicatorOnly;
    this.current = {
      proposal,
      view,
      first: Math.min(view.firstLine, cursorLine),
      last: Math.max(view.lastLine, cursorLine),
    };
    this.host.show(proposal, view, indicatorOnly);
    this.host.setTabAccepts(!indicatorOnly);
    this.host.notifyShown(proposal.item);
    this.host.log(`next edit shown: ${JSON.stringify({ uri: proposal.uri, version: proposal.version, edits: proposal.edits })}`);
  }

  private restartTimer(): void {
    this.stopTimer();
    this.waitingForInline = undefined;
    const { enabled, debounceMs } = this.host.settings();
    if (!enabled) return;
    this.cancelTimer = this.host.schedule(() => {
      this.cancelTimer = undefined;
      void this.ask(TRIGGER.automatic);
    }, debounceMs);
  }

  private stopTimer(): void {
    this.cancelTimer?.();
    this.cancelTimer = undefined;
  }

  private cancelRequest(): void {
    const r = this.inflight;
    this.inflight = undefined;
    r?.cancel();
  }
}
