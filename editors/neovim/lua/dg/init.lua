--- dg: Neovim client for dg-lsp (text-diffusion code infill), built on vim.lsp.inline_completion.
local M = {}

local api = vim.api

--- Whether this Neovim can run the plugin (0.12+: vim.lsp.config and vim.lsp.inline_completion).
---@return boolean
function M.supported()
  if type(vim.lsp.config) ~= "table" or type(vim.lsp.enable) ~= "function" then
    return false
  end
  local ok, inline = pcall(require, "vim.lsp.inline_completion")
  return ok and type(inline) == "table" and type(inline.get) == "function"
end

M.requirement = "Neovim 0.12 or newer (vim.lsp.inline_completion)"

local function version_string()
  local v = vim.version()
  return ("%d.%d.%d%s"):format(v.major, v.minor, v.patch, v.prerelease and "-dev" or "")
end

---@type table|nil the resolved config once setup() ran
M.config = nil
--- false after :DgToggle: no inline requests, no drafts.
M.enabled = true

local function dg_buffers()
  local bufs = {}
  for _, client in ipairs(vim.lsp.get_clients({ name = "dg" })) do
    for bufnr in pairs(client.attached_buffers) do
      bufs[bufnr] = true
    end
  end
  return bufs
end

local function set_keymaps(bufnr, keymaps)
  local inline = require("dg.inline")
  local actions = {
    accept = inline.accept,
    accept_word = inline.accept_word,
    accept_line = inline.accept_line,
    next = function()
      return inline.select(1)
    end,
    prev = function()
      return inline.select(-1)
    end,
    dismiss = inline.dismiss,
  }
  for name, lhs in pairs(keymaps) do
    if lhs and actions[name] then
      -- An <expr> map: the action schedules its edit and returns true, or returns false and the
      -- key does what it does without the plugin.
      vim.keymap.set("i", lhs, function()
        if M.enabled and actions[name]() then
          return ""
        end
        return lhs
      end, { buffer = bufnr, expr = true, replace_keycodes = true, desc = "dg: " .. name })
    end
  end
end

local function on_attach(bufnr)
  vim.lsp.inline_completion.enable(M.enabled, { bufnr = bufnr })
  set_keymaps(bufnr, M.config.keymaps)
  require("dg.nextedit").attach(bufnr)
  local group = api.nvim_create_augroup("dg.buffer." .. bufnr, { clear = true })
  api.nvim_create_autocmd("InsertLeave", {
    group = group,
    buffer = bufnr,
    callback = function()
      require("dg.draft").clear(bufnr)
    end,
  })
end

