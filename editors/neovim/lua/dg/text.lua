--- dg.text: pure string helpers (partial accepts, statusline text, LSP <-> byte positions).
local M = {}

-- Bytes >= 128 are parts of non-ASCII characters: treat them as word characters so a word never
-- splits a UTF-8 sequence.
local WORD = "[%w_\128-\255]"
local PUNCT = "[^%w_%s\128-\255]"

--- The first word of `text`: leading whitespace (newlines included), then one run of word
--- characters or one run of punctuation. Returns "" for "".
---@param text string
---@return string
function M.first_word(text)
  local lead = text:match("^%s*")
  local rest = text:sub(#lead + 1)
  local word = rest:match("^" .. WORD .. "+") or rest:match("^" .. PUNCT .. "+") or ""
  return lead .. word
end

--- The first line of `text` without its newline; when `text` starts with a newline, that newline
--- and the line after it (so accepting a line always makes progress).
---@param text string
---@return string
function M.first_line(text)
  if text:sub(1, 1) == "\n" then
    return "\n" .. (text:sub(2):match("^[^\n]*"))
  end
  return (text:match("^[^\n]*"))
end

--- "dg: ready 123ms" and friends, from the last dg/status payload.
---@param status table|nil { state, message, model, lastLatencyMs }
---@param enabled boolean false after :DgToggle
---@return string
function M.format_status(status, enabled)
  if not enabled then
    return "dg: off"
  end
  if not status then
    return "dg: starting"
  end
  local s = "dg: " .. tostring(status.state or "?")
  local ms = status.lastLatencyMs
  if type(ms) == "number" and (status.state == "ready" or status.state == "busy") then
    s = s .. (" %dms"):format(math.floor(ms + 0.5))
  end
  return s
end

--- Byte column of LSP `character` in `line` for `encoding` ("utf-8" | "utf-16" | "utf-32").
--- Characters past the end clamp to the line's length.
---@param line string
---@param character integer
---@param encoding string
---@return integer
function M.byte_col(line, character, encoding)
  if encoding == "utf-8" then
    return math.min(character, #line)
  end
  local ok, col = pcall(vim.str_byteindex, line, encoding, character, false)
  return ok and col or #line
end

--- LSP `character` of byte column `col` in `line`.
---@param line string
---@param col integer
---@param encoding string
---@return integer
function M.lsp_character(line, col, encoding)
  if encoding == "utf-8" then
    return math.min(col, #line)
  end
  return vim.str_utfindex(line, encoding, math.min(col, #line), false)
end

--- Row and column of the end of `text` inserted at (row, col), all 0-based.
---@param row integer
---@param col integer
---@param text string
---@return integer row, integer col
function M.end_of_insert(row, col, text)
  local lines = vim.split(text, "\n", { plain = true })
  if #lines == 1 then
    return row, col + #text
  end
  return row + #lines - 1, #lines[#lines]
end

return M
