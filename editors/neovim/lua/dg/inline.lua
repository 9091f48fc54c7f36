--- dg.inline: accept (whole, word, line), cycle and dismiss the ghost text of vim.lsp.inline_completion.
local text = require("dg.text")

local M = {}

local api = vim.api

--- The text shown as ghost text in `bufnr` (virtual text + virtual lines), or nil when none is.
---@param bufnr integer|nil
---@return string|nil
function M.visible(bufnr)
  bufnr = (bufnr == nil or bufnr == 0) and api.nvim_get_current_buf() or bufnr
  local ns = api.nvim_get_namespaces()["nvim.lsp.inline_completion"]
  if not ns then
    return nil
  end
  local marks = api.nvim_buf_get_extmarks(bufnr, ns, 0, -1, { details = true })
  if #marks == 0 then
    return nil
  end
  local details = marks[1][4]
  local lines = {}
  local first = {}
  for _, chunk in ipairs(details.virt_text or {}) do
    if chunk[2] ~= "ComplHintMore" then
      table.insert(first, chunk[1])
    end
  end
  table.insert(lines, table.concat(first))
  for _, vline in ipairs(details.virt_lines or {}) do
    local parts = {}
    for _, chunk in ipairs(vline) do
      if chunk[2] ~= "ComplHintMore" then
        table.insert(parts, chunk[1])
      end
    end
    table.insert(lines, table.concat(parts))
  end
  return table.concat(lines, "\n")
end

local function item_text(item)
  local insert = item.insert_text
  return type(insert) == "string" and insert or insert.value
end

--- Insert `part` (a prefix of the item's text) at the item's start. Only a whole accept replaces
--- the item's range: after a partial one the rest of the hole stays for the next request.
---@param item vim.lsp.inline_completion.Item
---@param part string
local function insert_part(item, part)
  local bufnr = api.nvim_get_current_buf()
  local win = api.nvim_get_current_win()
  local row, col
  if item.range then
    row, col = item.range.start.row, item.range.start.col
  else
    local cursor = api.nvim_win_get_cursor(win)
    row, col = cursor[1] - 1, cursor[2]
  end
  api.nvim_buf_set_text(bufnr, row, col, row, col, vim.split(part, "\n", { plain = true }))
  local end_row, end_col = text.end_of_insert(row, col, part)
  api.nvim_win_set_cursor(win, { end_row + 1, end_col })
end

--- Accept the whole item (Neovim's own accept). Returns false when nothing is shown.
function M.accept()
  return vim.lsp.inline_completion.get()
end

--- Accept the part of the item that `cut` selects. Returns false when nothing is shown.
---@param cut fun(s: string): string
local function accept_part(cut)
  return vim.lsp.inline_completion.get({
    on_accept = function(item)
      local whole = item_text(item)
      if type(item.insert_text) ~= "string" then
        -- A snippet cannot be cut safely; take it whole.
        vim.snippet.expand(whole)
        return
      end
      local part = cut(whole)
      if part == whole and item.range then
        local r = item.range
        local lines = vim.split(whole, "\n", { plain = true })
        api.nvim_buf_set_text(0, r.start.row, r.start.col, r.end_.row, r.end_.col, lines)
        local end_row, end_col = text.end_of_insert(r.start.row, r.start.col, whole)
        api.nvim_win_set_cursor(0, { end_row + 1, end_col })
        if item.command then
          local client = vim.lsp.get_client_by_id(item.client_id)
          if client then
            client:exec_cmd(item.command, { bufnr = api.nvim_get_current_buf() })
          end
        end
      elseif part ~= "" then
        insert_part(item, part)
      end
    end,
  })
end

function M.accept_word()
  return accept_part(text.first_word)
end

function M.accept_line()
  return accept_part(text.first_line)
end

--- Hide the ghost text and drop the item. Returns false when nothing is shown.
function M.dismiss()
  return vim.lsp.inline_completion.get({ on_accept = function() end })
end

--- Show the next (count > 0) or previous candidate. Returns false when nothing is shown.
---@param count integer
function M.select(count)
  if not M.visible(0) then
    return false
  end
  vim.lsp.inline_completion.select({ count = count })
  return true
end

return M
