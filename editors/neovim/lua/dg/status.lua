--- dg.status: the last dg/status payload per client and the statusline component built on it.
local text = require("dg.text")

local M = {}

---@type table<integer, table> client id -> last dg/status params
M.by_client = {}

--- The dg client for `bufnr` (attached first, else any running one).
---@param bufnr integer|nil
---@return vim.lsp.Client|nil
function M.client(bufnr)
  local attached = vim.lsp.get_clients({ name = "dg", bufnr = bufnr or 0 })
  if attached[1] then
    return attached[1]
  end
  return vim.lsp.get_clients({ name = "dg" })[1]
end

--- Handler for the server's dg/status notification.
function M.on_status(_, params, ctx)
  if type(params) ~= "table" then
    return
  end
  M.by_client[ctx.client_id] = params
  vim.api.nvim_exec_autocmds("User", { pattern = "DgStatus", modeline = false, data = params })
  -- A notification handler runs outside textlock; redraw so the statusline follows at once.
  pcall(vim.cmd.redrawstatus)
end

--- The dg/status of the client serving `bufnr`, if any arrived.
function M.get(bufnr)
  local client = M.client(bufnr)
  return client and M.by_client[client.id] or nil, client
end

--- "dg: loading|ready NNms|busy|error|disabled|off|starting", or "" when no dg client runs.
---@param enabled boolean
---@return string
function M.statusline(enabled)
  local status, client = M.get(0)
  if not client then
    return ""
  end
  return text.format_status(status, enabled)
end

function M.forget(client_id)
  M.by_client[client_id] = nil
end

return M
