package deps

import (
	"bufio"
	"bytes"
	"strings"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
)

// maxModulesTxt bounds vendor/modules.txt, a file of the tree.
const maxModulesTxt = 16 << 20

// vendorMeta is what vendor/modules.txt says of one module: its
// "# path version [=> new [version]]" line and its "## explicit" mark.
type vendorMeta struct {
	version  string
	replace  module.Version // Path "" when not replaced
	explicit bool
}

// parseModulesTxt reads vendor/modules.txt into module path@version (or
// path alone for a replacement of every version) → its metadata. Package
// lines are not needed to decide consistency and are skipped. Malformed
// module lines make the file unusable (ok false).
func parseModulesTxt(data []byte) (map[string]*vendorMeta, bool) {
	metas := map[string]*vendorMeta{}
	var cur *vendorMeta
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "## "):
			if cur == nil {
				if strings.TrimSpace(line) == "## workspace" {
					// Vendored for a go.work (go work vendor): outside
					// workspace mode the go command does not use it.
					return nil, false
				}
				continue // annotations of nothing
			}
			for _, a := range strings.Split(strings.TrimPrefix(line, "## "), ";") {
				if strings.TrimSpace(a) == "explicit" {
					cur.explicit = true
				}
			}
		case strings.HasPrefix(line, "# "):
			f := strings.Fields(line[2:])
			var m vendorMeta
			var key string
			switch {
			case len(f) == 2 && f[1] != "=>":
				key, m.version = f[0]+"@"+f[1], f[1]
			case len(f) >= 3 && f[1] == "=>":
				key = f[0]
				if !parseReplacement(f[2:], &m.replace) {
					return nil, false
				}
			case len(f) >= 4 && f[2] == "=>":
				key, m.version = f[0]+"@"+f[1], f[1]
				if !parseReplacement(f[3:], &m.replace) {
					return nil, false
				}
			default:
				return nil, false
			}
			if _, dup := metas[key]; dup {
				return nil, false
			}
			cur = &m
			metas[key] = cur
		}
	}
	if sc.Err() != nil {
		return nil, false
	}
	return metas, true
}

func parseReplacement(f []string, v *module.Version) bool {
	switch len(f) {
	case 1:
		*v = module.Version{Path: f[0]}
	case 2:
		*v = module.Version{Path: f[0], Version: f[1]}
	default:
		return false
	}
	return v.Path != ""
}

// vendorConsistent applies the go command's rule (modload's
// checkVendorConsistency) for a main module at go 1.14 or later: every
// requirement of go.mod is listed at its version and marked explicit,
// every module marked explicit is required at that version, and the
// replacements agree both ways.
func vendorConsistent(mf *modfile.File, metas map[string]*vendorMeta) bool {
	required := map[string]bool{}
	for _, r := range mf.Require {
		key := r.Mod.Path + "@" + r.Mod.Version
		m := metas[key]
		if m == nil || !m.explicit {
			return false
		}
		required[key] = true
	}
	for key, m := range metas {
		if m.explicit && !required[key] {
			return false
		}
	}
	replaced := map[string]bool{}
	for _, r := range mf.Replace {
		key := r.Old.Path
		if r.Old.Version != "" {
			key += "@" + r.Old.Version
		}
		m := metas[key]
		if m == nil {
			// A replacement of a version nothing vendored uses: the go
			// command accepts it only when no listed version is affected.
			if r.Old.Version == "" {
				for k, mm := range metas {
					if strings.HasPrefix(k, r.Old.Path+"@") && mm.replace != r.New {
						return false
					}
				}
				replaced[key] = true
			}
			continue
		}
		if m.replace != r.New {
			return false
		}
		replaced[key] = true
	}
	for key, m := range metas {
		if m.replace.Path == "" || replaced[key] {
			continue
		}
		// Listed as replaced: a whole-module replacement in go.mod covers it.
		p, _, _ := strings.Cut(key, "@")
		if !replaced[p] {
			return false
		}
	}
	return true
}
