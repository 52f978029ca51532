-- structspec in Neovim 0.12+ (the README's snippet; tests/lsp/test_neovim.py runs it as is).
vim.lsp.config('structspec', {
  cmd = { 'structspec-lsp', '--stdio' },
  filetypes = { 'python', 'javascript', 'typescript', 'go', 'rust', 'c', 'cpp', 'java', 'lua', 'sh' },
  root_markers = { '.git', 'pyproject.toml', 'package.json' },
  -- Settings (see the README's settings table), e.g. shorter suggestions:
  init_options = { maxTokens = 64 },
})
vim.lsp.enable('structspec')

-- Ghost text as you type; <Tab> accepts it.
vim.lsp.inline_completion.enable()
vim.keymap.set('i', '<Tab>', function()
  if not vim.lsp.inline_completion.get() then
    return '<Tab>'
  end
end, { expr = true, desc = 'Accept the structspec suggestion' })
