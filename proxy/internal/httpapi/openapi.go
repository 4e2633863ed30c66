package httpapi

import _ "embed"

// OpenAPI is the normative schema of the API (CONTRACT §4), committed in
// openapi.json and served at GET /v1/lsp/openapi.json. A test fails when it
// and the registered routes drift apart.
//
//go:embed openapi.json
var OpenAPI []byte
