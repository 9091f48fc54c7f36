--- dg.nextedit: next-edit proposals (textDocument/copilotInlineEdit): ask after a pause, draw, accept, dismiss.
---
--- After a change, nextEditDebounceMs of inactivity, the plugin asks the server for the follow-up edit around
--- the cursor and draws the answer with extmarks (dg.nextedit.view): removed text struck through, added text as
--- inline virtual text or virtual lines; the cursor never moves. At most one proposal per buffer; none while the
--- completion menu or inline ghost text is shown. The accept key (default <Tab>, Normal and Insert mode) exists
--- only while a proposal is shown, so otherwise the key does what it did. Accepting applies every edit as one
--- undo step, only if the buffer is still at the proposal's version, then runs the edit's command.
local keys = require("dg.nextedit.keys")
local policy = require("dg.nextedit.policy")
local view = require("dg.nextedit.view")

local M = {}

local api = vim.api
local util = vim.lsp.util
local WARN, INFO = vim.log.levels.WARN, vim.log.levels.INFO

M.ns = api.nvim_create_namespace("dg.nextedit")
M.METHOD = "textDocument/copilotInlineEdit"
M.SHOWN = "textDocument/didShowInlineEdit"
M.INVOKED, M.AUTOMATIC = 1, 2
M.blocked, M.inline_pending, M.refusal = policy.blocked, policy.inline_pending, policy.refusal

--- From setup(): the nextEdit* settings and the keys.
M.opts = {
  enabled = true, -- settings.nextEdit
  debounce_ms = 400, -- settings.nextEditDebounceMs
  indicator_only = false, -- settings.nextEditIndicatorOnly
  accept_key = "<Tab>", -- keymaps.next_edit_accept (false: none)
  dismiss_key = "<Esc>", -- keymaps.next_edit_dismiss, Normal mode (false: none)
  sign = "»",
}

---@class dg.NextEditProposal
---@field client_id integer
---@field version integer the buffer's LSP version the edits were computed for
---@field edits table[] {text, range, textDocument, command}
---@field first_row integer
---@field last_row integer
---@field mapped table[] keys set while shown
---@field saved table[] buffer-local mappings they shadow, restored on hide

--- bufnr -> { timer, tick (changedtick last seen), request = {client_id, id}, proposal }
local state = {}

local function buf_state(bufnr)
  state[bufnr] = state[bufnr] or {}
  return state[bufnr]
end

local function resolve(bufnr)
  return (bufnr == nil or bufnr == 0) and api.nvim_get_current_buf() or bufnr
end

--- The dg client attached to `bufnr` whose server offers next edits (capabilities.experimental.dgNextEdit).
---@param bufnr integer
---@return vim.lsp.Client|nil
function M.client(bufnr)
  for _, client in ipairs(vim.lsp.get_clients({ name = "dg", bufnr = bufnr })) do
    local experimental = client.server_capabilities and client.server_capabilities.experimental
    if type(experimental) == "table" and experimental.dgNextEdit == true then
      return client
    end
  end
end

--- The proposal shown in `bufnr`, or nil.
---@param bufnr integer|nil
---@return dg.NextEditProposal|nil
function M.get(bufnr)
  local st = state[resolve(bufnr)]
  return st and st.proposal
end

--- Stop the running request of `bufnr`, if any.
function M.cancel(bufnr)
  local st = state[bufnr]
  local req = st and st.request
  if req then
    st.request = nil
    local client = vim.lsp.get_client_by_id(req.client_id)
    if client then
      client:cancel_request(req.id)
    end
  end
end

--- Remove the proposal of `bufnr` (its marks and keys). Returns false when none was shown.
---@param bufnr integer|nil
---@return boolean
function M.hide(bufnr)
  bufnr = resolve(bufnr)
  local st = state[bufnr]
  local p = st and st.proposal
  if not p then
    return false
  end
  st.proposal = nil
  if api.nvim_buf_is_valid(bufnr) then
    api.nvim_buf_clear_namespace(bufnr, M.ns, 0, -1)
    keys.unmap(bufnr, p)
  end
  return true
end

function M.hide_all()
  for bufnr in pairs(state) do
    M.cancel(bufnr)
    M.hide(bufnr)
  end
end

