--- dg.draft: render dg/draft notifications as virtual text at the hole while a fill forms.
local text = require("dg.text")

local M = {}

M.ns = vim.api.nvim_create_namespace("dg.draft")
M.enabled = false

--- Buffers that currently show a draft.
local shown = {}

local function buffer_for(client, uri)
  for bufnr in pairs(client.attached_buffers) do
    if vim.api.nvim_buf_is_loaded(bufnr) and vim.uri_from_bufnr(bufnr) == uri then
      return bufnr
    end
  end
end

function M.clear(bufnr)
  if vim.api.nvim_buf_is_valid(bufnr) then
    vim.api.nvim_buf_clear_namespace(bufnr, M.ns, 0, -1)
  end
  shown[bufnr] = nil
end

function M.clear_all()
  for bufnr in pairs(shown) do
    M.clear(bufnr)
  end
end

--- Draw `draft_text` at (row, col): its first line inline, the others as virtual lines below.
---@param bufnr integer
---@param row integer 0-based
---@param col integer 0-based byte column
---@param draft_text string
function M.draw(bufnr, row, col, draft_text)
  vim.api.nvim_buf_clear_namespace(bufnr, M.ns, 0, -1)
  local lines = vim.split(draft_text, "\n", { plain = true })
  local virt_lines = {}
  for i = 2, #lines do
    table.insert(virt_lines, { { lines[i], "DgDraft" } })
  end
  vim.api.nvim_buf_set_extmark(bufnr, M.ns, row, col, {
    virt_text = { { lines[1], "DgDraft" } },
    virt_text_pos = "inline",
    virt_lines = #virt_lines > 0 and virt_lines or nil,
    hl_mode = "combine",
  })
end

--- Handler for the server's dg/draft notification.
function M.on_draft(_, params, ctx)
  if not M.enabled or type(params) ~= "table" then
    return
  end
  local client = vim.lsp.get_client_by_id(ctx.client_id)
  local bufnr = client and buffer_for(client, params.uri)
  if not bufnr then
    return
  end
  -- A draft for an older version of the text would be drawn in the wrong place.
  if params.version ~= nil and params.version ~= vim.lsp.util.buf_versions[bufnr] then
    return
  end
  if params.done then
    M.clear(bufnr)
    return
  end
  local start = params.range and params.range.start
  if not start then
    return
  end
  local line = vim.api.nvim_buf_get_lines(bufnr, start.line, start.line + 1, false)[1]
  if not line then
    return
  end
  local col = text.byte_col(line, start.character, client.offset_encoding)
  shown[bufnr] = true
  M.draw(bufnr, start.line, col, params.text or "")
end

return M
