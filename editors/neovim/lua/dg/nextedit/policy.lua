--- dg.nextedit.policy: when a next edit may be asked for and shown (pure reads of the editor's state).
local M = {}

local api = vim.api
local util = vim.lsp.util

--- What a proposal must not compete with, or nil: the completion menu, inline ghost text.
---@param bufnr integer
---@return string|nil
function M.blocked(bufnr)
  if vim.fn.pumvisible() == 1 then
    return "the completion menu is shown"
  end
  if require("dg.inline").visible(bufnr) then
    return "inline completion is shown"
  end
end

--- Is an inline completion request for `bufnr` still running? (The server would cancel its fill for a next edit:
--- both are keystroke work on one document, and the newer wins.)
---@param bufnr integer
---@return boolean
function M.inline_pending(bufnr)
  for _, client in ipairs(vim.lsp.get_clients({ bufnr = bufnr })) do
    for _, req in pairs(client.requests or {}) do
      if req.type == "pending" and req.bufnr == bufnr and req.method == "textDocument/inlineCompletion" then
        return true
      end
    end
  end
  return false
end

--- Why `edits` (answered for `version`) cannot be shown in `bufnr` now, or nil.
function M.refusal(bufnr, version, edits)
  if type(edits) ~= "table" or #edits == 0 then
    return "nothing to propose"
  end
  if not api.nvim_buf_is_loaded(bufnr) or util.buf_versions[bufnr] ~= version then
    return "the buffer changed"
  end
  for _, e in ipairs(edits) do
    if type(e) ~= "table" or type(e.text) ~= "string" or type(e.range) ~= "table" then
      return "a malformed edit"
    end
    local doc = e.textDocument
    if type(doc) == "table" and doc.version ~= nil and doc.version ~= version then
      return "an edit for another version"
    end
  end
  if api.nvim_get_current_buf() ~= bufnr then
    return "another buffer is current"
  end
  return M.blocked(bufnr)
end

return M
