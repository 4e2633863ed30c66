package jsonrpc

import (
	"encoding/json"
	"testing"
)

// A request written directly is the JSON-RPC envelope a peer decodes: the
// id, the method however it must be escaped, and the params as given.
func TestEncodeRequest(t *testing.T) {
	for _, tc := range []struct {
		name   string
		method string
		params json.RawMessage
	}{
		{"no params", "shutdown", nil},
		{"object", "textDocument/hover", json.RawMessage(`{"position":{"line":1,"character":2}}`)},
		{"raw with spaces", "m", json.RawMessage(" [1, 2,\n 3] ")},
		{"method needing escapes", "a\"b\\c\u2028<d>", json.RawMessage(`null`)},
	} {
		b, err := encodeRequest(42, tc.method, tc.params)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		var m wireMsg
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("%s: %q does not decode: %v", tc.name, b, err)
		}
		if m.JSONRPC != "2.0" || string(m.ID) != "42" || m.Method != tc.method {
			t.Errorf("%s: decoded %+v", tc.name, m)
		}
		if tc.params == nil && m.Params != nil {
			t.Errorf("%s: params %s, want none", tc.name, m.Params)
		}
		if tc.params != nil {
			var want, got any
			_ = json.Unmarshal(tc.params, &want)
			_ = json.Unmarshal(m.Params, &got)
			wb, _ := json.Marshal(want)
			gb, _ := json.Marshal(got)
			if string(wb) != string(gb) {
				t.Errorf("%s: params %s, want %s", tc.name, m.Params, tc.params)
			}
		}
	}
}
