package devstack

import (
	"fmt"
	"strings"
)

// ParseDaemonEnv reads a -daemon-env flag of the measuring tools
// (lsp-bench, lsp-corpus): comma-separated KEY=value pairs, each key one
// of the daemon's own variables (LSP_*), for Options.DaemonEnv. A figure
// measured with one is never the product's unless the product sets it.
func ParseDaemonEnv(s string) (map[string]string, error) {
	out := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		if kv = strings.TrimSpace(kv); kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		if !ok || !strings.HasPrefix(k, "LSP_") || len(k) == len("LSP_") {
			return nil, fmt.Errorf("-daemon-env: %q is not LSP_NAME=value", kv)
		}
		out[k] = v
	}
	return out, nil
}
