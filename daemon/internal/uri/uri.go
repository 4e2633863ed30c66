// Package uri is the daemon's path policy for every URI a language server
// returns (CONTRACT §4, §7). A location inside the workspace becomes a
// repo-relative path; one inside an external root (GOROOT, a module cache)
// becomes {external, module, path relative to the module}; anything else —
// another directory, a remote or malformed URI, a case trick, an escape
// that leaves the root — is refused, and the caller marks the answer
// partial. No host path ever leaves this package.
package uri

import (
	"errors"
	"net/url"
	"path"
	"strings"
	"unicode/utf8"

	daemonv1 "github.com/hanzoai/lsp/proto/lspdaemon/v1"
)

// Location is where a URI points, in the terms an answer may use.
type Location struct {
	Path     string
	External bool
	Module   string
}

// Policy maps URIs for one workspace.
type Policy struct {
	// Root is the workspace tree as the server sees it.
	Root string
	// Externals are read-only roots whose files may be named by module.
	Externals []External
}

// External is one external root.
type External struct {
	Dir string
	// Module names the whole root ("std@go1.26.8", "typescript@5.9.3");
	// empty means a Go module cache, where the module is read from the
	// path (example.com/dep@v1.0.0/...).
	Module string
}

// ErrRefused is returned for every URI the policy does not allow.
var ErrRefused = errors.New("uri outside the workspace")

// FileURI is the URI of a repo-relative path inside the workspace.
func (p Policy) FileURI(rel string) string {
	u := url.URL{Scheme: "file", Path: path.Join(p.Root, rel)}
	return u.String()
}

// Map applies the policy to one URI. What it returns keeps the tree path
// rule (daemonv1.CheckTreePath) in its path and module: a decoded escape
// that is not UTF-8 (which an answer's proto strings cannot carry, so one
// such location failed the whole answer) or a control character is
// refused like any other URI the policy does not allow.
func (p Policy) Map(raw string) (Location, error) {
	loc, err := p.mapURI(raw)
	if err != nil {
		return Location{}, err
	}
	if !daemonv1.ValidTreePath(loc.Path) || loc.Module != "" && !daemonv1.ValidTreePath(loc.Module) {
		return Location{}, ErrRefused
	}
	return loc, nil
}

func (p Policy) mapURI(raw string) (Location, error) {
	abs, err := parseFileURI(raw)
	if err != nil {
		return Location{}, err
	}
	rel, inTree := under(abs, p.Root)
	// The tree's node_modules holds the packages the dependency phase
	// installed, each an external root: only there is a tree path looked
	// up among the roots (a path elsewhere in the tree is the
	// repository's, at no cost per root).
	if inTree && !strings.HasPrefix(rel, "node_modules/") {
		return Location{Path: rel}, nil
	}
	for _, x := range p.Externals {
		rel, ok := under(abs, x.Dir)
		if !ok {
			continue
		}
		if x.Module != "" {
			return Location{Path: rel, External: true, Module: x.Module}, nil
		}
		return modCacheLocation(rel)
	}
	if inTree {
		return Location{Path: rel}, nil
	}
	return Location{}, ErrRefused
}

// parseFileURI accepts only file:///absolute/clean/path with valid escapes.
func parseFileURI(raw string) (string, error) {
	if len(raw) > 4096 || !utf8.ValidString(raw) {
		return "", ErrRefused
	}
	if p, ok := PlainFilePath(raw); ok {
		if path.Clean(p) != p {
			return "", ErrRefused
		}
		return p, nil
	}
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "file" || (u.Host != "" && u.Host != "localhost") || u.User != nil ||
		u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
		return "", ErrRefused
	}
	p := u.Path
	// Decoded escapes must still be UTF-8 (a module path's case decoding
	// would turn what is not into U+FFFD); control characters are Map's
	// tree path rule.
	if p == "" || !strings.HasPrefix(p, "/") || !utf8.ValidString(p) || strings.ContainsRune(p, 0) || strings.Contains(p, "\\") {
		return "", ErrRefused
	}
	// An escaped '/' or any '..' would let a URI name one thing and mean
	// another: refuse rather than normalise.
	if path.Clean(p) != p || strings.Contains(strings.ToLower(u.RawPath), "%2f") {
		return "", ErrRefused
	}
	return p, nil
}

// under reports p's path below root, exactly (no case folding).
func under(p, root string) (string, bool) {
	if root == "" || !strings.HasPrefix(p, root+"/") {
		return "", false
	}
	rel := p[len(root)+1:]
	if rel == "" {
		return "", false
	}
	return rel, true
}

// modCacheLocation splits "example.com/!dep@v1.0.0/x/y.go" into the module
// "example.com/Dep@v1.0.0" and the path "x/y.go".
func modCacheLocation(rel string) (Location, error) {
	segs := strings.Split(rel, "/")
	for i, s := range segs {
		at := strings.IndexByte(s, '@')
		if at <= 0 {
			continue
		}
		if i == len(segs)-1 || strings.HasPrefix(rel, "cache/") {
			break
		}
		mod, err := unescapeModule(strings.Join(segs[:i+1], "/"))
		if err != nil {
			break
		}
		return Location{Path: strings.Join(segs[i+1:], "/"), External: true, Module: mod}, nil
	}
	return Location{}, ErrRefused
}

// unescapeModule undoes the module cache's case encoding ("!a" → "A").
func unescapeModule(s string) (string, error) {
	var b strings.Builder
	bang := false
	for _, r := range s {
		switch {
		case bang:
			if r < 'a' || r > 'z' {
				return "", ErrRefused
			}
			b.WriteRune(r - 'a' + 'A')
			bang = false
		case r == '!':
			bang = true
		case r >= 'A' && r <= 'Z':
			return "", ErrRefused
		default:
			b.WriteRune(r)
		}
	}
	if bang {
		return "", ErrRefused
	}
	return b.String(), nil
}

// PlainFilePath is the path of a file URI that needs no parsing: "file://"
// and an absolute path of letters, digits and "/-._~+@" alone — bytes to
// which URL syntax gives no meaning and which a file URI spells as they
// are — the shape of nearly every URI a server sends back, parsed once
// per location of every answer. For anything else (an escape, a host, a
// query, another byte) ok is false and url.Parse decides.
// FuzzPlainFilePath holds it to url.Parse.
func PlainFilePath(raw string) (p string, ok bool) {
	const scheme = "file://"
	if len(raw) <= len(scheme) || raw[:len(scheme)] != scheme || raw[len(scheme)] != '/' {
		return "", false
	}
	p = raw[len(scheme):]
	for i := 0; i < len(p); i++ {
		if !plainByte[p[i]] {
			return "", false
		}
	}
	return p, true
}

var plainByte = func() (t [256]bool) {
	for c := 'a'; c <= 'z'; c++ {
		t[c], t[c-'a'+'A'] = true, true
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for _, c := range "/-._~+@" {
		t[c] = true
	}
	return t
}()
