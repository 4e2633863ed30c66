-- Drives `lspctl lsp` from Neovim 0.7 (headless): attach the bridge to
-- main.go of a local checkout, ask hover and definition, edit the buffer
-- and ask again, and write what the editor received as JSON to
-- $BRIDGE_OUT. Any Lua error is written there too, so the Go test sees it.
local out = {progress = {}, logs = {}, diagnostics = {}}
local function finish()
  local f = assert(io.open(vim.env.BRIDGE_OUT, 'w'))
  f:write(vim.fn.json_encode(out))
  f:close()
  vim.cmd('qall!')
end

local ok, err = pcall(function()
  local root = vim.env.BRIDGE_ROOT
  local initialized = false
  local client_id = vim.lsp.start_client({
    cmd = {vim.env.LSPCTL, 'lsp', '--repo', vim.env.BRIDGE_REPO, '--log', vim.env.BRIDGE_LOG},
    root_dir = root,
    flags = {debounce_text_changes = 0},
    on_init = function(_, result)
      out.capabilities = result.capabilities
      initialized = true
    end,
    handlers = {
      ['$/progress'] = function(_, result)
        table.insert(out.progress, result.value.kind)
      end,
      ['window/logMessage'] = function(_, result)
        table.insert(out.logs, result.message)
      end,
      ['textDocument/publishDiagnostics'] = function(_, result)
        table.insert(out.diagnostics, {uri = result.uri, count = #result.diagnostics})
      end,
    },
  })
  assert(client_id, 'start_client failed')
  vim.cmd('edit ' .. root .. '/main.go')
  local bufnr = vim.api.nvim_get_current_buf()
  vim.lsp.buf_attach_client(bufnr, client_id)
  assert(vim.wait(180000, function() return initialized end, 50), 'the bridge did not initialize')

  local uri = vim.uri_from_bufnr(bufnr)
  local function ask(method, line, character)
    local res, e = vim.lsp.buf_request_sync(bufnr, method,
      {textDocument = {uri = uri}, position = {line = line, character = character}}, 120000)
    assert(res, method .. ': ' .. tostring(e))
    local r = res[client_id]
    assert(r, method .. ': no answer from the bridge')
    assert(not r.err, method .. ': ' .. vim.inspect(r.err))
    return r.result
  end
  -- greet.Hello in fmt.Println(greet.Hello("world"), ...) on line 11.
  out.hover = ask('textDocument/hover', 10, 20)
  out.definition = ask('textDocument/definition', 10, 20)
  -- fmt.Println is in the standard library: an external location.
  out.external = ask('textDocument/definition', 10, 6)
  assert(vim.wait(60000, function() return #out.diagnostics > 0 end, 50), 'no diagnostics were published')

  -- An edit past the last line keeps the positions; the buffer now
  -- differs from the revision, so the answer is stale.
  vim.api.nvim_buf_set_lines(bufnr, -1, -1, false, {'// edited'})
  out.stale_hover = ask('textDocument/hover', 10, 20)
  vim.lsp.stop_client(client_id)
  vim.wait(10000, function() return vim.lsp.client_is_stopped(client_id) end, 50)
end)
if not ok then
  out.error = tostring(err)
end
finish()
