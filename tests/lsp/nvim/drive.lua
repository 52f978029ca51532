-- Test driver: type into the open buffer, wait for structspec's suggestion, accept it,
-- and write what happened to $STRUCTSPEC_NVIM_OUT as JSON. Mode: $STRUCTSPEC_NVIM_MODE
-- ("inline" or "menu"). Runs after the user's init.lua, like a person at the keyboard.
local out_path = assert(os.getenv('STRUCTSPEC_NVIM_OUT'))
local mode = os.getenv('STRUCTSPEC_NVIM_MODE') or 'inline'
local typed = os.getenv('STRUCTSPEC_NVIM_TYPE') or 'total = add('
local timeout_ms = tonumber(os.getenv('STRUCTSPEC_NVIM_TIMEOUT_MS') or '120000')
local result = { mode = mode, events = {} }

local function log(event)
  table.insert(result.events, event)
end

local function finish(ok, why)
  result.ok = ok
  result.why = why
  result.buffer = table.concat(vim.api.nvim_buf_get_lines(0, 0, -1, false), '\n')
  local f = assert(io.open(out_path, 'w'))
  f:write(vim.json.encode(result))
  f:close()
  vim.cmd('qa!')
end

local function client()
  return vim.lsp.get_clients({ bufnr = 0, name = 'structspec' })[1]
end

local start = vim.uv.now()
local function poll(cond, on_ok, what)
  local timer = assert(vim.uv.new_timer())
  timer:start(50, 50, vim.schedule_wrap(function()
    local ok, value = pcall(cond)
    if ok and value then
      timer:stop()
      timer:close()
      on_ok(value)
    elseif vim.uv.now() - start > timeout_ms then
      timer:stop()
      timer:close()
      finish(false, 'timed out waiting for ' .. what .. (ok and '' or (': ' .. tostring(value))))
    end
  end))
end

local function status_then_finish()
  local c = client()
  c:request('workspace/executeCommand', { command = 'structspec.status', arguments = {} },
    function(err, res)
      result.status = res
      result.status_error = err and err.message or nil
      finish(true, nil)
    end)
end

local function accepted_check(before)
  poll(function()
    local line = vim.api.nvim_get_current_line()
    return line ~= before and line
  end, function(line)
    result.after_accept = line
    -- the accept command is sent after the text is applied; give it a moment
    vim.defer_fn(status_then_finish, 500)
  end, 'the suggestion to be applied')
end

local function on_attached()
  log('attached')
  -- Go to the end of the file, open a new line and type like a user.
  vim.api.nvim_win_set_cursor(0, { vim.api.nvim_buf_line_count(0), 0 })
  vim.api.nvim_feedkeys(vim.api.nvim_replace_termcodes('Go' .. typed, true, false, true), 'nt', false)
  if mode == 'inline' then
    local ns = vim.api.nvim_create_namespace('nvim.lsp.inline_completion')
    poll(function()
      local marks = vim.api.nvim_buf_get_extmarks(0, ns, 0, -1, { details = true })
      for _, m in ipairs(marks) do
        local d = m[4]
        local text = ''
        for _, chunk in ipairs(d.virt_text or {}) do
          text = text .. chunk[1]
        end
        if text:match('%S') then
          return text
        end
      end
    end, function(ghost)
      result.ghost = ghost
      log('ghost text shown')
      local before = vim.api.nvim_get_current_line()
      result.line_before_accept = before
      -- Accept with the README's <Tab> mapping.
      vim.api.nvim_feedkeys(vim.api.nvim_replace_termcodes('<Tab>', true, false, true), 'mt', false)
      accepted_check(before)
    end, 'ghost text')
  else
    vim.schedule(function()
      vim.lsp.completion.get()
    end)
    poll(function()
      local info = vim.fn.complete_info({ 'items', 'pum_visible' })
      return #info.items > 0 and info.items
    end, function(items)
      result.menu = vim.tbl_map(function(it) return it.word end, items)
      log('menu shown')
      local before = typed
      result.line_before_accept = before
      -- Accept the item: <C-y> confirms the selected one (select the first if none is).
      local selected = vim.fn.complete_info({ 'selected' }).selected
      local keys = selected == -1 and '<C-n><C-y>' or '<C-y>'
      vim.api.nvim_feedkeys(vim.api.nvim_replace_termcodes(keys, true, false, true), 'nt', false)
      accepted_check(before)
    end, 'completion menu')
  end
end

poll(function() return client() ~= nil and client().initialized end, on_attached, 'the server to attach')
