-- Next-edit logic without a server: `nvim --clean --headless -l tests/test_nextedit.lua` (exit 1 on failure).
-- The drawing (dg.nextedit.view) against Neovim's own apply_text_edits, and the controller (dg.nextedit) with a
-- recording stand-in for the LSP client.
local H = dofile(vim.fn.fnamemodify(debug.getinfo(1, "S").source:sub(2), ":p:h") .. "/harness.lua")
local test, eq, scratch = H.test, H.eq, H.scratch
local function edit(l1, c1, l2, c2, new)
  return { text = new, range = { start = { line = l1, character = c1 }, ["end"] = { line = l2, character = c2 } } }
end

local view = require("dg.nextedit.view")
local HL = { delete = "D", add = "A" }

-- Each case: buffer lines, edits (utf-16), the marks expected, the rows covered.
local CASES = {
  {
    name = "a word replaced inside a line",
    lines = { "x = foo(a)", "y" },
    edits = { edit(0, 4, 0, 7, "bar") },
    marks = {
      { 0, 4, { end_row = 0, end_col = 7, hl_group = "D" } },
      { 0, 7, { virt_text = { { "bar", "A" } }, virt_text_pos = "inline" } },
    },
    rows = { 0, 0 },
  },
  {
    name = "a minimal edit inside a word is drawn as the whole word",
    lines = { "    return width * height" },
    edits = { edit(0, 14, 0, 16, "e") },
    marks = {
      { 0, 11, { end_row = 0, end_col = 16, hl_group = "D" } },
      { 0, 16, { virt_text = { { "wide", "A" } }, virt_text_pos = "inline" } },
    },
    rows = { 0, 0 },
  },
  {
    name = "a word changed inside a longer edit: the whole word, the rest left alone",
    lines = { "    return width * height" },
    edits = { edit(0, 4, 0, 25, "return wide * height") },
    marks = {
      { 0, 11, { end_row = 0, end_col = 16, hl_group = "D" } },
      { 0, 16, { virt_text = { { "wide", "A" } }, virt_text_pos = "inline" } },
    },
    rows = { 0, 0 },
  },
  {
    name = "text inserted inside a line",
    lines = { "f(a)" },
    edits = { edit(0, 3, 0, 3, ", b") },
    marks = { { 0, 3, { virt_text = { { ", b", "A" } }, virt_text_pos = "inline" } } },
    rows = { 0, 0 },
  },
  {
    name = "characters removed",
    lines = { "return  x" },
    edits = { edit(0, 6, 0, 7, "") },
    marks = { { 0, 7, { end_row = 0, end_col = 8, hl_group = "D" } } }, -- one of the two spaces (looks the same)
    rows = { 0, 0 },
  },
  {
    name = "whole lines inserted below a line",
    lines = { "a = 1", "c = 3" },
    edits = { edit(1, 0, 1, 0, "b = 2\nb2 = 2\n") },
    marks = { { 0, 0, { virt_lines = { { { "b = 2", "A" } }, { { "b2 = 2", "A" } } } } } },
    rows = { 0, 0 },
  },
  {
    name = "a line inserted above the first",
    lines = { "a = 1" },
    edits = { edit(0, 0, 0, 0, "import os\n") },
    marks = { { 0, 0, { virt_lines = { { { "import os", "A" } } }, virt_lines_above = true } } },
    rows = { 0, 0 },
  },
  {
    name = "a line removed",
    lines = { "a", "bb", "c" },
    edits = { edit(1, 0, 2, 0, "") },
    marks = { { 1, 0, { end_row = 1, end_col = 2, hl_group = "D", hl_eol = true } } },
    rows = { 1, 1 },
  },
  {
    name = "two lines replaced by three",
    lines = { "def f(a):", "    return a", "x" },
    edits = { edit(1, 4, 1, 12, "b = a\n    c = b\n    return c") },
    marks = {
      { 1, 0, { end_row = 1, end_col = 12, hl_group = "D", hl_eol = true } },
      { 1, 0, { virt_lines = { { { "    b = a", "A" } }, { { "    c = b", "A" } }, { { "    return c", "A" } } } } },
    },
    rows = { 1, 1 },
  },
  {
    name = "non-ASCII: utf-16 positions, marks on character boundaries",
    lines = { "é = fé(1) + 😀x" },
    edits = { edit(0, 4, 0, 6, "gé"), edit(0, 12, 0, 14, "y") },
    marks = { -- "fé" -> "gé": whole words
      { 0, 5, { end_row = 0, end_col = 8, hl_group = "D" } },
      { 0, 8, { virt_text = { { "gé", "A" } }, virt_text_pos = "inline" } },
      { 0, 14, { end_row = 0, end_col = 19, hl_group = "D" } }, -- "😀x" -> "yx": the new word is "yx"
      { 0, 19, { virt_text = { { "yx", "A" } }, virt_text_pos = "inline" } },
    },
    rows = { 0, 0 },
  },
  {
    name = "a line appended after the last (past the final newline)",
    lines = { "a", "b" },
    edits = { edit(2, 0, 2, 0, "c\n") },
    marks = { { 1, 0, { virt_lines = { { { "c", "A" } } } } } },
    rows = { 1, 1 },
    -- the document "a\nb\n" + "c\n"; Neovim's apply_text_edits leaves an extra empty line after "c"
    applied = { "a", "b", "c" },
  },
  {
    name = "the last line removed (through the final newline)",
    lines = { "a", "b", "c" },
    edits = { edit(2, 0, 3, 0, "") },
    marks = { { 2, 0, { end_row = 2, end_col = 1, hl_group = "D", hl_eol = true } } },
    rows = { 2, 2 },
  },
  {
    name = "edits on two rows",
    lines = { "n = 1", "print(n)", "m = n" },
    edits = { edit(0, 0, 0, 1, "count"), edit(1, 6, 1, 7, "count"), edit(2, 4, 2, 5, "count") },
    rows = { 0, 2 },
  },
}

