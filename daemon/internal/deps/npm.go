package deps

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"

	"github.com/hanzoai/lsp/daemon/internal/runtime"
)

// Bounds on a package-lock.json.
const (
	maxLockfile     = 32 << 20
	maxLockPackages = 20000
)

// errLockfile is a lockfile the phase refuses; its message says why.
var errLockfile = errors.New("package-lock.json refused")

// lockfile is the part of package-lock.json the phase reads.
type lockfile struct {
	LockfileVersion int                        `json:"lockfileVersion"`
	Packages        map[string]lockPackage     `json:"packages"`
	Dependencies    map[string]json.RawMessage `json:"dependencies"`
}

type lockPackage struct {
	Name                 string            `json:"name"`
	Version              string            `json:"version"`
	Resolved             string            `json:"resolved"`
	Integrity            string            `json:"integrity"`
	Link                 bool              `json:"link"`
	InBundle             bool              `json:"inBundle"`
	Optional             bool              `json:"optional"`
	OS                   []string          `json:"os"`
	CPU                  []string          `json:"cpu"`
	Dependencies         map[string]string `json:"dependencies"`
	DevDependencies      map[string]string `json:"devDependencies"`
	OptionalDependencies map[string]string `json:"optionalDependencies"`
	PeerDependencies     map[string]string `json:"peerDependencies"`
}

// installNPM validates the tree's root package-lock.json against the
// registry and, when it holds, installs its packages beside the tree.
func (f *Fetcher) installNPM(ctx context.Context, ws runtime.Workspace, left *atomic.Int64, w *warnings) {
	data, err := readRegular(filepath.Join(ws.Root, "package-lock.json"), maxLockfile)
	if errors.Is(err, fs.ErrNotExist) {
		f.installYarn(ctx, ws, left, w) // yarn.go: a yarn.lock, if any
		return
	}
	if err != nil {
		w.add("package-lock.json: %s; npm packages were not installed", reason(err))
		return
	}
	n, err := ValidateLockfile(data, f.cfg.NPMRegistry)
	if err != nil {
		w.add("%s; npm packages were not installed", err.Error())
		return
	}
	if n == 0 {
		return
	}
	var lf lockfile
	if err := json.Unmarshal(data, &lf); err != nil {
		return // ValidateLockfile parsed it
	}
	f.install(ctx, runtime.NodeModules(ws), lf.Packages, left, w)
}

// ValidateLockfile checks a package-lock.json (lockfile version 2 or 3):
// every package resolves to a tarball under registry with a sha512
// integrity, and no spec names git, a file, a link or a plain URL. It
// returns how many packages the lockfile installs. It makes no request.
func ValidateLockfile(data []byte, registry *url.URL) (int, error) {
	var lf lockfile
	if err := json.Unmarshal(data, &lf); err != nil {
		return 0, fmt.Errorf("%w: it is not JSON", errLockfile)
	}
	if lf.LockfileVersion != 2 && lf.LockfileVersion != 3 {
		return 0, fmt.Errorf("%w: lockfileVersion %d is not 2 or 3", errLockfile, lf.LockfileVersion)
	}
	if len(lf.Packages) > maxLockPackages {
		return 0, fmt.Errorf("%w: %d packages, over the bound of %d", errLockfile, len(lf.Packages), maxLockPackages)
	}
	keys := make([]string, 0, len(lf.Packages))
	for k := range lf.Packages {
		keys = append(keys, k)
	}
	// The first refusal in key order, so that the warning is stable.
	sort.Strings(keys)
	n := 0
	for _, k := range keys {
		p := lf.Packages[k]
		for _, deps := range []map[string]string{p.Dependencies, p.DevDependencies, p.OptionalDependencies, p.PeerDependencies} {
			for name, spec := range deps {
				if kind := specKind(spec); kind != "" {
					return 0, fmt.Errorf("%w: package %s has a %s dependency (%s)", errLockfile, quote(k), kind, quote(name))
				}
			}
		}
		if k == "" {
			continue // the project itself
		}
		if !lockPath(k) {
			return 0, fmt.Errorf("%w: package path %s is not under node_modules", errLockfile, quote(k))
		}
		if p.Link {
			return 0, fmt.Errorf("%w: package %s is a link", errLockfile, quote(k))
		}
		if kind := specKind(p.Version); kind != "" {
			return 0, fmt.Errorf("%w: package %s has a %s version", errLockfile, quote(k), kind)
		}
		if p.InBundle {
			continue // inside its parent's verified tarball
		}
		if p.Resolved == "" {
			return 0, fmt.Errorf("%w: package %s has no resolved URL", errLockfile, quote(k))
		}
		if !underRegistry(p.Resolved, registry) {
			return 0, fmt.Errorf("%w: package %s resolves outside the registry", errLockfile, quote(k))
		}
		if !sha512Integrity(p.Integrity) {
			return 0, fmt.Errorf("%w: package %s has no sha512 integrity", errLockfile, quote(k))
		}
		n++
	}
	return n, nil
}

