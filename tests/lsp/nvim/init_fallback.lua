-- structspec in editors without inline completion: a completion menu (vim.lsp.completion).
vim.lsp.config('structspec', {
  cmd = { 'structspec-lsp', '--stdio' },
  filetypes = { 'python', 'javascript', 'typescript', 'go', 'rust', 'c', 'cpp', 'java', 'lua', 'sh' },
  root_markers = { '.git', 'pyproject.toml', 'package.json' },
  init_options = { maxTokens = 64 },
})
vim.lsp.enable('structspec')

vim.api.nvim_create_autocmd('LspAttach', {
  callback = function(args)
    local client = vim.lsp.get_client_by_id(args.data.client_id)
    if client and client.name == 'structspec' then
      vim.lsp.completion.enable(true, client.id, args.buf, { autotrigger = true })
    end
  end,
})
