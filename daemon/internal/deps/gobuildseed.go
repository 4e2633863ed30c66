package deps

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/hanzoai/lsp/daemon/internal/runtime"
	"github.com/hanzoai/lsp/daemon/internal/safefs"
	"github.com/hanzoai/lsp/daemon/internal/workspace"
	"golang.org/x/sys/unix"
)

// A Go build cache seeded with the standard library.
//
// gopls's first load runs `go list -compiled -deps` over the module, and on
// an empty build cache the go command works out every standard-library
// package it lists anew — with a C compiler (the jail's CGO_ENABLED=1, as
// on an ordinary checkout) running cgo and gcc for net, os/user and
// runtime/cgo. On github.com/aws/aws-sdk-go that is 4.5 of its `go list`'s
// 8 s. None of it depends on a repository: it is the reviewed toolchain's
// own output for its own library. So the daemon makes it once, when it
// starts (BuildSeed), and the dependency phase copies it into each new
// home's build cache (seedBuildCache): every workspace still has a private
// cache that only its own servers write, and the seed holds nothing a
// tenant made. A home whose cache is not empty (a later revision of the
// repository) keeps its own.

// seedTimeout bounds the making of the seed.
const seedTimeout = 3 * time.Minute

// buildCacheRel is the build cache's place in a home (runtime.Environment's
// GOCACHE).
const buildCacheRel = ".cache/go-build"

// BuildSeed is the daemon's standard-library build cache, made in the
// background; a prepare never waits for it.
type BuildSeed struct {
	done chan struct{}
	dir  string // the finished cache, "" when it could not be made
}

// NewBuildSeed starts making the seed under root (a daemon-owned directory,
// emptied first) with env, the environment the Go servers get (the
// spawner's, with its compiler variables), and the go command on its PATH,
// the one they run; GOCACHE, TMPDIR and HOME are replaced by places under
// root. The cache appears at root/go-build only once the go command has
// finished with it.
func NewBuildSeed(ctx context.Context, root string, env []string, log *slog.Logger) *BuildSeed {
	s := &BuildSeed{done: make(chan struct{})}
	go func() {
		defer close(s.done)
		start := time.Now()
		dir, err := makeBuildSeed(ctx, root, env)
		if err != nil {
			log.Warn("go build cache seed not made: each workspace's first load builds the standard library itself", "err", err)
			return
		}
		s.dir = dir
		log.Info("go build cache seed made", "took_ms", time.Since(start).Milliseconds())
	}()
	return s
}

// Wait blocks until the seed is made or failed, or ctx ends (for tests
// and for shutting down).
func (s *BuildSeed) Wait(ctx context.Context) bool {
	select {
	case <-s.done:
		return s.dir != ""
	case <-ctx.Done():
		return false
	}
}

// ready is the finished seed, without waiting.
func (s *BuildSeed) ready() (string, bool) {
	if s == nil {
		return "", false
	}
	select {
	case <-s.done:
		return s.dir, s.dir != ""
	default:
		return "", false
	}
}

func makeBuildSeed(ctx context.Context, root string, env []string) (string, error) {
	goBin, err := goOnPath(env)
	if err != nil {
		return "", err
	}
	var e []string
	for _, kv := range env {
		switch k, _, _ := strings.Cut(kv, "="); k {
		case "GOCACHE", "TMPDIR", "HOME", "XDG_CONFIG_HOME":
		default:
			e = append(e, kv)
		}
	}
	// A seed made before with the same go command and environment (a
	// daemon restart) is the same cache: kept.
	stamp, err := seedStamp(ctx, goBin, e)
	if err != nil {
		return "", err
	}
	final := filepath.Join(root, "go-build")
	if b, err := os.ReadFile(filepath.Join(root, "stamp")); err == nil && string(b) == stamp {
		if fi, err := os.Stat(final); err == nil && fi.IsDir() {
			return final, nil
		}
	}
	if err := workspace.RemoveAll(root); err != nil {
		return "", err
	}
	work := filepath.Join(root, "work")
	for _, d := range []string{filepath.Join(work, "tmp"), filepath.Join(work, "cwd"), filepath.Dir(filepath.Join(work, runtime.TelemetryModeFile))} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return "", err
		}
	}
	// Telemetry off, as in every server's home: in its default mode the go
	// command leaves a child behind that writes into HOME after it has
	// exited, and removing HOME below then failed ("directory not empty"),
	// and the whole seed with it.
	if err := os.WriteFile(filepath.Join(work, runtime.TelemetryModeFile), []byte(runtime.TelemetryOff), 0o600); err != nil {
		return "", err
	}
	cache := filepath.Join(work, "go-build")
	e = append(e, "GOCACHE="+cache, "TMPDIR="+filepath.Join(work, "tmp"), "HOME="+work)
	ctx, cancel := context.WithTimeout(ctx, seedTimeout)
	defer cancel()
	// The flags gopls's load passes (go/packages), over the standard
	// library alone, from an empty directory: no module, no tenant file.
	cmd := exec.CommandContext(ctx, goBin, "list", "-e", "-json=ImportPath", "-compiled=true", "-test=false",
		"-export=false", "-deps=true", "-find=false", "-pgo=off", "--", "std")
	cmd.Dir, cmd.Env = filepath.Join(work, "cwd"), e
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = io.Discard, &stderr
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("go list std: %w", err)
	}
	// Background work: the go command and the compilers it starts
	// yield the CPU to the servers answering queries.
	_ = unix.Setpriority(unix.PRIO_PROCESS, cmd.Process.Pid, seedNice)
	if err := cmd.Wait(); err != nil {
		return "", fmt.Errorf("go list std: %w: %s", err, clip(stderr.String(), 2048))
	}
	if err := os.Rename(cache, final); err != nil {
		return "", err
	}
	// The seed is made; what else the go command left is of no use, and
	// goes with the next seed's RemoveAll(root) if it will not now.
	_ = workspace.RemoveAll(work)
	return final, os.WriteFile(filepath.Join(root, "stamp"), []byte(stamp), 0o600)
}

