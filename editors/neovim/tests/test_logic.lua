-- Pure-logic tests of the dg plugin: `nvim --clean --headless -l tests/test_logic.lua` (exit 1 on failure).
-- No server: LSP pieces are replaced by small stubs where a function needs one.
local H = dofile(vim.fn.fnamemodify(debug.getinfo(1, "S").source:sub(2), ":p:h") .. "/harness.lua")
local test, eq, scratch = H.test, H.eq, H.scratch

local text = require("dg.text")

test("first_word", function()
  eq("foo", text.first_word("foo bar"))
  eq("  foo", text.first_word("  foo(bar)"))
  eq("(", text.first_word("(x)"))
  eq("):", text.first_word("): pass"))
  eq("\n    return", text.first_word("\n    return a + b"))
  eq("café", text.first_word("café au lait"))
  eq("日本語", text.first_word("日本語 x"))
  eq("   ", text.first_word("   "))
  eq("", text.first_word(""))
  eq("a_b1", text.first_word("a_b1.c"))
end)

test("first_line", function()
  eq("return a", text.first_line("return a\nfoo"))
  eq("\n    return a", text.first_line("\n    return a\n"))
  eq("x", text.first_line("x"))
  eq("", text.first_line(""))
end)

test("format_status", function()
  eq("dg: off", text.format_status({ state = "ready" }, false))
  eq("dg: starting", text.format_status(nil, true))
  eq("dg: loading", text.format_status({ state = "loading", lastLatencyMs = vim.NIL }, true))
  eq("dg: ready 123ms", text.format_status({ state = "ready", lastLatencyMs = 122.6 }, true))
  eq("dg: busy 7ms", text.format_status({ state = "busy", lastLatencyMs = 7 }, true))
  eq("dg: error", text.format_status({ state = "error", lastLatencyMs = 5 }, true))
end)

