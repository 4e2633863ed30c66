// Package depstest builds hermetic Go module mirrors for tests: a module
// written in the GOPROXY layout of a directory (served as file:// or over
// httptest) and the go.sum lines a repository requiring it would carry.
package depstest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"time"

	"golang.org/x/mod/module"
	"golang.org/x/mod/sumdb/dirhash"
	modzip "golang.org/x/mod/zip"
)

// Module is one module version; Files holds its go.mod too.
type Module struct {
	Path, Version string
	Files         map[string]string
}

// Write puts m under dir in the GOPROXY layout
// (<escaped path>/@v/{list,<v>.info,<v>.mod,<v>.zip}) and returns the two
// go.sum lines for it.
func Write(dir string, m Module) (string, error) {
	mv := module.Version{Path: m.Path, Version: m.Version}
	ep, err := module.EscapePath(m.Path)
	if err != nil {
		return "", fmt.Errorf("escape path: %w", err)
	}
	ev, err := module.EscapeVersion(m.Version)
	if err != nil {
		return "", fmt.Errorf("escape version: %w", err)
	}
	v := filepath.Join(dir, filepath.FromSlash(ep), "@v")
	if err := os.MkdirAll(v, 0o755); err != nil {
		return "", err
	}
	names := make([]string, 0, len(m.Files))
	for n := range m.Files {
		names = append(names, n)
	}
	sort.Strings(names)
	var files []modzip.File
	for _, n := range names {
		files = append(files, file{name: n, data: m.Files[n]})
	}
	zipPath := filepath.Join(v, ev+".zip")
	zf, err := os.Create(zipPath)
	if err != nil {
		return "", err
	}
	if err := modzip.Create(zf, mv, files); err != nil {
		zf.Close()
		return "", fmt.Errorf("zip: %w", err)
	}
	if err := zf.Close(); err != nil {
		return "", err
	}
	gomod := []byte(m.Files["go.mod"])
	if err := os.WriteFile(filepath.Join(v, ev+".mod"), gomod, 0o644); err != nil {
		return "", err
	}
	info, _ := json.Marshal(map[string]any{"Version": m.Version, "Time": time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)})
	if err := os.WriteFile(filepath.Join(v, ev+".info"), info, 0o644); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(v, "list"), []byte(m.Version+"\n"), 0o644); err != nil {
		return "", err
	}
	zh, err := dirhash.HashZip(zipPath, dirhash.Hash1)
	if err != nil {
		return "", fmt.Errorf("hash zip: %w", err)
	}
	mh, err := dirhash.Hash1([]string{"go.mod"}, func(string) (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(gomod)), nil
	})
	if err != nil {
		return "", fmt.Errorf("hash go.mod: %w", err)
	}
	return fmt.Sprintf("%s %s %s\n%s %s/go.mod %s\n", m.Path, m.Version, zh, m.Path, m.Version, mh), nil
}

type file struct{ name, data string }

func (f file) Path() string                { return f.name }
func (f file) Lstat() (os.FileInfo, error) { return info{f}, nil }
func (f file) Open() (io.ReadCloser, error) {
	return io.NopCloser(bytes.NewReader([]byte(f.data))), nil
}

type info struct{ f file }

func (i info) Name() string       { return filepath.Base(i.f.name) }
func (i info) Size() int64        { return int64(len(i.f.data)) }
func (i info) Mode() os.FileMode  { return 0o644 }
func (i info) ModTime() time.Time { return time.Time{} }
func (i info) IsDir() bool        { return false }
func (i info) Sys() any           { return nil }