--- Apply the proposal of `bufnr`: every edit as one undo step, only if the buffer is still at the proposal's
--- version; then the edit's command (workspace/executeCommand) so the server records the accept.
--- With `from_key`, a shown completion menu or ghost text wins: nothing is applied (the key falls through).
---@param bufnr integer|nil
---@param from_key boolean|nil
---@return boolean applied
function M.accept(bufnr, from_key)
  bufnr = resolve(bufnr)
  local p = M.get(bufnr)
  if not p then
    if not from_key then
      vim.notify("dg: no next edit is shown", INFO)
    end
    return false
  end
  if from_key and M.blocked(bufnr) then
    M.hide(bufnr)
    return false
  end
  local client = vim.lsp.get_client_by_id(p.client_id)
  M.hide(bufnr)
  if util.buf_versions[bufnr] ~= p.version or not client then
    if not from_key then
      vim.notify("dg: next edit not applied: the buffer changed since it was proposed", WARN)
    end
    return false
  end
  -- byte ranges of the text as it was proposed (view.byte_range: one reading of positions past the last line for
  -- drawing and applying), applied last first
  local edits = view.byte_edits(api.nvim_buf_get_lines(bufnr, 0, -1, false), p.edits, client.offset_encoding)
  api.nvim_buf_call(bufnr, function()
    -- closing the undo block before and after makes the accept one undo step of its own, in Insert mode too
    vim.cmd("let &g:undolevels = &g:undolevels")
    for _, e in ipairs(edits) do
      api.nvim_buf_set_text(bufnr, e[1], e[2], e[3], e[4], e[5])
    end
    vim.cmd("let &g:undolevels = &g:undolevels")
  end)
  local sent = {}
  for _, e in ipairs(p.edits) do
    local key = type(e.command) == "table" and vim.json.encode(e.command)
    if key and not sent[key] then
      sent[key] = true
      client:exec_cmd(e.command, { bufnr = bufnr }, function(err)
        if err then
          vim.notify(("dg: %s failed: %s"):format(e.command.command, err.message or vim.inspect(err)), WARN)
        end
      end)
    end
  end
  return true
end

--- Draw `proposal` in `bufnr` (replacing any other), set its keys and tell the server it is shown.
---@param bufnr integer
---@param proposal table {client_id, version, edits}
function M.show(bufnr, proposal)
  M.hide(bufnr)
  local client = vim.lsp.get_client_by_id(proposal.client_id)
  if not client then
    return
  end
  local lines = api.nvim_buf_get_lines(bufnr, 0, -1, false)
  local layout = view.layout(lines, proposal.edits, client.offset_encoding)
  local p = vim.tbl_extend("force", proposal, {
    first_row = layout.first_row, last_row = layout.last_row, mapped = {}, saved = {},
  })
  if M.opts.indicator_only then
    api.nvim_buf_set_extmark(bufnr, M.ns, layout.first_row, 0, {
      sign_text = M.opts.sign, sign_hl_group = "DgNextEditSign",
    })
  else
    for _, mark in ipairs(layout.marks) do
      api.nvim_buf_set_extmark(bufnr, M.ns, mark[1], mark[2], mark[3])
    end
    keys.set(bufnr, p, M.opts.accept_key, M.opts.dismiss_key, function()
      return M.accept(bufnr, true)
    end, function()
      M.hide(bufnr)
    end)
  end
  buf_state(bufnr).proposal = p
  client:notify(M.SHOWN, { item = proposal.edits[1] })
end

function M.on_result(bufnr, kind, version, token, err, result, ctx)
  local st = state[bufnr]
  if not st or st.request ~= token then
    return -- superseded or cancelled
  end
  st.request = nil
  if err then
    if kind == M.INVOKED then
      vim.notify(("dg: next edit failed: %s"):format(err.message or vim.inspect(err)), WARN)
    end
    return
  end
  local edits = type(result) == "table" and result.edits or nil
  local why = M.refusal(bufnr, version, edits)
  if why then
    if kind == M.INVOKED then
      vim.notify(("dg: no next edit (%s)"):format(why), INFO)
    end
    return
  end
  M.show(bufnr, { client_id = ctx.client_id, version = version, edits = edits })
end

--- Ask for a proposal at the cursor now (`kind`: M.INVOKED or M.AUTOMATIC). Returns false and why when it cannot.
---@param bufnr integer|nil
---@param kind integer|nil
---@return boolean, string|nil
function M.request(bufnr, kind)
  bufnr = resolve(bufnr)
  kind = kind or M.INVOKED
  M.cancel(bufnr)
  local client = M.client(bufnr)
  if not client then
    return false, "no dg-lsp client that offers next edits is attached to this buffer"
  end
  if api.nvim_get_current_buf() ~= bufnr then
    return false, "not the current buffer"
  end
  local version = util.buf_versions[bufnr]
  local params = {
    textDocument = { uri = vim.uri_from_bufnr(bufnr), version = version },
    position = util.make_position_params(0, client.offset_encoding).position,
    context = { triggerKind = kind },
  }
  -- the handler's context has no request id: this request's own table tells its answer from a superseded one's
  local token = { client_id = client.id }
  local ok, id = client:request(M.METHOD, params, function(err, result, ctx)
    M.on_result(bufnr, kind, version, token, err, result, ctx)
  end, bufnr)
  if not ok then
    return false, "the request could not be sent"
  end
  token.id = id
  buf_state(bufnr).request = token
  return true
end

