--- dg.config: the plugin's defaults and the check of what the user passed to setup().
local M = {}

--- Insert-mode keys; false disables one. Each falls back to the key's normal meaning when no
--- ghost text is shown.
M.defaults = {
  -- Command that starts the server over stdio. Tests use { python, "-m", "dg_lsp" }.
  cmd = { "dg-lsp" },
  -- Extra environment for the server process, e.g. { CUDA_VISIBLE_DEVICES = "1" }.
  cmd_env = nil,
  -- nil: every filetype (the server's own `languages` setting filters further).
  filetypes = nil,
  root_markers = { ".git" },
  -- Let the server watch the workspace's source files (workspace/didChangeWatchedFiles, so files
  -- changed outside Neovim reach its index). "auto": where Neovim has a recursive file watcher
  -- (macOS and Windows; elsewhere the `inotifywait` program of inotify-tools); true: always (without
  -- inotifywait on Linux, Neovim's poller watches the root folder only); false: never.
  watch_files = "auto",
  -- Server settings (docs/PROTOCOL.md, camelCase keys), sent as initializationOptions and as
  -- workspace/didChangeConfiguration {settings = {dg = ...}}, e.g. { modelPath = ..., promptFormat = "chat",
  -- weights = "int4", minConfidence = 0.5 }. Where fills run: backend = "embedded" |
  -- "service" | "openai", with endpoint, apiKeyEnv (the NAME of the variable holding the key), model and
  -- autoStart (:help dg-backends).
  settings = {},
  -- Render dg/draft notifications as virtual text. nil: follow settings.drafts.
  drafts = nil,
  keymaps = {
    accept = "<Tab>",
    accept_word = "<M-Right>",
    accept_line = "<M-Down>",
    next = "<M-]>",
    prev = "<M-[>",
    dismiss = "<C-]>",
    -- next edits (:help dg-next-edit): Normal and Insert mode, set only while a proposal is shown
    next_edit_accept = "<Tab>",
    -- Normal mode; Insert mode proposals go when Insert mode ends
    next_edit_dismiss = "<Esc>",
  },
}

--- The next-edit settings the plugin reads itself (the server gets them too): name -> check.
local NEXT_EDIT_SETTINGS = {
  nextEdit = { "boolean", "true or false" },
  nextEditIndicatorOnly = { "boolean", "true or false" },
  nextEditDebounceMs = { "number", "a number of milliseconds >= 0" },
}

local function check(errors, ok, msg)
  if not ok then
    table.insert(errors, msg)
  end
end

--- Merge user options over the defaults. Returns the config and a list of problems; a bad key
--- keeps its default.
---@param opts table|nil
---@return table config, string[] errors
function M.resolve(opts)
  opts = opts or {}
  local errors = {}
  local cfg = vim.deepcopy(M.defaults)
  if type(opts) ~= "table" then
    return cfg, { "setup() takes a table" }
  end
  for key, value in pairs(opts) do
    if M.defaults[key] == nil and key ~= "filetypes" and key ~= "drafts" and key ~= "cmd_env" then
      table.insert(errors, ("unknown option %q"):format(tostring(key)))
    elseif key == "cmd" then
      local ok = (type(value) == "table" and #value > 0) or type(value) == "function"
      check(errors, ok, "cmd must be a non-empty list (or a function, see :h vim.lsp.Config)")
      if ok then
        cfg.cmd = value
      end
    elseif key == "keymaps" then
      if type(value) ~= "table" then
        table.insert(errors, "keymaps must be a table")
      else
        for name, lhs in pairs(value) do
          if M.defaults.keymaps[name] == nil then
            table.insert(errors, ("unknown keymap %q"):format(tostring(name)))
          elseif lhs ~= false and type(lhs) ~= "string" then
            table.insert(errors, ("keymaps.%s must be a key string or false"):format(name))
          else
            cfg.keymaps[name] = lhs
          end
        end
      end
    elseif key == "settings" then
      check(errors, type(value) == "table", "settings must be a table")
      if type(value) == "table" then
        cfg.settings = vim.deepcopy(value)
      end
    elseif key == "cmd_env" then
      check(errors, type(value) == "table", "cmd_env must be a table of environment variables")
      if type(value) == "table" then
        cfg.cmd_env = value
      end
    elseif key == "filetypes" or key == "root_markers" then
      check(errors, value == nil or type(value) == "table", key .. " must be a list")
      if type(value) == "table" then
        cfg[key] = value
      end
    elseif key == "watch_files" then
      local ok = type(value) == "boolean" or value == "auto"
      check(errors, ok, 'watch_files must be true, false or "auto"')
      if ok then
        cfg.watch_files = value
      end
    elseif key == "drafts" then
      check(errors, type(value) == "boolean", "drafts must be true or false")
      if type(value) == "boolean" then
        cfg.drafts = value
      end
    end
  end
  for name, want in pairs(NEXT_EDIT_SETTINGS) do
    local value = cfg.settings[name]
    if value ~= nil and (type(value) ~= want[1] or (want[1] == "number" and value < 0)) then
      table.insert(errors, ("settings.%s must be %s"):format(name, want[2]))
      cfg.settings[name] = nil
    end
  end
  if cfg.drafts == nil then
    cfg.drafts = cfg.settings.drafts == true
  elseif cfg.drafts and cfg.settings.drafts == nil then
    -- The server only streams drafts when asked to.
    cfg.settings.drafts = true
  end
  return cfg, errors
end

--- Whether the client offers workspace/didChangeWatchedFiles dynamic registration: `watch_files`
--- resolved ("auto": macOS, Windows, or `inotifywait` on PATH; Neovim 0.12 itself offers it on macOS
--- and Windows only, its Linux fallback being a per-folder poller).
---@param setting boolean|string
---@return boolean
function M.watch_files(setting)
  if type(setting) == "boolean" then
    return setting
  end
  local sysname = vim.uv.os_uname().sysname
  return sysname == "Darwin" or sysname == "Windows_NT" or vim.fn.executable("inotifywait") == 1
end

--- The settings object as sent on the wire: an empty table must encode as {} not [].
function M.wire_settings(settings)
  if next(settings) == nil then
    return vim.empty_dict()
  end
  return settings
end

return M
