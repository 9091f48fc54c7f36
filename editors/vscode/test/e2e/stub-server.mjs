#!/usr/bin/env node
// A stand-in for dg-lsp over stdio that follows docs/PROTOCOL.md with canned answers, so the real-editor
// harness can be checked without a model (`node test/e2e/run.mjs --server stub`). It is not the server
// under test: the default e2e run starts the real `python -m dg_lsp`.
const docs = new Map(); // uri -> { version, text }
let nextId = 1;
const pending = new Map();
let buffer = Buffer.alloc(0);

function send(msg) {
  const body = Buffer.from(JSON.stringify({ jsonrpc: "2.0", ...msg }), "utf8");
  process.stdout.write(`Content-Length: ${body.length}\r\n\r\n`);
  process.stdout.write(body);
}

function request(method, params) {
  const id = `stub-${nextId++}`;
  send({ id, method, params });
  return new Promise((resolve) => pending.set(id, resolve));
}

const status = (state, lastLatencyMs = null) =>
  send({ method: "dg/status", params: { state, message: `stub ${state}`, model: "stub", lastLatencyMs } });

const handlers = {
  initialize: () => ({
    capabilities: {
      textDocumentSync: 1,
      inlineCompletionProvider: {},
      codeActionProvider: true,
      executeCommandProvider: { commands: ["dg.fillHole", "dg.rewriteSelection", "dg.acceptNextEdit"] },
      experimental: { dgNextEdit: true },
    },
    serverInfo: { name: "dg-lsp-stub", version: "0" },
  }),
  initialized: () => {
    status("loading");
    setTimeout(() => status("ready"), 1500);
  },
  "textDocument/didOpen": ({ textDocument: d }) => docs.set(d.uri, { version: d.version, text: d.text }),
  "textDocument/didChange": ({ textDocument: d, contentChanges }) =>
    docs.set(d.uri, { version: d.version, text: contentChanges.at(-1).text }),
  "textDocument/inlineCompletion": ({ textDocument, position }) => {
    status("ready", 42);
    // The next-edit scenarios' files (nes_*.py) get no ghost text, so that a next edit may show.
    if (/\/nes_[^/]*$/.test(textDocument.uri)) return { items: [] };
    const at = { line: position.line, character: position.character };
    return { items: [{ insertText: "return a + b", range: { start: at, end: at } }] };
  },
  // A canned next edit: every other `count` becomes `total` (the rename the scenario starts), at the version asked.
  "textDocument/copilotInlineEdit": ({ textDocument: { uri, version } }) => {
    const doc = docs.get(uri);
    if (!doc || doc.version !== version) return { edits: [] };
    const command = { title: "Accept next edit", command: "dg.acceptNextEdit", arguments: [{ uri, version, documentOpen: 1, id: `stub-${version}` }] };
    const edits = [];
    doc.text.split("\n").forEach((line, i) => {
      for (const m of line.matchAll(/\bcount\b/g)) {
        const range = { start: { line: i, character: m.index }, end: { line: i, character: m.index + 5 } };
        edits.push({ text: "total", range, textDocument: { uri, version }, command });
      }
    });
    return { edits: /\btotal\b/.test(doc.text) ? edits : [] };
  },
  "textDocument/didShowInlineEdit": () => {},
  // Same shape as dg-lsp: plain Commands, "Rewrite selection" only for a non-empty range.
  "textDocument/codeAction": ({ textDocument, range }) => {
    const doc = { uri: textDocument.uri };
    const actions = [{ title: "Fill hole", command: "dg.fillHole", arguments: [{ textDocument: doc, position: range.start }] }];
    const empty = range.start.line === range.end.line && range.start.character === range.end.character;
    if (!empty) {
      actions.push({ title: "Rewrite selection", command: "dg.rewriteSelection", arguments: [{ textDocument: doc, range, widen: false }] });
    }
    return actions;
  },
  "workspace/executeCommand": async ({ command, arguments: [args] }) => {
    if (command === "dg.acceptNextEdit") return { accepted: true };
    // Like dg-lsp on a fim-format checkpoint (the shipped default): an instruction is refused, nothing edited.
    if (command === "dg.rewriteSelection" && typeof args.instruction === "string" && args.instruction.trim()) {
      const reason = "this model's prompt format (fim) cannot take an instruction; use a checkpoint with a chat template";
      send({ method: "window/showMessage", params: { type: 2, message: `dg-lsp: ${reason}` } });
      return { applied: false, reason, latencyMs: 0 };
    }
    const doc = docs.get(args.textDocument.uri);
    const range = command === "dg.rewriteSelection" ? args.range : { start: args.position, end: args.position };
    const edit = {
      documentChanges: [
        { textDocument: { uri: args.textDocument.uri, version: doc.version }, edits: [{ range, newText: "rewritten = True" }] },
      ],
    };
    const answer = await request("workspace/applyEdit", { label: command, edit });
    status("ready", 7);
    return { applied: answer.applied === true, reason: null, latencyMs: 7 };
  },
  shutdown: () => null,
  exit: () => process.exit(0),
};

async function dispatch(msg) {
  if (msg.method === undefined) {
    pending.get(msg.id)?.(msg.result ?? {});
    pending.delete(msg.id);
    return;
  }
  const handler = handlers[msg.method];
  const result = handler ? await handler(msg.params ?? {}) : null;
  if (msg.id !== undefined) send({ id: msg.id, result: result ?? null });
}

process.stdin.on("data", (chunk) => {
  buffer = Buffer.concat([buffer, chunk]);
  for (;;) {
    const headerEnd = buffer.indexOf("\r\n\r\n");
    if (headerEnd < 0) return;
    const length = Number(/Content-Length: (\d+)/i.exec(buffer.subarray(0, headerEnd).toString())[1]);
    if (buffer.length < headerEnd + 4 + length) return;
    const body = buffer.subarray(headerEnd + 4, headerEnd + 4 + length).toString("utf8");
    buffer = buffer.subarray(headerEnd + 4 + length);
    void dispatch(JSON.parse(body));
  }
});
