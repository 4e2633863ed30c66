//go:build linux && lspbench

package jail

import (
	"log/slog"
	"os"
	"strings"
)

// benchHoles reads LSP_BENCH_JAIL_OFF, a comma-separated list of the jail's
// pieces to switch off, so that the jail-price bench (lsp-bench -sections
// jail) can say what each costs: seccomp, init (bwrap runs the server
// itself, without the in-jail init and its rlimits), pids (no pids cgroup),
// memory (no memory cgroup), jail-memory (jails share the pool's memory
// cgroup instead of one each; cgroup v1 only). On cgroup v2, where one
// directory holds both controllers, pids or memory leaves the jail without
// its cgroup altogether. Pieces are separated by commas or by "+" (the
// bench's -daemon-env already splits on commas). Only a daemon built with
// -tags lspbench reads it; the product's builds have no such variable (benchknobs.go).
func benchHoles(log *slog.Logger) holes {
	var h holes
	for _, k := range strings.FieldsFunc(os.Getenv("LSP_BENCH_JAIL_OFF"), func(r rune) bool { return r == ',' || r == '+' }) {
		switch strings.TrimSpace(k) {
		case "":
		case "seccomp":
			h.noSeccomp = true
		case "init":
			h.noInit = true
		case "pids", "memory":
			if h.noCtrl == nil {
				h.noCtrl = map[string]bool{}
			}
			h.noCtrl[strings.TrimSpace(k)] = true
		case "jail-memory":
			h.jailInShare = true
		default:
			log.Error("LSP_BENCH_JAIL_OFF: unknown piece, ignored", "piece", k)
			continue
		}
		log.Warn("BENCH BUILD: a piece of the jail is switched off; never the product's figures", "off", k)
	}
	return h
}
