// A small stand-in for the `vscode` module: just what src/extension.ts touches, recording every call
// so tests can assert on messages, commands and the status bar item.
class EventEmitter {
  constructor() {
    this.listeners = [];
    this.event = (fn) => {
      this.listeners.push(fn);
      return { dispose: () => (this.listeners = this.listeners.filter((l) => l !== fn)) };
    };
  }
  fire(value) {
    for (const l of this.listeners) l(value);
  }
}

class CancellationError extends Error {
  constructor() {
    super("Canceled");
    this.name = "Canceled";
  }
}

class Position {
  constructor(line, character) {
    Object.assign(this, { line, character });
  }
}

class Range {
  constructor(a, b, c, d) {
    [this.start, this.end] = a instanceof Position ? [a, b] : [new Position(a, b), new Position(c, d)];
  }
}

class CancellationTokenSource {
  constructor() {
    this.token = { isCancellationRequested: false, onCancellationRequested: () => ({ dispose() {} }) };
  }
  cancel() {
    this.token.isCancellationRequested = true;
  }
  dispose() {}
}

class MarkdownString {
  constructor(value = "", supportThemeIcons = false) {
    Object.assign(this, { value, supportThemeIcons });
  }
  appendMarkdown(text) {
    this.value += text;
    return this;
  }
  appendCodeblock(code, language) {
    this.value += `\n\`\`\`${language}\n${code}\n\`\`\`\n`;
    return this;
  }
}

const Uri = {
  joinPath: (base, ...parts) => ({ fsPath: [base.fsPath, ...parts].join("/"), toString: () => [base.fsPath, ...parts].join("/") }),
};

class ThemeColor {
  constructor(id) {
    this.id = id;
  }
}

const state = {};

function reset() {
  state.config = {};
  state.messages = [];
  state.executed = [];
  state.commands = new Map();
  state.statusItems = [];
  state.outputs = [];
  state.activeTextEditor = undefined;
  state.workspaceFolders = undefined;
  state.messageChoice = undefined;
  state.configEvents = new EventEmitter();
  state.cancelNextProgress = false;
  state.inputBoxes = [];
  // What the next showInputBox resolves to: a string (Enter) or undefined (Escape).
  state.inputBoxAnswer = undefined;
  state.quickPicks = [];
  state.quickPickAnswer = undefined; // (items) => the item picked, or undefined for Escape
  state.openDialogs = [];
  state.openDialogAnswer = undefined; // a list of Uri, or undefined
  state.configUpdates = [];
  state.workspaceConfig = {}; // "dg.server.command" -> a workspace-level value (inspect().workspaceValue)
  state.decorationTypes = [];
  state.visibleTextEditors = [];
  state.textDocuments = [];
  state.contexts = {};
  state.events = {
    textChange: new EventEmitter(),
    selection: new EventEmitter(),
    activeEditor: new EventEmitter(),
    close: new EventEmitter(),
  };
}
reset();

function message(level) {
  return (text, ...items) => {
    state.messages.push({ level, text, items });
    return Promise.resolve(state.messageChoice);
  };
}

const window = {
  createOutputChannel(name) {
    const lines = [];
    const channel = { name, lines, shown: 0, show: () => channel.shown++, dispose() {} };
    for (const level of ["trace", "debug", "info", "warn", "error", "appendLine", "append"]) {
      channel[level] = (text) => lines.push(`${level}: ${text}`);
    }
    state.outputs.push(channel);
    return channel;
  },
  createStatusBarItem(id, alignment, priority) {
    const item = { id, alignment, priority, text: "", tooltip: "", visible: false, show: () => (item.visible = true), dispose() {} };
    state.statusItems.push(item);
    return item;
  },
  showErrorMessage: message("error"),
  showWarningMessage: message("warning"),
  showInformationMessage: message("info"),
  withProgress(options, task) {
    const cancel = state.cancelNextProgress;
    state.cancelNextProgress = false;
    const token = { isCancellationRequested: cancel, onCancellationRequested: () => ({ dispose() {} }) };
    return task({ report() {} }, token);
  },
  setStatusBarMessage(text, timeout) {
    state.messages.push({ level: "statusbar", text, items: [timeout] });
    return { dispose() {} };
  },
  showQuickPick(items, options) {
    state.quickPicks.push({ items, options });
    return Promise.resolve(state.quickPickAnswer?.(items));
  },
  showOpenDialog(options) {
    state.openDialogs.push(options);
    return Promise.resolve(state.openDialogAnswer);
  },
  showInputBox(options) {
    state.inputBoxes.push(options);
    return Promise.resolve(state.inputBoxAnswer);
  },
  get activeTextEditor() {
    return state.activeTextEditor;
  },
  get visibleTextEditors() {
    return state.visibleTextEditors;
  },
  createTextEditorDecorationType(options) {
    const type = { options, disposed: false, dispose: () => (type.disposed = true) };
    state.decorationTypes.push(type);
    return type;
  },
  onDidChangeTextEditorSelection: (fn) => state.events.selection.event(fn),
  onDidChangeActiveTextEditor: (fn) => state.events.activeEditor.event(fn),
};

