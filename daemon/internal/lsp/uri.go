package lsp

import (
	"errors"
	"fmt"
	"net/url"
	"path"
	"path/filepath"
	"strings"

	liburi "github.com/hanzoai/lsp/daemon/internal/uri"
)

// ErrBadURI is returned for URIs that are not plain local file URIs.
var ErrBadURI = errors.New("lsp: not a local file URI")

// FileURI returns the file URI of an absolute path.
func FileURI(p string) DocumentURI {
	u := url.URL{Scheme: "file", Path: filepath.ToSlash(p)}
	return DocumentURI(u.String())
}

// URIPath returns the absolute, clean path a file URI names. It rejects
// other schemes, remote hosts, queries, fragments, bad escapes, NUL bytes
// and paths that are not absolute or not clean (".." segments); deciding
// whether the path lies inside a workspace is the caller's job.
func URIPath(uri DocumentURI) (string, error) {
	if p, ok := liburi.PlainFilePath(string(uri)); ok {
		if path.Clean(p) != p {
			return "", fmt.Errorf("%w: path is not clean", ErrBadURI)
		}
		return filepath.FromSlash(p), nil
	}
	u, err := url.Parse(string(uri))
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrBadURI, err)
	}
	if u.Scheme != "file" {
		return "", fmt.Errorf("%w: scheme %q", ErrBadURI, u.Scheme)
	}
	if u.Host != "" && u.Host != "localhost" {
		return "", fmt.Errorf("%w: remote host", ErrBadURI)
	}
	if u.Opaque != "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return "", fmt.Errorf("%w: unexpected URI parts", ErrBadURI)
	}
	p := u.Path
	if p == "" || !strings.HasPrefix(p, "/") || strings.ContainsRune(p, 0) {
		return "", fmt.Errorf("%w: path is not absolute", ErrBadURI)
	}
	if path.Clean(p) != p {
		return "", fmt.Errorf("%w: path is not clean", ErrBadURI)
	}
	return filepath.FromSlash(p), nil
}

// canonicalURI gives one spelling per file so that the URI a server
// publishes under and the URI we asked about compare equal.
func canonicalURI(uri DocumentURI) DocumentURI {
	if p, ok := liburi.PlainFilePath(string(uri)); ok && path.Clean(p) == p {
		return uri // FileURI(p) spells a plain path as it is
	}
	if p, err := URIPath(uri); err == nil {
		return FileURI(p)
	}
	return uri
}
