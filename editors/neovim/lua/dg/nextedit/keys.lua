--- dg.nextedit.keys: the accept and dismiss keys, mapped only while a proposal is shown.
---
--- Mapped buffer-locally over whatever the key did (a buffer-local mapping is saved and put back, a global one
--- shows through again once ours is deleted), so without a proposal the key keeps its meaning; when the
--- proposal cannot take the key (stale, ghost text shown) it is fed again, to that meaning.
local M = {}

local api = vim.api

--- Type `lhs` again: "m" through the mappings now in place again (the user's own, dg's ghost-text accept) or
--- the built-in key; "i" before whatever was typed after it.
function M.feed(lhs)
  api.nvim_feedkeys(vim.keycode(lhs), "mi", false)
end

local function map(bufnr, p, mode, lhs, fn, desc)
  local saved = api.nvim_buf_call(bufnr, function()
    return vim.fn.maparg(lhs, mode, false, true)
  end)
  if saved.buffer == 1 then
    table.insert(p.saved, { mode = mode, dict = saved })
  end
  table.insert(p.mapped, { mode = mode, lhs = lhs })
  vim.keymap.set(mode, lhs, fn, { buffer = bufnr, nowait = true, desc = desc })
end

--- Map the keys of proposal `p` (its `mapped` and `saved` lists record what to undo).
---@param bufnr integer
---@param p table the proposal
---@param accept_key string|false Normal and Insert mode
---@param dismiss_key string|false Normal mode (Insert mode proposals go when Insert mode ends)
---@param accept fun(): boolean applies the proposal, or hides it and returns false
---@param dismiss fun()
function M.set(bufnr, p, accept_key, dismiss_key, accept, dismiss)
  if accept_key then
    for _, mode in ipairs({ "n", "i" }) do
      map(bufnr, p, mode, accept_key, function()
        if not accept() then
          M.feed(accept_key)
        end
      end, "dg: accept the next edit")
    end
  end
  if dismiss_key then
    map(bufnr, p, "n", dismiss_key, function()
      dismiss()
      M.feed(dismiss_key)
    end, "dg: dismiss the next edit")
  end
end

--- Delete the keys of proposal `p` and put back the buffer-local mappings they shadowed.
function M.unmap(bufnr, p)
  api.nvim_buf_call(bufnr, function()
    for _, m in ipairs(p.mapped) do
      pcall(vim.keymap.del, m.mode, m.lhs, { buffer = bufnr })
    end
    for _, s in ipairs(p.saved) do
      vim.fn.mapset(s.mode, false, s.dict)
    end
  end)
end

return M
