/**
 * The client-side switch for inline completions ("Dg: Toggle") and the language filter: decides whether
 * the extension asks the server at all. Pure, no vscode import.
 */

export class InlineGate {
  private languages: ReadonlySet<string> | null = null;

  constructor(
    private enabled = true,
    private readonly onChange: (enabled: boolean) => void = () => {},
  ) {}

  get isEnabled(): boolean {
    return this.enabled;
  }

  /** Flips the switch and returns the new value. */
  toggle(): boolean {
    this.set(!this.enabled);
    return this.enabled;
  }

  set(enabled: boolean): void {
    if (enabled === this.enabled) return;
    this.enabled = enabled;
    this.onChange(enabled);
  }

  /** dg.languages: null or empty means every language. */
  setLanguages(languages: unknown): void {
    this.languages =
      Array.isArray(languages) && languages.length > 0
        ? new Set(languages.filter((l): l is string => typeof l === "string"))
        : null;
  }

  /** Whether to send textDocument/inlineCompletion for a document of this language. */
  shouldRequest(languageId: string): boolean {
    if (!this.enabled) return false;
    return this.languages === null || this.languages.has(languageId);
  }
}