// seedNice is the niceness the seed is made at.
const seedNice = 10

// seedStamp names what the seed's content follows from: the go command
// (its path, size, time and version) and the environment it runs in.
func seedStamp(ctx context.Context, goBin string, env []string) (string, error) {
	fi, err := os.Stat(goBin)
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, goBin, "version")
	cmd.Env = env
	v, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go version: %w", err)
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%d\n%d\n%s\n", goBin, fi.Size(), fi.ModTime().UnixNano(), v)
	sorted := slices.Clone(env)
	slices.Sort(sorted)
	for _, kv := range sorted {
		fmt.Fprintf(h, "%s\x00", kv)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// goOnPath is the go command the PATH of env finds: an executable regular
// file (links resolved; the toolchain is the operator's, outside any home).
func goOnPath(env []string) (string, error) {
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			for _, d := range filepath.SplitList(v) {
				p := filepath.Join(d, "go")
				if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
					return p, nil
				}
			}
		}
	}
	return "", errors.New("no go command on the Go servers' PATH")
}

// seedBuildCache copies seed into ws's home as its build cache when the
// home has none or an empty one. The copy is staged beside the tree
// (daemon-owned), given to the home's owner, and moved in through safefs:
// a home may hold links its servers planted, and none is followed.
func seedBuildCache(ws runtime.Workspace, seed string) (seeded bool, err error) {
	if inHome(ws.Home, buildCacheRel) {
		if empty, err := emptyInHome(ws.Home, buildCacheRel); err != nil || !empty {
			return false, err
		}
	}
	stage, err := os.MkdirTemp(filepath.Dir(ws.Root), ".gobuild-")
	if err != nil {
		return false, err
	}
	defer workspace.RemoveAll(stage)
	h, err := safefs.Open(ws.Home)
	if err != nil {
		return false, err
	}
	owner, err := h.Owner()
	h.Close()
	if err != nil {
		return false, err
	}
	if err := copySeed(seed, filepath.Join(stage, "go-build"), owner); err != nil {
		return false, err
	}
	src, err := safefs.Open(stage)
	if err != nil {
		return false, err
	}
	defer src.Close()
	d, _, err := openHomeDir(ws.Home, filepath.ToSlash(filepath.Dir(buildCacheRel)))
	if err != nil {
		return false, err
	}
	defer d.Close()
	kept, err := d.MoveIn(src, filepath.Base(buildCacheRel), 0)
	return err == nil && !kept, err
}

// emptyInHome reports whether the directory rel beneath home has no
// entry, never following a link (a link there is not empty: MoveIn then
// replaces it, it is never followed).
func emptyInHome(home, rel string) (bool, error) {
	h, err := safefs.Open(home)
	if err != nil {
		return false, err
	}
	defer h.Close()
	d, err := h.OpenDir(rel)
	if err != nil {
		return false, nil
	}
	defer d.Close()
	names, err := d.ReadNames(1)
	return err == nil && len(names) == 0, err
}

// copySeed copies the seed's directories and regular files (nothing else
// is in a build cache) into dst, owned by owner. Both sides are
// daemon-owned, so walking them by path is safe.
func copySeed(seed, dst string, owner safefs.Owner) error {
	return filepath.WalkDir(seed, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(seed, p)
		if err != nil {
			return err
		}
		to := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			err = os.Mkdir(to, 0o700)
		case d.Type().IsRegular():
			err = copyFile(p, to)
		default:
			return nil
		}
		if err == nil && owner != safefs.Keep {
			err = os.Lchown(to, owner.UID, owner.GID)
		}
		return err
	})
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
