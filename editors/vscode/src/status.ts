/**
 * The status bar's state machine: the client's lifecycle, the server's dg/status notifications, draft
 * progress and the client-side toggle combine into one view (text, tooltip, severity). Pure, no vscode import.
 */

export const SERVER_STATES = ["loading", "ready", "busy", "error", "disabled"] as const;
export type ServerState = (typeof SERVER_STATES)[number];

/** The client's side of things, before and around the server's own states. */
export type ClientPhase = "starting" | "running" | "stopped" | "failed";

/** dg/status params (docs/PROTOCOL.md). */
export interface DgStatus {
  state: ServerState;
  message: string;
  model: string | null;
  lastLatencyMs: number | null;
}

export type Severity = "normal" | "warning" | "error";

export interface StatusView {
  /** The word the e2e test and users look for: starting, loading, ready, busy, error, disabled, off, stopped. */
  state: string;
  text: string;
  tooltip: string;
  severity: Severity;
}

const ICONS: Record<string, string> = {
  starting: "$(loading~spin)",
  loading: "$(loading~spin)",
  ready: "$(sparkle)",
  busy: "$(sync~spin)",
  error: "$(error)",
  disabled: "$(circle-slash)",
  off: "$(circle-slash)",
  stopped: "$(debug-disconnect)",
};

/** Checks a dg/status payload; returns undefined for anything that is not one. */
export function parseDgStatus(raw: unknown): DgStatus | undefined {
  if (raw === null || typeof raw !== "object") return undefined;
  const r = raw as Record<string, unknown>;
  if (typeof r.state !== "string" || !(SERVER_STATES as readonly string[]).includes(r.state)) return undefined;
  return {
    state: r.state as ServerState,
    message: typeof r.message === "string" ? r.message : "",
    model: typeof r.model === "string" ? r.model : null,
    lastLatencyMs: typeof r.lastLatencyMs === "number" && Number.isFinite(r.lastLatencyMs) ? r.lastLatencyMs : null,
  };
}

export function formatLatency(ms: number): string {
  if (ms < 1000) return `${Math.round(ms)} ms`;
  return `${(ms / 1000).toFixed(1)} s`;
}

export class StatusModel {
  private phase: ClientPhase = "starting";
  private failure = "";
  private server: DgStatus | undefined;
  private draft: { step: number; steps: number } | undefined;
  private inlineEnabled = true;
  private lastLatencyMs: number | null = null;

  constructor(private readonly onChange: (view: StatusView) => void = () => {}) {}

  clientStarting(): void {
    this.phase = "starting";
    this.server = undefined;
    this.draft = undefined;
    this.emit();
  }

  clientRunning(): void {
    this.phase = "running";
    this.emit();
  }

  clientStopped(): void {
    this.phase = "stopped";
    this.server = undefined;
    this.draft = undefined;
    this.emit();
  }

  clientFailed(message: string): void {
    this.phase = "failed";
    this.failure = message;
    this.server = undefined;
    this.draft = undefined;
    this.emit();
  }

  /** A dg/status notification; malformed ones are ignored (returns false). */
  serverStatus(raw: unknown): boolean {
    const status = parseDgStatus(raw);
    if (!status) return false;
    // A server that talks is running, even if the client's state event has not arrived yet.
    if (this.phase === "starting") this.phase = "running";
    this.server = status;
    if (status.state !== "busy") this.draft = undefined;
    if (status.lastLatencyMs !== null) this.lastLatencyMs = status.lastLatencyMs;
    this.emit();
    return true;
  }

  /** A dg/draft notification: progress within the current fill. */
  serverDraft(raw: unknown): void {
    if (raw === null || typeof raw !== "object") return;
    const r = raw as Record<string, unknown>;
    if (typeof r.step !== "number" || typeof r.steps !== "number") return;
    this.draft = r.done === true ? undefined : { step: r.step, steps: r.steps };
    this.emit();
  }

  setInlineEnabled(enabled: boolean): void {
    this.inlineEnabled = enabled;
    this.emit();
  }

  view(): StatusView {
    const state = this.state();
    const icon = ICONS[state] ?? "";
    let text = `${icon} Dg: ${state}`;
    if (state === "ready" && this.lastLatencyMs !== null) text += ` · ${formatLatency(this.lastLatencyMs)}`;
    if (state === "busy" && this.draft) text += ` ${this.draft.step}/${this.draft.steps}`;
    const severity: Severity = state === "error" ? "error" : state === "stopped" ? "warning" : "normal";
    return { state, text, tooltip: this.tooltip(state), severity };
  }

  private state(): string {
    if (this.phase === "failed") return "error";
    if (this.phase === "stopped") return "stopped";
    if (!this.server) return "starting";
    const s = this.server.state;
    // The toggle hides the server's idle states; loading, busy and error still matter to the user.
    if (!this.inlineEnabled && (s === "ready" || s === "disabled")) return "off";
    return s;
  }

  private tooltip(state: string): string {
    const lines: string[] = [];
    if (this.phase === "failed") lines.push(this.failure);
    else if (this.server?.message) lines.push(this.server.message);
    if (this.server?.model) lines.push(`Model: ${this.server.model}`);
    if (this.lastLatencyMs !== null) lines.push(`Last fill: ${formatLatency(this.lastLatencyMs)}`);
    lines.push(this.inlineEnabled ? "Inline completions: on" : "Inline completions: off (Dg: Toggle)");
    if (state === "starting") lines.unshift("Starting the dg-lsp server");
    lines.push("Click to open the log");
    return lines.join("\n");
  }

  private emit(): void {
    this.onChange(this.view());
  }
}
