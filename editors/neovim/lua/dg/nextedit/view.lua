--- dg.nextedit.view: how a next-edit proposal is drawn (pure: buffer lines + LSP edits -> extmark specs).
---
--- Each edit is compared with the rows it touches, whole lines first: rows the edit leaves equal are
--- skipped, removed rows are highlighted (strikethrough), added rows become virtual lines, and a change
--- inside one row shows its removed characters highlighted with the inserted ones as inline virtual text
--- right after them. Nothing here moves the cursor or edits the buffer.
local text = require("dg.text")

local M = {}

--- Byte length of the common prefix of `a` and `b`, backed off to a UTF-8 character boundary.
local function common_prefix(a, b)
  local n, limit = 0, math.min(#a, #b)
  while n < limit and a:byte(n + 1) == b:byte(n + 1) do
    n = n + 1
  end
  -- never end inside a character: back off over continuation bytes (10xxxxxx) that follow
  while n > 0 and n < #a and a:byte(n + 1) >= 0x80 and a:byte(n + 1) < 0xC0 do
    n = n - 1
  end
  return n
end

--- Byte length of the common suffix of `a` and `b` that does not overlap `skip` bytes at their starts.
local function common_suffix(a, b, skip)
  local n, limit = 0, math.min(#a, #b) - skip
  while n < limit and a:byte(#a - n) == b:byte(#b - n) do
    n = n + 1
  end
  -- the suffix must start on a character's first byte
  while n > 0 and a:byte(#a - n + 1) >= 0x80 and a:byte(#a - n + 1) < 0xC0 do
    n = n - 1
  end
  return n
end

--- The edit as byte positions in `lines`: start row/col, end row/col (0-based, end exclusive) and its new
--- text. The document is the lines joined with "\n" plus a final "\n"; a position on the row after the last
--- (past that final newline) is rewritten as the same change against the last line.
---@param lines string[] the buffer's lines
---@param edit table {text, range}
---@param encoding string
function M.byte_range(lines, edit, encoding)
  local function pos(p)
    if p.line >= #lines then
      return #lines - 1, #(lines[#lines] or ""), true
    end
    return p.line, text.byte_col(lines[p.line + 1], p.character, encoding), false
  end
  local sr, sc, start_past = pos(edit.range.start)
  local er, ec, end_past = pos(edit.range["end"])
  local new = (edit.text or edit.newText or ""):gsub("\r\n?", "\n")
  if start_past then
    -- appended after the final newline: the same as after the last line's end, before that newline
    new = new == "" and "" or "\n" .. new:gsub("\n$", "")
  elseif end_past then
    -- the final newline is replaced: keep it, and when nothing replaces the removed rows, remove the
    -- newline before them instead
    if new:sub(-1) == "\n" then
      new = new:sub(1, -2)
    elseif new == "" and sc == 0 and sr > 0 then
      sr, sc = sr - 1, #lines[sr]
    end
  end
  return sr, sc, er, ec, new
end

--- Is byte `i` (1-based) of `s` part of a word character (letters, digits, _, 'iskeyword'; an emoji is not)?
local function wordy(s, i)
  local b = s:byte(i)
  if b == nil then
    return false
  elseif b < 0x80 then
    return b == 95 or (b >= 48 and b <= 57) or (b >= 65 and b <= 90) or (b >= 97 and b <= 122)
  end
  local start = i
  while start > 1 and s:byte(start) >= 0x80 and s:byte(start) < 0xC0 do
    start = start - 1
  end
  return vim.fn.charclass(s:sub(start, start + 3)) == 2
end

--- A change inside row `row`: `old` (the text at byte `col`) becomes `new`. Their common ends are left alone, in
--- whole words (width -> wide shows as a new word, not as "wid" + "th" -> "e"); the removed characters are struck
--- through and the new ones drawn inline right after them.
---@return table[] marks
function M.inline_marks(row, col, old, new, hl)
  local p = common_prefix(old, new)
  while p > 0 and wordy(old, p) and (wordy(old, p + 1) or wordy(new, p + 1)) do
    p = p - 1
  end
  local s = common_suffix(old, new, p)
  while s > 0 and wordy(old, #old - s + 1) and (wordy(old, #old - s) or wordy(new, #new - s)) do
    s = s - 1
  end
  local del_end, ins = #old - s, new:sub(p + 1, #new - s)
  local marks = {}
  if del_end > p then
    table.insert(marks, { row, col + p, { end_row = row, end_col = col + del_end, hl_group = hl.delete } })
  end
  if ins ~= "" then
    table.insert(marks, { row, col + del_end, { virt_text = { { ins, hl.add } }, virt_text_pos = "inline" } })
  end
  return marks
end

--- What one edit looks like as extmarks. Returns a list of {row, col, opts} and the rows it touches.
---@param lines string[]
---@param edit table
---@param encoding string
---@param hl table {delete, add}
---@return table[] marks, integer first_row, integer last_row
function M.edit_marks(lines, edit, encoding, hl)
  local sr, sc, er, ec, new = M.byte_range(lines, edit, encoding)
  if sr == er and not new:find("\n", 1, true) then
    -- the whole row before and after: the server's edits are minimal in characters ("width" -> "wide" comes as
    -- "th" -> "e"), drawn here in whole words
    local row = lines[sr + 1] or ""
    return M.inline_marks(sr, 0, row, row:sub(1, sc) .. new .. row:sub(ec + 1), hl), sr, sr
  end
  local old_rows = {}
  for r = sr, er do
    table.insert(old_rows, lines[r + 1] or "")
  end
  local new_rows = vim.split(old_rows[1]:sub(1, sc) .. new .. old_rows[#old_rows]:sub(ec + 1), "\n", { plain = true })
  -- drop whole rows the edit leaves as they were, from the top and from the bottom
  local top = 0
  while top < #old_rows and top < #new_rows and old_rows[top + 1] == new_rows[top + 1] do
    top = top + 1
  end
  local bottom = 0
  while bottom < #old_rows - top and bottom < #new_rows - top
    and old_rows[#old_rows - bottom] == new_rows[#new_rows - bottom] do
    bottom = bottom + 1
  end
  local first, last = sr + top, er - bottom -- old rows that change (last < first: none, a pure insertion)
  local added = vim.list_slice(new_rows, top + 1, #new_rows - bottom)
  local marks = {}
  local function virt_lines(rows)
    return vim.tbl_map(function(row)
      return { { row, hl.add } }
    end, rows)
  end
  if last < first then
    if #added == 0 then
      return {}, sr, sr
    end
    -- pure insertion of whole rows between old rows `last` and `first`
    if last >= 0 then
      table.insert(marks, { last, 0, { virt_lines = virt_lines(added) } })
    else
      table.insert(marks, { 0, 0, { virt_lines = virt_lines(added), virt_lines_above = true } })
    end
    return marks, math.max(last, 0), math.max(last, 0)
  end
  if first == last and #added == 1 then
    local old_row, new_row = lines[first + 1] or "", added[1]
    return M.inline_marks(first, 0, old_row, new_row, hl), first, first
  end
  -- whole rows replaced (or removed): struck through, the new rows below the last of them
  table.insert(marks, {
    first, 0, { end_row = last, end_col = #(lines[last + 1] or ""), hl_group = hl.delete, hl_eol = true },
  })
  if #added > 0 then
    table.insert(marks, { last, 0, { virt_lines = virt_lines(added) } })
  end
  return marks, first, last
end

--- Every mark of a proposal, and the rows it covers (for the "moved away" check and the sign).
---@param lines string[] the buffer's lines
---@param edits table[] the proposal's edits ({text, range}), in document order
---@param encoding string
---@param hl table|nil {delete, add}
---@return table { marks = {{row, col, opts}...}, first_row, last_row }
function M.layout(lines, edits, encoding, hl)
  hl = hl or { delete = "DgNextEditDelete", add = "DgNextEditAdd" }
  local out = { marks = {} }
  for _, edit in ipairs(edits) do
    local marks, first, last = M.edit_marks(lines, edit, encoding, hl)
    vim.list_extend(out.marks, marks)
    out.first_row = math.min(out.first_row or first, first)
    out.last_row = math.max(out.last_row or last, last)
  end
  return out
end

--- The edits as byte ranges of `lines`, last first (so each can be applied without moving the next):
--- a list of {start_row, start_col, end_row, end_col, new_lines}.
---@param lines string[]
---@param edits table[]
---@param encoding string
---@return table[]
function M.byte_edits(lines, edits, encoding)
  local out = {}
  for _, edit in ipairs(edits) do
    local sr, sc, er, ec, new = M.byte_range(lines, edit, encoding)
    table.insert(out, { sr, sc, er, ec, vim.split(new, "\n", { plain = true }) })
  end
  table.sort(out, function(a, b)
    return a[1] > b[1] or (a[1] == b[1] and a[2] > b[2])
  end)
  return out
end

--- The buffer's text after the edits (what an accept leaves; the tests' oracle).
---@param lines string[]
---@param edits table[]
---@param encoding string
---@return string[]
function M.apply(lines, edits, encoding)
  local result = vim.deepcopy(lines)
  for _, e in ipairs(M.byte_edits(lines, edits, encoding)) do
    local sr, sc, er, ec, new = unpack(e)
    local rows = vim.deepcopy(new)
    rows[1] = result[sr + 1]:sub(1, sc) .. rows[1]
    rows[#rows] = rows[#rows] .. result[er + 1]:sub(ec + 1)
    for _ = sr, er do
      table.remove(result, sr + 1)
    end
    for i, row in ipairs(rows) do
      table.insert(result, sr + i, row)
    end
  end
  return result
end

return M
