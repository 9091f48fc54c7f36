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
  showInputBox(options) {
    state.inputBoxes.push(options);
    return Promise.resolve(state.inputBoxAnswer);
  },
  get activeTextEditor() {
    return state.activeTextEditor;
  },
};

const commands = {
  registerCommand(id, fn) {
    if (state.commands.has(id)) throw new Error(`command '${id}' already exists`);
    state.commands.set(id, fn);
    return { dispose: () => state.commands.delete(id) };
  },
  executeCommand(id, ...args) {
    state.executed.push({ id, args });
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
    };
  },
  onDidChangeConfiguration: (fn) => state.configEvents.event(fn),
  get workspaceFolders() {
    return state.workspaceFolders;
  },
};

/** Changes settings and fires onDidChangeConfiguration like VS Code does. */
function setConfig(values) {
  Object.assign(state.config, values);
  const changed = Object.keys(values);
  state.configEvents.fire({
    affectsConfiguration: (section) => changed.some((k) => k === section || k.startsWith(`${section}.`)),
  });
}

function memento(initial = {}) {
  const data = { ...initial };
  return { data, get: (k, d) => (k in data ? data[k] : d), update: (k, v) => ((data[k] = v), Promise.resolve()) };
}

module.exports = {
  EventEmitter,
  CancellationError,
  ThemeColor,
  StatusBarAlignment: { Left: 1, Right: 2 },
  ProgressLocation: { SourceControl: 1, Window: 10, Notification: 15 },
  window,
  commands,
  workspace,
  // test helpers (not part of the real API)
  __state: state,
  __reset: reset,
  __setConfig: setConfig,
  __memento: memento,
};