--- Configure and enable the dg language server. Options: see :help dg-setup.
---@param opts table|nil
---@return boolean started false when this Neovim is too old (bad options only warn)
function M.setup(opts)
  if not M.supported() then
    local msg = ("dg.nvim needs %s; this is Neovim %s"):format(M.requirement, version_string())
    vim.notify(msg, vim.log.levels.ERROR)
    return false
  end
  local config = require("dg.config")
  local cfg, errors = config.resolve(opts)
  if #errors > 0 then
    vim.notify("dg: " .. table.concat(errors, "; ") .. " (defaults used)", vim.log.levels.WARN)
  end
  M.config = cfg
  local status = require("dg.status")
  local draft = require("dg.draft")
  draft.enabled = cfg.drafts
  api.nvim_set_hl(0, "DgDraft", { link = "Comment", default = true })
  require("dg.nextedit").configure(cfg)

  vim.lsp.config("dg", {
    cmd = cfg.cmd,
    cmd_env = cfg.cmd_env,
    filetypes = cfg.filetypes,
    -- Without a filetype list Neovim would also start a client for the empty buffer at startup
    -- (rooted at the cwd); only files with a name and a filetype get one.
    root_dir = function(bufnr, on_dir)
      if api.nvim_buf_get_name(bufnr) ~= "" and vim.bo[bufnr].filetype ~= "" then
        on_dir(vim.fs.root(bufnr, cfg.root_markers))
      end
    end,
    capabilities = {
      workspace = { didChangeWatchedFiles = { dynamicRegistration = config.watch_files(cfg.watch_files) } },
    },
    init_options = config.wire_settings(cfg.settings),
    settings = { dg = config.wire_settings(cfg.settings) },
    handlers = {
      ["dg/status"] = status.on_status,
      ["dg/draft"] = function(...)
        if M.enabled then
          draft.on_draft(...)
        end
      end,
    },
    on_exit = function(_, _, client_id)
      vim.schedule(function()
        status.forget(client_id)
        pcall(vim.cmd.redrawstatus)
      end)
    end,
  })

  local group = api.nvim_create_augroup("dg", { clear = true })
  api.nvim_create_autocmd("LspAttach", {
    group = group,
    callback = function(args)
      local client = vim.lsp.get_client_by_id(args.data.client_id)
      if client and client.name == "dg" then
        on_attach(args.buf)
      end
    end,
  })
  api.nvim_create_autocmd("LspRequest", {
    group = group,
    callback = function(args)
      local req = args.data and args.data.request
      if req and req.type == "pending" and req.method == "textDocument/inlineCompletion"
        and not api.nvim_get_mode().mode:match("^[iR]") then
        -- Neovim's debounce timer outlives Insert mode (InsertLeave cancels what is pending, not the timer): a
        -- request it sends after Esc would draw ghost text in Normal mode, over a next edit
        local client = vim.lsp.get_client_by_id(args.data.client_id)
        if client and client.name == "dg" then
          client:cancel_request(args.data.request_id)
        end
      end
    end,
  })
  api.nvim_create_autocmd("LspDetach", {
    group = group,
    callback = function(args)
      local client = vim.lsp.get_client_by_id(args.data.client_id)
      if client and client.name == "dg" then
        require("dg.nextedit").detach(args.buf)
      end
    end,
  })
  vim.lsp.enable("dg")
  return true
end

--- "dg: loading", "dg: ready 120ms", "dg: busy 120ms", "dg: off"..., or "" without a dg client.
---@return string
function M.statusline()
  if not M.config then
    return ""
  end
  return require("dg.status").statusline(M.enabled)
end

--- Turn inline completion (and drafts) on or off in every dg buffer; the server keeps running.
---@param enable boolean|nil nil flips the current state
function M.toggle(enable)
  if enable == nil then
    enable = not M.enabled
  end
  M.enabled = enable
  for bufnr in pairs(dg_buffers()) do
    vim.lsp.inline_completion.enable(enable, { bufnr = bufnr })
  end
  if not enable then
    require("dg.draft").clear_all()
    require("dg.nextedit").hide_all()
  end
  pcall(vim.cmd.redrawstatus)
  vim.notify("dg: inline completion " .. (enable and "on" or "off"), vim.log.levels.INFO)
end

function M.fill()
  require("dg.commands").fill()
end

--- Like :DgRewrite. opts (all optional): line1, line2 (1-based; default the cursor's line), widen (bool),
--- instruction (string; empty or nil = a plain re-fill).
---@param opts table|nil
function M.rewrite(opts)
  require("dg.commands").rewrite(opts)
end

function M.status()
  require("dg.commands").show_status(M.enabled, M.config ~= nil and M.config.drafts)
end

function M.apply_anyway()
  require("dg.commands").apply_anyway()
end

--- :DgNextEdit: ask for a next edit at the cursor now.
function M.next_edit()
  local ok, why = require("dg.nextedit").request(0)
  if not ok then
    vim.notify("dg: " .. why, vim.log.levels.WARN)
  end
end

--- :DgNextEditAccept: apply the shown next edit (one undo step); false when none is shown or it is stale.
function M.next_edit_accept()
  return require("dg.nextedit").accept(0)
end

--- :DgNextEditDismiss: hide the shown next edit; false when none is shown.
function M.next_edit_dismiss()
  return require("dg.nextedit").hide(0)
end

M.accept = function()
  return require("dg.inline").accept()
end
M.accept_word = function()
  return require("dg.inline").accept_word()
end
M.accept_line = function()
  return require("dg.inline").accept_line()
end
M.dismiss = function()
  return require("dg.inline").dismiss()
end

return M
