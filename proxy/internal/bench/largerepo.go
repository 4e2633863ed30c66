package bench

import (
	"archive/zip"
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// The large-prepare figure needs a real repository of a few thousand files.
// It takes one from the Go module proxy: the go command downloads a module
// zip (and every module its build needs) into a cache that outlives the run,
// and the zip becomes one commit of a bare repository on the dev forge. The
// cache's download directory is laid out as a GOPROXY, so it doubles as the
// dependency mirror both sides of the comparison use.

// moduleSource is a module fetched into the bench's cache.
type moduleSource struct {
	Path, Version string
	Zip           string // the module's zip
	// Mirror is a file:// GOPROXY holding the module and every module its
	// build list names.
	Mirror string
}

// benchCacheDir is where downloads survive between runs:
// $XDG_CACHE_HOME/lsp-bench (or ~/.cache/lsp-bench), else .cache/lsp-bench
// in the working directory (the checkout, under make).
func benchCacheDir() (string, error) {
	d, err := os.UserCacheDir()
	if err != nil {
		if d, err = filepath.Abs(".cache"); err != nil {
			return "", fmt.Errorf("cache dir: %w", err)
		}
	}
	return filepath.Join(d, "lsp-bench"), nil
}

// fetchModule downloads modVer ("path@version") and its build list with the
// go command from the machine's GOPROXY into cacheDir. A second call with
// the same cache makes no request: a stamp records a complete download.
func fetchModule(ctx context.Context, cacheDir, modVer string) (*moduleSource, error) {
	path, version, ok := strings.Cut(modVer, "@")
	if !ok || path == "" || version == "" {
		return nil, fmt.Errorf("fetch module: %q is not path@version", modVer)
	}
	modcache := filepath.Join(cacheDir, "modcache")
	src := &moduleSource{Path: path, Version: version, Mirror: "file://" + filepath.Join(modcache, "cache", "download")}
	stamp := filepath.Join(cacheDir, "complete", strings.ReplaceAll(modVer, "/", "_"))

	env := goEnv(modcache)
	var info struct{ Zip, Dir, GoMod, Error string }
	out, err := runIn(ctx, cacheDir, env, "go", "mod", "download", "-json", modVer)
	if jerr := json.Unmarshal(out, &info); jerr != nil && err == nil {
		err = jerr
	}
	if info.Error != "" {
		err = errors.New(info.Error)
	}
	if err != nil {
		return nil, fmt.Errorf("fetch module %s: %w", modVer, err)
	}
	src.Zip = info.Zip
	if _, err := os.Stat(stamp); err == nil {
		return src, nil
	}
	// The build list's modules, downloaded from a scratch main module with
	// the module's own go.mod and go.sum.
	scratch, err := os.MkdirTemp(cacheDir, "deps-")
	if err != nil {
		return nil, fmt.Errorf("fetch module deps: %w", err)
	}
	defer os.RemoveAll(scratch)
	for _, f := range []string{"go.mod", "go.sum"} {
		b, err := os.ReadFile(filepath.Join(info.Dir, f))
		if errors.Is(err, os.ErrNotExist) && f == "go.sum" {
			continue
		}
		if err == nil {
			err = os.WriteFile(filepath.Join(scratch, f), b, 0o644)
		}
		if err != nil {
			return nil, fmt.Errorf("fetch module deps: %w", err)
		}
	}
	if _, err := runIn(ctx, scratch, env, "go", "mod", "download", "all"); err != nil {
		return nil, fmt.Errorf("fetch module deps of %s: %w", modVer, err)
	}
	if err := os.MkdirAll(filepath.Dir(stamp), 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(stamp, []byte(time.Now().UTC().Format(time.RFC3339)+"\n"), 0o644); err != nil {
		return nil, err
	}
	return src, nil
}

// goEnv is the machine's environment (its GOPROXY and GOSUMDB included)
// with the module cache moved to modcache and nothing of the checkout's
// workspace.
func goEnv(modcache string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "GOMODCACHE", "GOFLAGS", "GOWORK", "GOTOOLCHAIN":
			continue
		}
		env = append(env, kv)
	}
	return append(env, "GOMODCACHE="+modcache, "GOFLAGS=-modcacherw -mod=mod", "GOWORK=off", "GOTOOLCHAIN=local")
}