test("positions in every encoding", function()
  local line = "é😀x" -- bytes: 2 + 4 + 1; utf-16 units: 1 + 2 + 1; code points: 3
  eq(6, text.byte_col(line, 3, "utf-16"))
  eq(6, text.byte_col(line, 2, "utf-32"))
  eq(6, text.byte_col(line, 6, "utf-8"))
  eq(#line, text.byte_col(line, 99, "utf-16"))
  eq(3, text.lsp_character(line, 6, "utf-16"))
  eq(2, text.lsp_character(line, 6, "utf-32"))
  eq(4, text.lsp_character(line, #line, "utf-16"))
  eq({ 0, 7 }, { text.end_of_insert(0, 4, "abc") })
  eq({ 2, 2 }, { text.end_of_insert(0, 4, "abc\n\nde") })
end)

local config = require("dg.config")

test("config defaults and overrides", function()
  local cfg, errors = config.resolve(nil)
  eq({}, errors)
  eq({ "dg-lsp" }, cfg.cmd)
  eq("<Tab>", cfg.keymaps.accept)
  eq(false, cfg.drafts)
  local keymaps = { accept = "<C-y>", dismiss = false }
  cfg, errors = config.resolve({ cmd = { "py", "-m", "dg_lsp" }, keymaps = keymaps })
  eq({}, errors)
  eq({ "py", "-m", "dg_lsp" }, cfg.cmd)
  eq("<C-y>", cfg.keymaps.accept)
  eq(false, cfg.keymaps.dismiss)
  eq("<M-Right>", cfg.keymaps.accept_word)
  cfg, errors = config.resolve({ cmd_env = { A = "1" } })
  eq({}, errors)
  eq({ A = "1" }, cfg.cmd_env)
end)

test("config errors keep defaults", function()
  local cfg, errors = config.resolve({ cmd = {}, bogus = 1, keymaps = { nope = "x", accept = 3 } })
  eq(4, #errors, "errors " .. vim.inspect(errors))
  eq({ "dg-lsp" }, cfg.cmd)
  eq("<Tab>", cfg.keymaps.accept)
end)

test("drafts follow the setting or ask the server for it", function()
  eq(true, config.resolve({ settings = { drafts = true } }).drafts)
  local cfg = config.resolve({ drafts = true })
  eq(true, cfg.settings.drafts)
  eq(false, config.resolve({ drafts = false, settings = { drafts = true } }).drafts)
end)

test("watch_files: a boolean or auto", function()
  eq("auto", config.resolve(nil).watch_files)
  local cfg, errors = config.resolve({ watch_files = "sometimes" })
  eq("auto", cfg.watch_files)
  eq(1, #errors)
  eq(false, config.watch_files(config.resolve({ watch_files = false }).watch_files))
  eq(true, config.watch_files(true))
  local sysname = vim.uv.os_uname().sysname
  local native = sysname == "Darwin" or sysname == "Windows_NT"
  eq(native or vim.fn.executable("inotifywait") == 1, config.watch_files("auto"))
end)

test("empty settings go on the wire as an object", function()
  eq("{}", vim.json.encode(config.wire_settings({})))
  eq('{"steps":8}', vim.json.encode(config.wire_settings({ steps = 8 })))
end)

local commands = require("dg.commands")

test("rewrite range: whole lines", function()
  local bufnr = scratch({ "a = 1", "bé = 2", "c = 3" })
  vim.cmd("normal! \27") -- no visual mode used yet in this buffer's marks
  local r = commands.rewrite_range(bufnr, 1, 2, "utf-16")
  eq({ start = { line = 0, character = 0 }, ["end"] = { line = 1, character = 6 } }, r)
  r = commands.rewrite_range(bufnr, 2, 2, "utf-8")
  eq({ start = { line = 1, character = 0 }, ["end"] = { line = 1, character = 7 } }, r)
end)

test("rewrite range: charwise selection", function()
  local bufnr = scratch({ "x = fé(1)", "y = 2" })
  vim.api.nvim_win_set_cursor(0, { 1, 4 })
  vim.cmd("normal! v3l\27") -- selects "fé(1" (é is one character)
  local r = commands.rewrite_range(bufnr, 1, 1, "utf-16")
  eq({ start = { line = 0, character = 4 }, ["end"] = { line = 0, character = 8 } }, r)
  -- A range that is not the last selection's lines is taken linewise.
  r = commands.rewrite_range(bufnr, 2, 2, "utf-16")
  eq({ start = { line = 1, character = 0 }, ["end"] = { line = 1, character = 5 } }, r)
end)

test("rewrite instruction: trimmed, and left out when blank", function()
  eq("make it async", commands.instruction("  make it async\t"))
  eq(nil, commands.instruction(""))
  eq(nil, commands.instruction("   "))
  eq(nil, commands.instruction(nil))
  local r = { start = { line = 0, character = 0 }, ["end"] = { line = 0, character = 3 } }
  local arg = commands.rewrite_argument("file:///a.py", r, false, " add types ")
  eq({ textDocument = { uri = "file:///a.py" }, range = r, widen = false, instruction = "add types" }, arg)
  arg = commands.rewrite_argument("file:///a.py", r, true, "")
  eq({ textDocument = { uri = "file:///a.py" }, range = r, widen = true }, arg)
  -- No key at all on the wire, not a null.
  eq(nil, vim.json.encode(arg):find("instruction", 1, true))
end)

--- Runs fn with a fake dg client attached: each workspace/executeCommand is recorded and answered with
--- `result`; vim.notify calls are recorded too. Returns the requests and the notes.
local function with_fake_client(result, fn)
  local requests, notes = {}, {}
  local client = {
    offset_encoding = "utf-16",
    request = function(_, method, params, handler)
      table.insert(requests, { method = method, params = params })
      handler(nil, result)
    end,
  }
  local real_get, real_notify = vim.lsp.get_clients, vim.notify
  vim.lsp.get_clients = function()
    return { client }
  end
  vim.notify = function(msg, level)
    table.insert(notes, { msg, level })
  end
  local ok, err = pcall(fn)
  vim.lsp.get_clients, vim.notify = real_get, real_notify
  assert(ok, err)
  return requests, notes
end

test(":DgRewrite takes free text as the instruction; ! still widens", function()
  local dg = require("dg")
  vim.g.loaded_dg = nil
  vim.cmd.runtime("plugin/dg.lua")
  eq("*", vim.api.nvim_get_commands({}).DgRewrite.nargs)
  dg.config = config.resolve({})
  local bufnr = scratch({ "def f(url):", "    return get(url)", "" })
  vim.cmd("normal! \27")
  local requests = with_fake_client({ applied = true, latencyMs = 3 }, function()
    vim.cmd("2DgRewrite make it   async | quickly")
    vim.cmd("2DgRewrite!")
  end)
  dg.config = nil
  local uri = vim.uri_from_bufnr(bufnr)
  local line2 = { start = { line = 1, character = 0 }, ["end"] = { line = 1, character = 19 } }
  eq("workspace/executeCommand", requests[1].method)
  eq({
    command = "dg.rewriteSelection",
    arguments = {
      { textDocument = { uri = uri }, range = line2, widen = false, instruction = "make it   async | quickly" },
    },
  }, requests[1].params)
  eq({ textDocument = { uri = uri }, range = line2, widen = true }, requests[2].params.arguments[1])
end)

test("require('dg').rewrite{instruction=...}: the cursor's line by default", function()
  local bufnr = scratch({ "a = 1", "b = [x for x in y]" })
  vim.cmd("normal! \27")
  vim.api.nvim_win_set_cursor(0, { 2, 3 })
  local requests = with_fake_client({ applied = true }, function()
    require("dg").rewrite({ instruction = "use a loop" })
    require("dg").rewrite({ line1 = 1, line2 = 2, widen = true })
  end)
  local arg = requests[1].params.arguments[1]
  eq({ start = { line = 1, character = 0 }, ["end"] = { line = 1, character = 18 } }, arg.range)
  eq("use a loop", arg.instruction)
  eq(false, arg.widen)
  arg = requests[2].params.arguments[1]
  eq({ textDocument = { uri = vim.uri_from_bufnr(bufnr) }, widen = true, range = {
    start = { line = 0, character = 0 },
    ["end"] = { line = 1, character = 18 },
  } }, arg)
end)

test("a refused instruction is shown with the server's reason", function()
  scratch({ "x = 1" })
  local reason = "this model's prompt format (fim) cannot take an instruction; use a chat-format checkpoint"
  local _, notes = with_fake_client({ applied = false, reason = reason, latencyMs = 1 }, function()
    require("dg").rewrite({ instruction = "make it async" })
  end)
  eq({ { "dg: dg.rewriteSelection not applied: " .. reason, vim.log.levels.WARN } }, notes)
end)

local inline = require("dg.inline")

local function with_item(item, fn)
  local real = vim.lsp.inline_completion.get
  vim.lsp.inline_completion.get = function(opts)
    if item and opts and opts.on_accept then
      opts.on_accept(item)
    end
    return item ~= nil
  end
  local ok, err = pcall(fn)
  vim.lsp.inline_completion.get = real
  assert(ok, err)
end

local function range(row, scol, ecol)
  return { start = { row = row, col = scol }, end_ = { row = row, col = ecol } }
end

test("accept word inserts one word and keeps the rest of the hole", function()
  scratch({ "x = ..." })
  vim.api.nvim_win_set_cursor(0, { 1, 4 })
  with_item({ insert_text = "foo(bar)", range = range(0, 4, 7), client_id = 1 }, function()
    eq(true, inline.accept_word())
  end)
  eq({ "x = foo..." }, vim.api.nvim_buf_get_lines(0, 0, -1, false))
  eq({ 1, 7 }, vim.api.nvim_win_get_cursor(0))
end)

test("accept line inserts the first line", function()
  scratch({ "def f():", "" })
  vim.api.nvim_win_set_cursor(0, { 2, 0 })
  with_item({ insert_text = "    a = 1\n    return a", client_id = 1 }, function()
    eq(true, inline.accept_line())
  end)
  eq({ "def f():", "    a = 1" }, vim.api.nvim_buf_get_lines(0, 0, -1, false))
end)

test("a partial accept that takes everything replaces the range", function()
  scratch({ "x = ..." })
  with_item({ insert_text = "foo", range = range(0, 4, 7), client_id = 1 }, function()
    eq(true, inline.accept_word())
  end)
  eq({ "x = foo" }, vim.api.nvim_buf_get_lines(0, 0, -1, false))
end)

test("nothing shown: the actions say so", function()
  scratch({ "" })
  with_item(nil, function()
    eq(false, inline.accept_word())
    eq(false, inline.accept_line())
    eq(false, inline.dismiss())
  end)
  eq(false, inline.select(1))
  eq(nil, inline.visible(0))
end)

test("visible reads the ghost text back", function()
  local bufnr = scratch({ "x = " })
  local ns = vim.api.nvim_create_namespace("nvim.lsp.inline_completion")
  vim.api.nvim_buf_set_extmark(bufnr, ns, 0, 4, {
    virt_text = { { "foo(", "ComplHint" } },
    virt_lines = { { { "  bar)", "ComplHint" }, { " (1/1)", "ComplHintMore" } } },
  })
  eq("foo(\n  bar)", inline.visible(bufnr))
  vim.api.nvim_buf_clear_namespace(bufnr, ns, 0, -1)
end)

local draft = require("dg.draft")

test("drafts draw at the hole, skip stale versions and clear when done", function()
  local bufnr = scratch({ "def f():", "    ", "" })
  local uri = vim.uri_from_bufnr(bufnr)
  local real_get, real_versions = vim.lsp.get_client_by_id, vim.lsp.util.buf_versions[bufnr]
  vim.lsp.get_client_by_id = function()
    return { attached_buffers = { [bufnr] = true }, offset_encoding = "utf-16" }
  end
  vim.lsp.util.buf_versions[bufnr] = 3
  draft.enabled = true
  local ok, err = pcall(function()
    local hole = { start = { line = 1, character = 4 }, ["end"] = { line = 1, character = 4 } }
    local ctx = { client_id = 1 }
    draft.on_draft(nil, { uri = uri, version = 3, text = "ret\nx", range = hole, done = false }, ctx)
    local marks = vim.api.nvim_buf_get_extmarks(bufnr, draft.ns, 0, -1, { details = true })
    eq(1, #marks)
    eq({ 1, 4 }, { marks[1][2], marks[1][3] })
    eq("ret", marks[1][4].virt_text[1][1])
    eq("x", marks[1][4].virt_lines[1][1][1])
    draft.on_draft(nil, { uri = uri, version = 2, text = "old", range = hole }, ctx)
    marks = vim.api.nvim_buf_get_extmarks(bufnr, draft.ns, 0, -1, { details = true })
    eq("ret", marks[1][4].virt_text[1][1], "stale draft ignored")
    draft.on_draft(nil, { uri = uri, version = 3, text = "return", range = hole, done = true }, ctx)
    eq(0, #vim.api.nvim_buf_get_extmarks(bufnr, draft.ns, 0, -1, {}))
  end)
  vim.lsp.get_client_by_id, vim.lsp.util.buf_versions[bufnr] = real_get, real_versions
  assert(ok, err)
end)

test("setup on a Neovim without inline completion: one ERROR, nothing started", function()
  local dg = require("dg")
  local saved = package.loaded["vim.lsp.inline_completion"]
  package.loaded["vim.lsp.inline_completion"] = nil
  package.preload["vim.lsp.inline_completion"] = function()
    error("not in this version")
  end
  local notes = {}
  local real_notify = vim.notify
  vim.notify = function(msg, level)
    table.insert(notes, { msg, level })
  end
  local ok, err = pcall(function()
    eq(false, dg.setup({}))
  end)
  vim.notify = real_notify
  package.preload["vim.lsp.inline_completion"] = nil
  package.loaded["vim.lsp.inline_completion"] = saved
  assert(ok, err)
  eq(1, #notes)
  eq(vim.log.levels.ERROR, notes[1][2])
  assert(notes[1][1]:find("0.12", 1, true), notes[1][1])
  eq(nil, dg.config)
end)

test("statusline follows dg/status", function()
  local dg = require("dg")
  local status = require("dg.status")
  eq("", dg.statusline(), "before setup")
  dg.config = config.resolve({})
  local real = vim.lsp.get_clients
  vim.lsp.get_clients = function()
    return { { id = 7, attached_buffers = {} } }
  end
  local ok, err = pcall(function()
    eq("dg: starting", dg.statusline())
    local ctx = { client_id = 7 }
    status.on_status(nil, { state = "loading", message = "", model = vim.NIL, lastLatencyMs = vim.NIL }, ctx)
    eq("dg: loading", dg.statusline())
    status.on_status(nil, { state = "ready", message = "", model = "m", lastLatencyMs = 41.7 }, ctx)
    eq("dg: ready 42ms", dg.statusline())
    dg.enabled = false
    eq("dg: off", dg.statusline())
  end)
  vim.lsp.get_clients = real
  dg.config, dg.enabled = nil, true
  assert(ok, err)
end)

H.finish()