const commands = {
  registerCommand(id, fn) {
    if (state.commands.has(id)) throw new Error(`command '${id}' already exists`);
    state.commands.set(id, fn);
    return { dispose: () => state.commands.delete(id) };
  },
  executeCommand(id, ...args) {
    state.executed.push({ id, args });
    if (id === "setContext") state.contexts[args[0]] = args[1];
    const fn = state.commands.get(id);
    return Promise.resolve(fn ? fn(...args) : undefined);
  },
};

const workspace = {
  getConfiguration(section) {
    return {
      get(key, fallback) {
        const full = section ? `${section}.${key}` : key;
        return full in state.config ? state.config[full] : fallback;
      },
      inspect(key) {
        const full = section ? `${section}.${key}` : key;
        return { key: full, globalValue: state.config[full], workspaceValue: state.workspaceConfig[full] };
      },
      /** Writes the value (undefined removes it) and fires onDidChangeConfiguration, as VS Code does. */
      update(key, value, target) {
        const full = section ? `${section}.${key}` : key;
        state.configUpdates.push({ key: full, value, target });
        if (value === undefined) delete state.config[full];
        setConfig(value === undefined ? {} : { [full]: value }, [full]);
        return Promise.resolve();
      },
    };
  },
  onDidChangeConfiguration: (fn) => state.configEvents.event(fn),
  onDidChangeTextDocument: (fn) => state.events.textChange.event(fn),
  onDidCloseTextDocument: (fn) => state.events.close.event(fn),
  get textDocuments() {
    return state.textDocuments;
  },
  get workspaceFolders() {
    return state.workspaceFolders;
  },
};

/** Changes settings and fires onDidChangeConfiguration like VS Code does. */
function setConfig(values, changed = Object.keys(values)) {
  Object.assign(state.config, values);
  state.configEvents.fire({
    affectsConfiguration: (section) => changed.some((k) => k === section || k.startsWith(`${section}.`)),
  });
}

/** A text editor on a document with `text`: edit() applies replacements (refused when the version moved, as VS
 * Code does), records them, bumps the version and fires onDidChangeTextDocument. */
function textEditor(uri, text, { languageId = "python", version = 1, cursor = [0, 0] } = {}) {
  const document = {
    uri: { toString: () => uri, fsPath: uri },
    languageId,
    version,
    isClosed: false,
    text,
    getText(range) {
      if (!range) return this.text;
      return this.text.slice(offsetAt(this.text, range.start), offsetAt(this.text, range.end));
    },
    lineAt(line) {
      const t = this.text.split("\n")[line];
      return { text: t, range: new Range(line, 0, line, t.length) };
    },
  };
  const editor = {
    document,
    selection: { active: new Position(...cursor) },
    decorations: new Map(),
    edits: [],
    setDecorations(type, ranges) {
      editor.decorations.set(type, ranges);
    },
    async edit(fn, options) {
      const expected = document.version;
      const ops = [];
      fn({ replace: (range, newText) => ops.push({ range, newText }) });
      await Promise.resolve();
      if (document.version !== expected) return false;
      editor.edits.push({ ops, options });
      replaceText(document, ops);
      return true;
    },
  };
  return editor;
}

function offsetAt(text, pos) {
  const lines = text.split("\n");
  let off = 0;
  for (let i = 0; i < pos.line; i++) off += lines[i].length + 1;
  return off + pos.character;
}

/** Changes a document's text like the user would: version + 1 and onDidChangeTextDocument. */
function replaceText(document, ops) {
  let text = document.text;
  for (const { range, newText } of [...ops].sort((a, b) => offsetAt(text, b.range.start) - offsetAt(text, a.range.start))) {
    text = text.slice(0, offsetAt(text, range.start)) + newText + text.slice(offsetAt(text, range.end));
  }
  document.text = text;
  document.version++;
  state.events.textChange.fire({ document, contentChanges: ops });
}

function memento(initial = {}) {
  const data = { ...initial };
  return { data, get: (k, d) => (k in data ? data[k] : d), update: (k, v) => ((data[k] = v), Promise.resolve()) };
}

module.exports = {
  EventEmitter,
  CancellationError,
  ThemeColor,
  Position,
  Range,
  CancellationTokenSource,
  MarkdownString,
  Uri,
  OverviewRulerLane: { Left: 1, Center: 2, Right: 4, Full: 7 },
  StatusBarAlignment: { Left: 1, Right: 2 },
  ProgressLocation: { SourceControl: 1, Window: 10, Notification: 15 },
  ConfigurationTarget: { Global: 1, Workspace: 2, WorkspaceFolder: 3 },
  window,
  commands,
  workspace,
  // test helpers (not part of the real API)
  __state: state,
  __reset: reset,
  __setConfig: setConfig,
  __memento: memento,
  __textEditor: textEditor,
  __replaceText: replaceText,
};