for _, case in ipairs(CASES) do
  test("view: " .. case.name, function()
    local layout = view.layout(case.lines, case.edits, "utf-16", HL)
    if case.marks then
      eq(case.marks, layout.marks, "marks")
    end
    eq(case.rows, { layout.first_row, layout.last_row }, "rows")
    -- view.apply (the tests' oracle) agrees with Neovim's own apply_text_edits
    local bufnr = scratch(case.lines)
    vim.lsp.util.apply_text_edits(vim.tbl_map(function(e)
      return { range = vim.deepcopy(e.range), newText = e.text }
    end, case.edits), bufnr, "utf-16")
    local applied = case.applied or vim.api.nvim_buf_get_lines(bufnr, 0, -1, false)
    eq(applied, view.apply(case.lines, case.edits, "utf-16"), "applied")
    -- and every mark can be placed
    local ns = vim.api.nvim_create_namespace("test.nextedit")
    vim.api.nvim_buf_set_lines(bufnr, 0, -1, false, case.lines)
    for _, m in ipairs(layout.marks) do
      vim.api.nvim_buf_set_extmark(bufnr, ns, m[1], m[2], m[3])
    end
  end)
end

test("view: the same edit in utf-8 and utf-32", function()
  local lines = { "é = fé(1)" }
  local utf8 = view.layout(lines, { edit(0, 5, 0, 6, "g") }, "utf-8", HL).marks
  local utf32 = view.layout(lines, { edit(0, 4, 0, 5, "g") }, "utf-32", HL).marks
  eq({ 0, 5, { end_row = 0, end_col = 8, hl_group = "D" } }, utf8[1]) -- "fé" -> "gé", in whole words
  eq(utf8, utf32)
end)

-- --- the controller, with a stand-in client ------------------------------------------------------------------

local nextedit = require("dg.nextedit")
local dg = require("dg")
local config = require("dg.config")

--- A recording client; vim.lsp lookups answer it while `fn` runs.
local function with_client(fn)
  local sent = { requests = {}, notifications = {}, commands = {}, cancelled = {}, notes = {} }
  local next_id = 0
  local client = {
    id = 42,
    name = "dg",
    offset_encoding = "utf-16",
    server_capabilities = { experimental = { dgNextEdit = true } },
    request = function(_, method, params, handler)
      next_id = next_id + 1
      table.insert(sent.requests, { id = next_id, method = method, params = params, handler = handler })
      return true, next_id
    end,
    notify = function(_, method, params)
      table.insert(sent.notifications, { method = method, params = params })
    end,
    exec_cmd = function(_, command, ctx)
      table.insert(sent.commands, { command = command, bufnr = ctx.bufnr })
    end,
    cancel_request = function(_, id)
      table.insert(sent.cancelled, id)
    end,
  }
  local real = { vim.lsp.get_clients, vim.lsp.get_client_by_id, vim.notify }
  vim.lsp.get_clients = function()
    return { client }
  end
  vim.lsp.get_client_by_id = function()
    return client
  end
  vim.notify = function(msg, level)
    table.insert(sent.notes, { msg, level })
  end
  local ok, err = pcall(fn, sent)
  vim.lsp.get_clients, vim.lsp.get_client_by_id, vim.notify = unpack(real)
  assert(ok, err)
  return sent
end

--- Ask for a proposal in `bufnr` and answer it with `edits` (for the version asked about).
local function propose(sent, bufnr, edits)
  assert(nextedit.request(bufnr, nextedit.INVOKED))
  local req = sent.requests[#sent.requests]
  local version = req.params.textDocument.version
  local items = vim.tbl_map(function(e)
    local uri = req.params.textDocument.uri
    return vim.tbl_extend("force", e, {
      textDocument = { uri = uri, version = version },
      command = { title = "Accept next edit", command = "dg.acceptNextEdit", arguments = { { uri = uri, version = version, documentOpen = 1, id = "p1" } } },
    })
  end, edits)
  req.handler(nil, { edits = items }, { request_id = req.id, client_id = 42, method = req.method })
  return req
end

local function marks(bufnr)
  return vim.api.nvim_buf_get_extmarks(bufnr, nextedit.ns, 0, -1, { details = true })
end

local function buf_maps(bufnr, mode)
  local out = {}
  for _, m in ipairs(vim.api.nvim_buf_get_keymap(bufnr, mode)) do
    out[m.lhs] = m.desc or m.rhs or true
  end
  return out
end

dg.config = config.resolve({})
nextedit.configure(dg.config)

test("request: the buffer's LSP version, the cursor, the trigger kind", function()
  local bufnr = scratch({ "a = 1", "b = a" })
  vim.lsp.util.buf_versions[bufnr] = 7
  vim.api.nvim_win_set_cursor(0, { 2, 3 })
  with_client(function(sent)
    assert(nextedit.request(bufnr, nextedit.AUTOMATIC))
    eq({
      textDocument = { uri = vim.uri_from_bufnr(bufnr), version = 7 },
      position = { line = 1, character = 3 },
      context = { triggerKind = 2 },
    }, sent.requests[1].params)
    eq("textDocument/copilotInlineEdit", sent.requests[1].method)
    assert(nextedit.request(bufnr, nextedit.INVOKED)) -- the newer request cancels the older
    eq({ 1 }, sent.cancelled)
  end)
end)

test("shown: marks, a notification, Tab mapped over the old buffer mapping; the cursor stays", function()
  local bufnr = scratch({ "n = 1", "print(n)" })
  vim.lsp.util.buf_versions[bufnr] = 3
  vim.api.nvim_win_set_cursor(0, { 1, 0 })
  vim.keymap.set("i", "<Tab>", function() return "OLD" end, { buffer = bufnr, expr = true, desc = "old tab" })
  with_client(function(sent)
    propose(sent, bufnr, { edit(1, 6, 1, 7, "count") })
    eq(2, #marks(bufnr))
    eq({ 1, 0 }, vim.api.nvim_win_get_cursor(0))
    eq("textDocument/didShowInlineEdit", sent.notifications[1].method)
    eq("count", sent.notifications[1].params.item.text)
    eq("dg: accept the next edit", buf_maps(bufnr, "i")["<Tab>"])
    eq("dg: accept the next edit", buf_maps(bufnr, "n")["<Tab>"])
    eq("dg: dismiss the next edit", buf_maps(bufnr, "n")["<Esc>"])
    eq(true, nextedit.hide(bufnr))
    eq(0, #marks(bufnr))
    eq("old tab", buf_maps(bufnr, "i")["<Tab>"], "the old mapping is back")
    eq(nil, buf_maps(bufnr, "n")["<Tab>"])
    eq(nil, buf_maps(bufnr, "n")["<Esc>"])
    eq(false, nextedit.hide(bufnr))
  end)
end)

test("accept: all edits, one undo step, then the command", function()
  local bufnr = scratch({ "n = 1", "print(n)", "m = n" })
  vim.bo[bufnr].undolevels = 100
  vim.lsp.util.buf_versions[bufnr] = 5
  local before = vim.api.nvim_buf_get_lines(bufnr, 0, -1, false)
  with_client(function(sent)
    local edits = { edit(0, 0, 0, 1, "count"), edit(1, 6, 1, 7, "count"), edit(2, 4, 2, 5, "count") }
    propose(sent, bufnr, edits)
    eq(true, nextedit.accept(bufnr))
    eq({ "count = 1", "print(count)", "m = count" }, vim.api.nvim_buf_get_lines(bufnr, 0, -1, false))
    eq(1, #sent.commands, "one command for the proposal")
    eq("dg.acceptNextEdit", sent.commands[1].command.command)
    eq({ uri = vim.uri_from_bufnr(bufnr), version = 5, documentOpen = 1, id = "p1" }, sent.commands[1].command.arguments[1])
    eq(nil, nextedit.get(bufnr))
    eq(0, #marks(bufnr))
    vim.cmd("silent undo")
    eq(before, vim.api.nvim_buf_get_lines(bufnr, 0, -1, false), "one undo restores")
  end)
end)

test("stale: an answer for an older version is not shown; a changed buffer is not edited", function()
  local bufnr = scratch({ "a = 1" })
  vim.lsp.util.buf_versions[bufnr] = 1
  with_client(function(sent)
    assert(nextedit.request(bufnr, nextedit.INVOKED))
    vim.lsp.util.buf_versions[bufnr] = 2 -- the user typed while the server worked
    local req = sent.requests[1]
    req.handler(nil, { edits = { edit(0, 0, 0, 1, "b") } }, { request_id = req.id, client_id = 42 })
    eq(nil, nextedit.get(bufnr))
    eq(0, #sent.notifications)
    propose(sent, bufnr, { edit(0, 0, 0, 1, "b") })
    assert(nextedit.get(bufnr))
    vim.api.nvim_buf_set_lines(bufnr, 0, -1, false, { "a = 11" })
    vim.lsp.util.buf_versions[bufnr] = 3
    eq(false, nextedit.accept(bufnr))
    eq({ "a = 11" }, vim.api.nvim_buf_get_lines(bufnr, 0, -1, false))
    eq(0, #sent.commands)
    assert(sent.notes[#sent.notes][1]:find("buffer changed", 1, true))
  end)
end)

test("superseded answers and edits for another version are dropped", function()
  local bufnr = scratch({ "a = 1" })
  vim.lsp.util.buf_versions[bufnr] = 4
  with_client(function(sent)
    assert(nextedit.request(bufnr, nextedit.AUTOMATIC))
    assert(nextedit.request(bufnr, nextedit.AUTOMATIC))
    local old = sent.requests[1]
    old.handler(nil, { edits = { edit(0, 0, 0, 1, "b") } }, { request_id = old.id, client_id = 42 })
    eq(nil, nextedit.get(bufnr))
    local new = sent.requests[2]
    local wrong = edit(0, 0, 0, 1, "b")
    wrong.textDocument = { uri = "x", version = 3 }
    new.handler(nil, { edits = { wrong } }, { request_id = new.id, client_id = 42 })
    eq(nil, nextedit.get(bufnr))
    eq("an edit for another version", nextedit.refusal(bufnr, 4, { wrong }))
    eq("nothing to propose", nextedit.refusal(bufnr, 4, {}))
  end)
end)

test("none while inline ghost text is shown; Tab then falls through to it", function()
  local bufnr = scratch({ "x = " })
  vim.lsp.util.buf_versions[bufnr] = 1
  local ghost = vim.api.nvim_create_namespace("nvim.lsp.inline_completion")
  with_client(function(sent)
    vim.api.nvim_buf_set_extmark(bufnr, ghost, 0, 4, { virt_text = { { "42", "ComplHint" } } })
    propose(sent, bufnr, { edit(0, 0, 0, 1, "y") })
    eq(nil, nextedit.get(bufnr), "not shown over ghost text")
    vim.api.nvim_buf_clear_namespace(bufnr, ghost, 0, -1)
    propose(sent, bufnr, { edit(0, 0, 0, 1, "y") })
    assert(nextedit.get(bufnr))
    vim.api.nvim_buf_set_extmark(bufnr, ghost, 0, 4, { virt_text = { { "42", "ComplHint" } } })
    eq(false, nextedit.accept(bufnr, true), "the key leaves it to the ghost text")
    eq(nil, nextedit.get(bufnr))
    eq({ "x = " }, vim.api.nvim_buf_get_lines(bufnr, 0, -1, false))
    vim.api.nvim_buf_clear_namespace(bufnr, ghost, 0, -1)
  end)
end)

test("while ghost text is being computed the request waits for it, and is sent if none is shown", function()
  local bufnr = scratch({ "a = 1" })
  vim.lsp.util.buf_versions[bufnr] = 2
  with_client(function(sent)
    nextedit.attach(bufnr)
    local client = vim.lsp.get_clients()[1]
    client.requests = { [9] = { type = "pending", bufnr = bufnr, method = "textDocument/inlineCompletion" } }
    nextedit.ask_if_idle(bufnr)
    eq(0, #sent.requests, "not while the ghost text's request runs")
    client.requests = {}
    vim.api.nvim_exec_autocmds("LspRequest", { buffer = bufnr, data = { client_id = 42, request_id = 9,
      request = { type = "complete", bufnr = bufnr, method = "textDocument/inlineCompletion" } } })
    vim.wait(1000, function()
      return #sent.requests > 0
    end)
    eq(1, #sent.requests, "asked once the ghost text's answer came with nothing to show")
    eq(2, sent.requests[1].params.context.triggerKind)
    nextedit.detach(bufnr)
  end)
end)

test("indicator only: a sign on the first row, no keys; the command still accepts", function()
  local bufnr = scratch({ "a", "b = 1", "c" })
  vim.lsp.util.buf_versions[bufnr] = 1
  nextedit.opts.indicator_only = true
  local ok, err = pcall(with_client, function(sent)
    propose(sent, bufnr, { edit(1, 4, 1, 5, "2") })
    local m = marks(bufnr)
    eq(1, #m)
    eq(1, m[1][2])
    eq("»", vim.trim(m[1][4].sign_text))
    eq(nil, buf_maps(bufnr, "n")["<Tab>"])
    eq(true, nextedit.accept(bufnr))
    eq({ "a", "b = 2", "c" }, vim.api.nvim_buf_get_lines(bufnr, 0, -1, false))
  end)
  nextedit.opts.indicator_only = false
  assert(ok, err)
end)

test("moving away from the rows dismisses; moving on them does not", function()
  local bufnr = scratch({ "1", "2", "3", "4", "5", "6" })
  vim.lsp.util.buf_versions[bufnr] = 1
  vim.api.nvim_win_set_cursor(0, { 2, 0 })
  with_client(function(sent)
    propose(sent, bufnr, { edit(2, 0, 2, 1, "three") })
    vim.api.nvim_win_set_cursor(0, { 4, 0 })
    nextedit.on_cursor(bufnr)
    assert(nextedit.get(bufnr), "one row of slack")
    vim.api.nvim_win_set_cursor(0, { 6, 0 })
    nextedit.on_cursor(bufnr)
    eq(nil, nextedit.get(bufnr))
  end)
end)

test("config: next-edit settings and keys are checked", function()
  local cfg, errors = config.resolve({ settings = { nextEdit = "yes", nextEditDebounceMs = -1, nextEditIndicatorOnly = true } })
  eq(2, #errors, vim.inspect(errors))
  eq(nil, cfg.settings.nextEdit)
  eq(true, cfg.settings.nextEditIndicatorOnly)
  eq("<Tab>", cfg.keymaps.next_edit_accept)
  cfg = config.resolve({ keymaps = { next_edit_accept = "<C-l>", next_edit_dismiss = false } })
  nextedit.configure(cfg)
  eq("<C-l>", nextedit.opts.accept_key)
  eq(false, nextedit.opts.dismiss_key)
  eq(true, nextedit.opts.enabled)
  nextedit.configure(config.resolve({ settings = { nextEdit = false, nextEditDebounceMs = 50 } }))
  eq(false, nextedit.opts.enabled)
  eq(50, nextedit.opts.debounce_ms)
  nextedit.configure(dg.config)
end)

H.finish()