--- A text change in `bufnr`: drop the proposal and the running request, ask again after the debounce.
function M.on_change(bufnr)
  local st = buf_state(bufnr)
  local tick = api.nvim_buf_get_changedtick(bufnr)
  if st.tick == tick then
    return -- the same change reported again (TextChanged after TextChangedI)
  end
  st.tick, st.after_inline = tick, nil
  M.hide(bufnr)
  M.cancel(bufnr)
  if not M.opts.enabled or not require("dg").enabled then
    return
  end
  st.timer = st.timer or vim.uv.new_timer()
  st.timer:stop()
  st.timer:start(M.opts.debounce_ms, 0, vim.schedule_wrap(function()
    M.ask_if_idle(bufnr)
  end))
end

--- The pause after a change is over: ask, unless something else is shown or the buffer changed meanwhile. While
--- ghost text is being computed, wait for it (M.configure's LspRequest autocommand asks again once it is answered).
function M.ask_if_idle(bufnr)
  local st, mode = state[bufnr], api.nvim_get_mode()
  if not st or not api.nvim_buf_is_valid(bufnr) or api.nvim_get_current_buf() ~= bufnr or mode.blocking
    or (mode.mode ~= "n" and mode.mode ~= "i") or api.nvim_buf_get_changedtick(bufnr) ~= st.tick
    or M.blocked(bufnr) then
    return
  end
  if M.inline_pending(bufnr) then
    st.after_inline = true
    return
  end
  M.request(bufnr, M.AUTOMATIC)
end

--- The cursor moved: leaving the rows of the proposal (one row of slack) dismisses it.
function M.on_cursor(bufnr)
  local p = M.get(bufnr)
  if p and api.nvim_get_current_buf() == bufnr then
    local row = api.nvim_win_get_cursor(0)[1] - 1
    if row < p.first_row - 1 or row > p.last_row + 1 then
      M.hide(bufnr)
    end
  end
end

--- Stop everything for `bufnr` (detach, unload).
function M.detach(bufnr)
  M.cancel(bufnr)
  M.hide(bufnr)
  local st = state[bufnr]
  if st and st.timer then
    st.timer:stop()
    st.timer:close()
  end
  state[bufnr] = nil
  pcall(api.nvim_del_augroup_by_name, "dg.nextedit." .. bufnr)
end

--- Watch `bufnr` (called when the dg client attaches to it).
function M.attach(bufnr)
  local st = buf_state(bufnr)
  st.tick = api.nvim_buf_get_changedtick(bufnr)
  local group = api.nvim_create_augroup("dg.nextedit." .. bufnr, { clear = true })
  local function on(events, fn)
    api.nvim_create_autocmd(events, { group = group, buffer = bufnr, callback = function()
      fn(bufnr)
    end })
  end
  on({ "TextChanged", "TextChangedI" }, M.on_change)
  on({ "TextChangedP", "CompleteChanged", "InsertLeave", "BufLeave" }, M.hide)
  on({ "CursorMoved", "CursorMovedI" }, M.on_cursor)
  on({ "BufReadPost" }, function()
    M.cancel(bufnr)
    M.hide(bufnr)
  end)
  on({ "BufUnload" }, M.detach)
end

--- Read setup()'s resolved config. Ghost text answered while a proposal is shown dismisses the proposal.
---@param cfg table dg.config.resolve()'s result
function M.configure(cfg)
  local s = cfg.settings
  M.opts.enabled = s.nextEdit ~= false
  M.opts.debounce_ms = s.nextEditDebounceMs or 400
  M.opts.indicator_only = s.nextEditIndicatorOnly == true
  M.opts.accept_key = cfg.keymaps.next_edit_accept
  M.opts.dismiss_key = cfg.keymaps.next_edit_dismiss
  local delete = api.nvim_get_hl(0, { name = "DiffDelete", link = false })
  delete.strikethrough, delete.default = true, true
  api.nvim_set_hl(0, "DgNextEditDelete", delete)
  api.nvim_set_hl(0, "DgNextEditAdd", { link = "DiffAdd", default = true })
  api.nvim_set_hl(0, "DgNextEditSign", { link = "DiagnosticSignHint", default = true })
  local group = api.nvim_create_augroup("dg.nextedit", { clear = true })
  api.nvim_create_autocmd("LspRequest", {
    group = group,
    callback = function(args)
      local req = args.data and args.data.request
      if req and req.type == "complete" and req.method == "textDocument/inlineCompletion" then
        -- scheduled after the answer's handler, which draws the ghost text
        vim.schedule(function()
          local st = state[args.buf]
          if M.get(args.buf) and M.blocked(args.buf) then
            M.hide(args.buf)
          elseif st and st.after_inline and not M.inline_pending(args.buf) then
            st.after_inline = nil
            M.ask_if_idle(args.buf)
          end
        end)
      end
    end,
  })
end

return M
