package deps

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync/atomic"

	"github.com/hanzoai/lsp/daemon/internal/safefs"
	"github.com/hanzoai/lsp/daemon/internal/workspace"
)

// modCacheRel is the module cache's place in a home (runtime.ModCache).
const modCacheRel = "go/pkg/mod"

// goCache is the module cache of a home as the phase fills it. The home
// belongs to the jail's uid and its servers of other revisions may be
// running, so the phase never writes there by path: what it downloads is
// staged in a daemon-owned directory beside the tree, given to the home's
// owner, and moved in at the end one directory at a time through
// descriptors opened without following a link (safefs, home.go). What is
// already in the home is read the same way.
type goCache struct {
	home  string
	stage string
	// unpacked is what the phase's module zips may still unpack to
	// (charge).
	unpacked atomic.Int64
}

// newGoCache makes the stage in dir, a daemon-owned directory; its zips may
// unpack to maxBytes in all.
func newGoCache(home, dir string, maxBytes int64) (*goCache, error) {
	stage, err := os.MkdirTemp(dir, ".gomodcache-")
	if err != nil {
		return nil, err
	}
	c := &goCache{home: home, stage: stage}
	c.unpacked.Store(maxBytes)
	return c, nil
}

// charge takes n bytes from the unpacked budget: errTooLarge, taking
// nothing, when fewer are left.
func (c *goCache) charge(n int64) error {
	if c.unpacked.Add(-n) < 0 {
		c.unpacked.Add(n)
		return errTooLarge
	}
	return nil
}

// refund gives back what a zip that was not unpacked was charged.
func (c *goCache) refund(n int64) { c.unpacked.Add(n) }

// staged is the stage's path of a cache-relative slash path.
func (c *goCache) staged(rel string) string { return filepath.Join(c.stage, filepath.FromSlash(rel)) }

// read reads a cache-relative file of the home's cache.
func (c *goCache) read(rel string, max int64) ([]byte, error) {
	return readHome(c.home, modCacheRel+"/"+rel, max)
}

// inHome reports whether a cache-relative path exists in the home's cache.
func (c *goCache) inHome(rel string) bool { return inHome(c.home, modCacheRel+"/"+rel) }

// close removes the stage.
func (c *goCache) close() error { return workspace.RemoveAll(c.stage) }

// install moves everything staged into the home's cache: files replace
// what is there, an extracted module directory (a name with "@" outside
// cache/) is moved whole and kept if one is there already. Everything is
// given to the home's owner first.
func (c *goCache) install() error {
	if err := c.chown(); err != nil {
		return fmt.Errorf("give the staged cache to the home's owner: %w", err)
	}
	return c.installDir("")
}

func (c *goCache) installDir(rel string) error {
	ents, err := os.ReadDir(c.staged(rel))
	if err != nil {
		return err
	}
	if len(ents) == 0 {
		return nil
	}
	src, err := safefs.Open(c.staged(rel))
	if err != nil {
		return err
	}
	defer src.Close()
	d, _, err := openHomeDir(c.home, path.Join(modCacheRel, rel))
	if err != nil {
		return err
	}
	defer d.Close()
	for _, e := range ents {
		name := e.Name()
		if strings.HasPrefix(name, ".") {
			continue // a temporary file of a download that failed
		}
		sub := path.Join(rel, name)
		switch {
		case e.IsDir() && strings.Contains(name, "@") && !strings.HasPrefix(sub, "cache/"):
			if _, err := d.MoveIn(src, name, 0o555); err != nil {
				return err
			}
		case e.IsDir():
			if err := c.installDir(sub); err != nil {
				return err
			}
		case e.Type().IsRegular():
			if _, err := d.MoveIn(src, name, 0); err != nil {
				return err
			}
		}
	}
	return nil
}

// chown gives the stage to the home's owner; the stage is daemon-owned,
// so a walk by path is safe there. A moved module directory must keep
// write permission for its owner until it is in place (a directory moved
// to another parent updates its ".."), so its top is opened up here and
// made read-only again after the move.
func (c *goCache) chown() error {
	h, err := safefs.Open(c.home)
	if err != nil {
		return err
	}
	o, err := h.Owner()
	h.Close()
	if err != nil {
		return err
	}
	return filepath.WalkDir(c.stage, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(c.stage, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() && strings.Contains(d.Name(), "@") && !strings.HasPrefix(rel, "cache/") && rel != "." {
			if err := os.Chmod(p, 0o755); err != nil {
				return err
			}
		}
		if o == safefs.Keep {
			return nil
		}
		return os.Lchown(p, o.UID, o.GID)
	})
}
