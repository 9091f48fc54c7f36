-- The small test harness of the plugin's headless Lua tests (test_logic.lua, test_nextedit.lua): puts the plugin on
-- the runtimepath and returns test / eq / scratch and finish (prints the count, exits 1 on any failure).
local root = vim.fn.fnamemodify(debug.getinfo(1, "S").source:sub(2), ":p:h:h")
vim.opt.rtp:prepend(root)

local H = { failures = 0, count = 0 }
function H.test(name, fn)
  H.count = H.count + 1
  local ok, err = pcall(fn)
  if not ok then
    H.failures = H.failures + 1
    io.stderr:write(("FAIL %s: %s\n"):format(name, err))
  end
end
function H.eq(expected, actual, what)
  if not vim.deep_equal(expected, actual) then
    error(("%s: expected %s, got %s"):format(what or "value", vim.inspect(expected), vim.inspect(actual)), 2)
  end
end
function H.scratch(lines)
  local bufnr = vim.api.nvim_create_buf(true, false)
  vim.api.nvim_set_current_buf(bufnr)
  vim.api.nvim_buf_set_lines(bufnr, 0, -1, false, lines)
  return bufnr
end
function H.finish()
  io.stdout:write(("%d tests, %d failed\n"):format(H.count, H.failures))
  os.exit(H.failures == 0 and 0 or 1)
end
return H