// specKind names a dependency spec that does not come from the registry:
// git, a file or directory, a link, a tarball URL, a GitHub shorthand.
func specKind(spec string) string {
	s := strings.ToLower(strings.TrimSpace(spec))
	s = strings.TrimPrefix(s, "npm:") // an alias; its target is checked below
	if i := strings.LastIndex(s, "@"); i > 0 && strings.HasPrefix(spec, "npm:") {
		s = s[i+1:]
	}
	switch {
	case strings.HasPrefix(s, "git") || strings.Contains(s, "://") && strings.Contains(s, ".git"):
		return "git"
	case strings.HasPrefix(s, "github:") || strings.HasPrefix(s, "gitlab:") || strings.HasPrefix(s, "bitbucket:") || strings.HasPrefix(s, "gist:"):
		return "git"
	case strings.HasPrefix(s, "file:") || strings.HasPrefix(s, ".") || strings.HasPrefix(s, "/") || strings.HasPrefix(s, "~"):
		return "file"
	case strings.HasPrefix(s, "link:") || strings.HasPrefix(s, "workspace:") || strings.HasPrefix(s, "portal:"):
		return "link"
	case strings.HasPrefix(s, "http:") || strings.HasPrefix(s, "https:") || strings.Contains(s, "://"):
		return "URL"
	case !strings.HasPrefix(s, "@") && strings.Contains(s, "/") && !strings.ContainsAny(s, " <>=^~|"):
		return "git" // user/repo is GitHub shorthand
	}
	return ""
}

// lockPath: node_modules/a, node_modules/@s/a, node_modules/a/node_modules/b …
func lockPath(k string) bool {
	if len(k) > 1024 || strings.Contains(k, "\\") {
		return false
	}
	segs := strings.Split(k, "/")
	for i := 0; i < len(segs); {
		if segs[i] != "node_modules" || i+1 >= len(segs) {
			return false
		}
		i++
		if strings.HasPrefix(segs[i], "@") {
			if !npmName(segs[i][1:]) || i+1 >= len(segs) {
				return false
			}
			i++
		}
		if !npmName(segs[i]) {
			return false
		}
		i++
	}
	return true
}

func npmName(s string) bool {
	if s == "" || len(s) > 214 || s[0] == '.' || s[0] == '_' {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("-._~!*'()", c)) {
			return false
		}
	}
	return true
}

// underRegistry: an https (or the registry's own scheme) URL on the
// registry's host whose path is under the registry's path, with no
// credentials and no dot segments.
func underRegistry(resolved string, registry *url.URL) bool {
	u, err := url.Parse(resolved)
	if err != nil || registry == nil {
		return false
	}
	if u.Scheme != registry.Scheme || u.Host != registry.Host || u.User != nil || u.Opaque != "" || u.Fragment != "" {
		return false
	}
	p := u.EscapedPath()
	if strings.Contains(p, "/../") || strings.Contains(p, "/./") || strings.HasSuffix(p, "/..") || strings.Contains(strings.ToLower(p), "%2e") || strings.Contains(strings.ToLower(p), "%2f") {
		return false
	}
	return strings.HasPrefix(p, registry.EscapedPath()+"/")
}

// sha512Integrity: an SRI string with a well-formed sha512 hash. Other
// hashes may accompany it; sha1 alone is refused.
func sha512Integrity(s string) bool {
	for _, f := range strings.Fields(s) {
		if b64, ok := strings.CutPrefix(f, "sha512-"); ok {
			if i := strings.IndexByte(b64, '?'); i >= 0 {
				b64 = b64[:i]
			}
			if b, err := base64.StdEncoding.DecodeString(b64); err == nil && len(b) == 64 {
				return true
			}
		}
	}
	return false
}

// quote bounds and quotes tenant text for a warning.
func quote(s string) string {
	if len(s) > 80 {
		s = s[:80] + "…"
	}
	return fmt.Sprintf("%q", s)
}
