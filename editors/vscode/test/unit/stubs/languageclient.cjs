// A fake vscode-languageclient/node: records the options it was built with, lets a test play the server
// (notifications, state changes, answers to executeCommand) and records what the extension sends.
const State = { Stopped: 1, Starting: 3, Running: 2 };
const LSPErrorCodes = { RequestCancelled: -32800, ServerCancelled: -32802 };

class ResponseError extends Error {
  constructor(code, message) {
    super(message);
    this.code = code;
  }
}

const instances = [];

class LanguageClient {
  constructor(id, name, serverOptions, clientOptions) {
    Object.assign(this, { id, name, serverOptions, clientOptions });
    this.running = false;
    this.stateListeners = [];
    this.notificationHandlers = new Map();
    this.requests = [];
    this.notifications = [];
    this.answer = async () => ({ applied: true, reason: null, latencyMs: 12 });
    this.startError = undefined;
    this.disposed = false;
    this.initializeResult = { capabilities: { experimental: { dgNextEdit: true } } };
    instances.push(this);
  }
  onDidChangeState(fn) {
    this.stateListeners.push(fn);
    return { dispose() {} };
  }
  onNotification(method, handler) {
    this.notificationHandlers.set(method, handler);
    return { dispose() {} };
  }
  async start() {
    this.setState(State.Starting);
    if (LanguageClient.nextStartError) {
      const err = LanguageClient.nextStartError;
      LanguageClient.nextStartError = undefined;
      this.setState(State.Stopped);
      throw err;
    }
    this.initializationOptions =
      typeof this.clientOptions.initializationOptions === "function"
        ? this.clientOptions.initializationOptions()
        : this.clientOptions.initializationOptions;
    this.running = true;
    this.setState(State.Running);
  }
  async stop() {
    this.running = false;
    this.setState(State.Stopped);
  }
  dispose() {
    this.disposed = true;
  }
  isRunning() {
    return this.running;
  }
  async sendRequest(type, params, token) {
    this.requests.push({ method: typeof type === "string" ? type : type.method, params, token });
    return this.answer(params, token);
  }
  async sendNotification(type, params) {
    this.notifications.push({ method: typeof type === "string" ? type : type.method, params });
  }
  // test helpers
  setState(newState) {
    for (const fn of this.stateListeners) fn({ oldState: undefined, newState });
  }
  notify(method, params) {
    this.notificationHandlers.get(method)?.(params);
  }
}

module.exports = {
  LanguageClient,
  State,
  LSPErrorCodes,
  ResponseError,
  RevealOutputChannelOn: { Debug: 0, Info: 1, Warn: 2, Error: 3, Never: 4 },
  ExecuteCommandRequest: { type: { method: "workspace/executeCommand" } },
  DidChangeConfigurationNotification: { type: { method: "workspace/didChangeConfiguration" } },
  __instances: instances,
};
