-- dg.nvim user commands. Nothing starts until require("dg").setup{} is called.
if vim.g.loaded_dg then
  return
end
vim.g.loaded_dg = true

local function run(name, opts)
  local dg = require("dg")
  if not dg.supported() then
    vim.notify("dg.nvim needs " .. dg.requirement, vim.log.levels.ERROR)
    return
  end
  if not dg.config then
    vim.notify('dg: call require("dg").setup{} first', vim.log.levels.ERROR)
    return
  end
  dg[name](opts)
end

local command = vim.api.nvim_create_user_command
command("DgFill", function(opts)
  run("fill", opts)
end, { desc = "dg: fill the hole at the cursor" })
command("DgRewrite", function(opts)
  run("rewrite", opts)
end, {
  range = true,
  bang = true,
  nargs = "*",
  desc = "dg: rewrite the selected lines, following the optional instruction (! lets the server widen)",
})
command("DgApplyAnyway", function()
  run("apply_anyway")
end, { desc = "dg: apply the fill or rewrite the confidence gate last withheld" })
command("DgToggle", function()
  run("toggle")
end, { desc = "dg: turn inline completion on/off" })
command("DgStatus", function()
  run("status")
end, { desc = "dg: show the server's status" })
command("DgNextEdit", function()
  run("next_edit")
end, { desc = "dg: ask for a next edit at the cursor now" })
command("DgNextEditAccept", function()
  run("next_edit_accept")
end, { desc = "dg: apply the shown next edit (one undo step)" })
command("DgNextEditDismiss", function()
  run("next_edit_dismiss")
end, { desc = "dg: hide the shown next edit" })
