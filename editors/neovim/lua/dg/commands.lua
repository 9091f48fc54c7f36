--- dg.commands: :DgFill, :DgRewrite, :DgToggle and :DgStatus.
local status = require("dg.status")
local text = require("dg.text")

local M = {}

local api = vim.api
local ERROR, WARN, INFO = vim.log.levels.ERROR, vim.log.levels.WARN, vim.log.levels.INFO

local function attached_client(bufnr)
  local client = vim.lsp.get_clients({ name = "dg", bufnr = bufnr })[1]
  if not client then
    vim.notify("dg: no dg-lsp client is attached to this buffer", ERROR)
  end
  return client
end

local function line_text(bufnr, row)
  return api.nvim_buf_get_lines(bufnr, row, row + 1, false)[1] or ""
end

--- The last command the server's confidence gate withheld ({client, bufnr, command, argument}), for
--- :DgApplyAnyway; its argument carries the buffer's version, so a changed buffer is refused.
local withheld = nil

--- workspace/executeCommand `command` with one argument; the server edits the buffer itself
--- through workspace/applyEdit, so only a refusal or an error needs a message.
local function execute(client, bufnr, command, argument)
  local params = { command = command, arguments = { argument } }
  local version = vim.lsp.util.buf_versions[bufnr]
  client:request("workspace/executeCommand", params, function(err, result)
    if err then
      vim.notify(("dg: %s failed: %s"):format(command, err.message or vim.inspect(err)), ERROR)
    elseif type(result) == "table" and result.applied == false and result.reason == "low confidence" then
      local again = vim.deepcopy(argument)
      -- pinned to the document the fill was computed for (the server says which), so an edit or a reopen in
      -- between is refused instead of landing at stale positions
      again.textDocument.version, again.documentOpen, again.force = result.version or version, result.documentOpen, true
      withheld = { client = client, bufnr = bufnr, command = command, argument = again }
      vim.notify(("dg: %s withheld: confidence %.2f is below minConfidence %.2f (:DgApplyAnyway applies it)")
        :format(command, result.confidence or 0, result.minConfidence or 0), WARN)
    elseif type(result) == "table" and result.applied == false then
      vim.notify(("dg: %s not applied: %s"):format(command, result.reason or "no reason given"), WARN)
    end
  end, bufnr)
end

--- :DgApplyAnyway: run the command the confidence gate last withheld again, with force (the same inputs give
--- the same fill); refused by the server if the buffer changed since.
function M.apply_anyway()
  if not withheld then
    vim.notify("dg: no fill was withheld", INFO)
    return
  end
  local w = withheld
  withheld = nil
  execute(w.client, w.bufnr, w.command, w.argument)
end

--- :DgFill: fill the hole at the cursor.
function M.fill()
  local bufnr = api.nvim_get_current_buf()
  local client = attached_client(bufnr)
  if not client then
    return
  end
  local cursor = api.nvim_win_get_cursor(0)
  local row = cursor[1] - 1
  local character = text.lsp_character(line_text(bufnr, row), cursor[2], client.offset_encoding)
  execute(client, bufnr, "dg.fillHole", {
    textDocument = { uri = vim.uri_from_bufnr(bufnr) },
    position = { line = row, character = character },
  })
end

