package ctl

import (
	"flag"
	"os"
	"path/filepath"

	"github.com/hanzoai/lsp/proxy/internal/devstack"
)

// serversCmd renders the production reviewed-server template with a
// development install's paths (make deps writes .bin/servers.json so).
func serversCmd(args []string) error {
	fs := flag.NewFlagSet("servers", flag.ContinueOnError)
	tmpl := fs.String("template", "deploy/images/servers.json.in", "the reviewed-server template")
	bin := fs.String("bin", ".bin", "the install directory make deps filled")
	node := fs.String("node", "", "the node binary (default: node on PATH)")
	out := fs.String("out", ".bin/servers.json", "where to write the file")
	if err := fs.Parse(args); err != nil {
		return usageError(err.Error())
	}
	raw, err := os.ReadFile(*tmpl)
	if err != nil {
		return err
	}
	b, err := devstack.RenderServers(raw, devstack.Render{Bin: *bin, Node: *node})
	if err != nil {
		return err
	}
	tmp := filepath.Join(filepath.Dir(*out), "."+filepath.Base(*out)+".tmp")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, *out)
}