func runIn(ctx context.Context, dir string, env []string, name string, args ...string) ([]byte, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir, cmd.Env = dir, env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// modulePrefix is the "path@version/" every entry of a module zip starts
// with, taken from the first entry's name.
func modulePrefix(name string) (string, error) {
	at := strings.IndexByte(name, '@')
	if at <= 0 {
		return "", fmt.Errorf("zip entry %q: no module@version prefix", name)
	}
	slash := strings.IndexByte(name[at:], '/')
	if slash <= 1 {
		return "", fmt.Errorf("zip entry %q: no module@version prefix", name)
	}
	return name[:at+slash+1], nil
}

// importModuleZip creates the bare repository bare (branch main, partial
// fetches allowed, as the dev forge's own repositories) with one commit
// whose tree is the zip's files, the module@version/ prefix stripped. It
// streams the zip into git fast-import, so a large module never sits in
// memory whole. It returns the commit and the number of files.
func importModuleZip(ctx context.Context, zipPath, bare string) (commit string, files int, err error) {
	zr, err := zip.OpenReader(zipPath)
	if err != nil {
		return "", 0, fmt.Errorf("import module zip: %w", err)
	}
	defer zr.Close()
	if len(zr.File) == 0 {
		return "", 0, errors.New("import module zip: empty zip")
	}
	prefix, err := modulePrefix(zr.File[0].Name)
	if err != nil {
		return "", 0, fmt.Errorf("import module zip: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(bare), 0o755); err != nil {
		return "", 0, fmt.Errorf("import module zip: %w", err)
	}
	if _, err := runIn(ctx, filepath.Dir(bare), nil, "git", "init", "--quiet", "--bare", "--template=", "--initial-branch=main", bare); err != nil {
		return "", 0, fmt.Errorf("import module zip: %w", err)
	}
	if _, err := runIn(ctx, bare, nil, "git", "config", "uploadpack.allowFilter", "true"); err != nil {
		return "", 0, fmt.Errorf("import module zip: %w", err)
	}
	files, err = fastImport(ctx, bare, func(w *bufio.Writer) (int, error) {
		fmt.Fprintf(w, "commit refs/heads/main\ncommitter lsp-bench <bench@localhost> %d +0000\n", time.Now().Unix())
		msg := "import " + strings.TrimSuffix(prefix, "/")
		fmt.Fprintf(w, "data %d\n%s\n", len(msg), msg)
		n := 0
		for _, f := range zr.File {
			if strings.HasSuffix(f.Name, "/") {
				continue // a directory entry
			}
			rel, ok := strings.CutPrefix(f.Name, prefix)
			if !ok || rel == "" || strings.ContainsAny(rel, "\n\"") || strings.HasPrefix(rel, "/") {
				return 0, fmt.Errorf("zip entry %q: not a file below %s", f.Name, prefix)
			}
			if f.UncompressedSize64 > 1<<30 {
				return 0, fmt.Errorf("zip entry %q: too large", f.Name)
			}
			fmt.Fprintf(w, "M 100644 inline %s\ndata %d\n", rel, f.UncompressedSize64)
			r, err := f.Open()
			if err != nil {
				return 0, err
			}
			// The zip's checksum is checked when the reader hits EOF.
			c, err := io.Copy(w, r)
			r.Close()
			if err != nil {
				return 0, fmt.Errorf("zip entry %q: %w", f.Name, err)
			}
			if c != int64(f.UncompressedSize64) {
				return 0, fmt.Errorf("zip entry %q: %d bytes, header says %d", f.Name, c, f.UncompressedSize64)
			}
			w.WriteByte('\n')
			n++
		}
		return n, nil
	})
	if err != nil {
		return "", 0, fmt.Errorf("import module zip: %w", err)
	}
	commit, err = revParse(ctx, bare, "main")
	return commit, files, err
}

// importCached is importModuleZip into cacheDir, done once per module
// version: a later run reuses the repository (importing a large module
// costs more than a run of the figure).
func importCached(ctx context.Context, cacheDir string, src *moduleSource) (bare string, files int, err error) {
	bare = filepath.Join(cacheDir, "repos", strings.ReplaceAll(src.Path+"@"+src.Version, "/", "_")+".git")
	if _, err := revParse(ctx, bare, "main"); err == nil {
		out, err := runIn(ctx, bare, nil, "git", "ls-tree", "-r", "--name-only", "-z", "main")
		if err != nil {
			return "", 0, fmt.Errorf("import cached: %w", err)
		}
		return bare, bytes.Count(out, []byte{0}), nil
	}
	_ = os.RemoveAll(bare)
	tmp := bare + fmt.Sprintf(".tmp-%d", os.Getpid())
	defer os.RemoveAll(tmp)
	if _, files, err = importModuleZip(ctx, src.Zip, tmp); err != nil {
		return "", 0, err
	}
	if err := os.Rename(tmp, bare); err != nil {
		return "", 0, fmt.Errorf("import cached: %w", err)
	}
	return bare, files, nil
}

// cloneBare makes dst a bare copy of src (objects hard-linked), served as
// the dev forge serves its own repositories.
func cloneBare(ctx context.Context, src, dst string) error {
	if _, err := runIn(ctx, filepath.Dir(dst), nil, "git", "clone", "--quiet", "--bare", "--template=", src, dst); err != nil {
		return fmt.Errorf("clone bare: %w", err)
	}
	if _, err := runIn(ctx, dst, nil, "git", "config", "uploadpack.allowFilter", "true"); err != nil {
		return fmt.Errorf("clone bare: %w", err)
	}
	return nil
}

// nextCommit adds a commit on main that changes one small file, so the
// same tree is a new revision: nothing prepared for an earlier one applies.
func nextCommit(ctx context.Context, bare, marker, content string) (string, error) {
	_, err := fastImport(ctx, bare, func(w *bufio.Writer) (int, error) {
		fmt.Fprintf(w, "commit refs/heads/main\ncommitter lsp-bench <bench@localhost> %d +0000\n", time.Now().Unix())
		fmt.Fprintf(w, "data %d\n%s\n", len(content), content)
		fmt.Fprintf(w, "from refs/heads/main^0\nM 100644 inline %s\ndata %d\n%s\n", marker, len(content), content)
		return 1, nil
	})
	if err != nil {
		return "", fmt.Errorf("next commit: %w", err)
	}
	return revParse(ctx, bare, "main")
}

// fastImport runs git fast-import in bare with the stream write produces.
func fastImport(ctx context.Context, bare string, write func(*bufio.Writer) (int, error)) (int, error) {
	cmd := exec.CommandContext(ctx, "git", "fast-import", "--quiet", "--done")
	cmd.Dir = bare
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return 0, err
	}
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	w := bufio.NewWriterSize(in, 1<<20)
	n, werr := write(w)
	if werr == nil {
		w.WriteString("done\n")
		werr = w.Flush()
	}
	in.Close()
	if werr != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return 0, werr
	}
	if err := cmd.Wait(); err != nil {
		return 0, fmt.Errorf("git fast-import: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return n, nil
}

func revParse(ctx context.Context, bare, rev string) (string, error) {
	out, err := runIn(ctx, bare, nil, "git", "rev-parse", "--verify", rev+"^{commit}")
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(out)), nil
}
