module github.com/hanzoai/lsp/migrations

go 1.26.8
