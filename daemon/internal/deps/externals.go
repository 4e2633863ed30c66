package deps

import (
	"encoding/json"
	"path/filepath"
	"sort"

	"github.com/hanzoai/lsp/daemon/internal/runtime"
	"github.com/hanzoai/lsp/daemon/internal/uri"
)

// NPMExternals names the npm packages installed for ws as external roots,
// one per package directory, module "name@version" as the Go module cache
// names its modules ("lodash@4.17.21", "@types/node@20.11.0"). Nested
// packages (a/node_modules/b) come before their parents, because the URI
// policy takes the first root a path is under. Nothing installed: none.
func NPMExternals(ws runtime.Workspace) []uri.External {
	nm := runtime.NodeModules(ws)
	data, err := readRegular(runtime.NPMIndex(ws), maxIndex)
	if err != nil {
		return nil
	}
	var idx []indexEntry
	if json.Unmarshal(data, &idx) != nil {
		return nil
	}
	out := make([]uri.External, 0, len(idx))
	for _, e := range idx {
		// The index is the phase's own file; still, only package
		// directories below node_modules become roots.
		if !installPath("node_modules/"+e.Dir) || e.Module == "" {
			continue
		}
		out = append(out, uri.External{Dir: filepath.Join(nm, filepath.FromSlash(e.Dir)), Module: e.Module})
	}
	sort.SliceStable(out, func(i, j int) bool { return len(out[i].Dir) > len(out[j].Dir) })
	return out
}