--- The LSP range a :[range]DgRewrite covers: the characters of a charwise visual selection when the
--- command was given the lines of the last one ('<,'> from `v`), else the whole lines line1..line2.
---@param bufnr integer
---@param line1 integer 1-based
---@param line2 integer 1-based
---@param encoding string
---@return table lsp.Range
function M.rewrite_range(bufnr, line1, line2, encoding)
  local vstart = api.nvim_buf_get_mark(bufnr, "<")
  local vend = api.nvim_buf_get_mark(bufnr, ">")
  local last_line = line_text(bufnr, line2 - 1)
  if vim.fn.visualmode() == "v" and vstart[1] == line1 and vend[1] == line2 then
    local first_line = line_text(bufnr, line1 - 1)
    -- '> marks the first byte of the last selected character; the LSP end is exclusive.
    local end_col = math.min(vend[2], #last_line)
    if end_col < #last_line then
      local char = vim.fn.strpart(last_line, end_col, 1, true)
      end_col = end_col + math.max(#char, 1)
    end
    if vim.o.selection == "exclusive" then
      end_col = math.min(vend[2], #last_line)
    end
    return {
      start = { line = line1 - 1, character = text.lsp_character(first_line, vstart[2], encoding) },
      ["end"] = { line = line2 - 1, character = text.lsp_character(last_line, end_col, encoding) },
    }
  end
  return {
    start = { line = line1 - 1, character = 0 },
    ["end"] = { line = line2 - 1, character = text.lsp_character(last_line, #last_line, encoding) },
  }
end

--- What to send as a rewrite's instruction: `text` trimmed, or nil when there is none (a plain re-fill).
---@param text any
---@return string|nil
function M.instruction(text)
  if type(text) ~= "string" then
    return nil
  end
  local trimmed = vim.trim(text)
  return trimmed ~= "" and trimmed or nil
end

--- The one argument object of dg.rewriteSelection (docs/PROTOCOL.md); no `instruction` key without one.
---@param uri string
---@param range table lsp.Range
---@param widen boolean
---@param instruction string|nil
---@return table
function M.rewrite_argument(uri, range, widen, instruction)
  return { textDocument = { uri = uri }, range = range, widen = widen, instruction = M.instruction(instruction) }
end

--- :[range]DgRewrite[!] [instruction]: rewrite the range (with ! the server may widen it to the enclosing
--- node), following the instruction when one is given. Also the Lua API: opts.line1/line2 (1-based, default
--- the cursor's line), opts.widen, opts.instruction.
---@param opts table|nil
function M.rewrite(opts)
  opts = opts or {}
  local bufnr = api.nvim_get_current_buf()
  local client = attached_client(bufnr)
  if not client then
    return
  end
  local row = api.nvim_win_get_cursor(0)[1]
  local line1 = opts.line1 or row
  local line2 = opts.line2 or line1
  local instruction = opts.instruction
  if instruction == nil then
    instruction = opts.args
  end
  local range = M.rewrite_range(bufnr, line1, line2, client.offset_encoding)
  local widen = opts.bang == true or opts.widen == true
  local argument = M.rewrite_argument(vim.uri_from_bufnr(bufnr), range, widen, instruction)
  execute(client, bufnr, "dg.rewriteSelection", argument)
end

--- :DgStatus: what the server last said, and where this buffer stands.
---@param enabled boolean
---@param drafts boolean
function M.show_status(enabled, drafts)
  local st, client = status.get(0)
  if not client then
    vim.notify("dg: no dg-lsp client is running (see :checkhealth dg)", WARN)
    return
  end
  st = st or {}
  local bufnr = api.nvim_get_current_buf()
  local attached = client.attached_buffers[bufnr] == true
  local cmd = type(client.config.cmd) == "table" and table.concat(client.config.cmd, " ") or "custom cmd"
  local latency = type(st.lastLatencyMs) == "number" and ("%.0f ms"):format(st.lastLatencyMs) or "-"
  local lines = {
    ("dg: %s%s"):format(st.state or "starting", enabled and "" or " (toggled off)"),
    ("  message:   %s"):format(st.message or "-"),
    ("  model:     %s"):format(st.model or "-"),
    ("  latency:   %s"):format(latency),
    ("  client:    %d (%s)"):format(client.id, cmd),
    ("  buffer:    %s"):format(attached and "attached" or "not attached"),
    ("  inline:    %s"):format(
      vim.lsp.inline_completion.is_enabled({ bufnr = bufnr }) and "enabled" or "disabled"
    ),
    ("  drafts:    %s"):format(drafts and "shown" or "off"),
  }
  vim.notify(table.concat(lines, "\n"), INFO)
end

return M
