package devstack

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// The reviewed-server file has one template, deploy/images/servers.json.in,
// which the daemon image renders with its own paths. The dev stack, the
// corpus and the bench render the same template with a development
// install's paths (RenderServers, `lspctl servers`, run by make deps into
// .bin/servers.json), so what they run is what production runs: the same
// servers, arguments, settings and environment, pinned by real SHA-256s.

// Production install locations the template names, and what replaces them.
const (
	prodBin  = "/opt/lsp/bin/" // single binaries (gopls): .bin/<name>
	prodOpt  = "/opt/lsp/"     // npm installs (ts, basedpyright, …): .bin/<dir>
	prodNode = "/usr/local/bin/node"
)

// Render says where a development install keeps what the template names.
type Render struct {
	Bin        string // the install directory (make deps: .bin), absolute
	Node       string // the node binary; "" looks it up on PATH
	ReviewedBy string // default "make deps (development)"
	ReviewedAt time.Time
	// Only, when set, keeps just the servers with these ids.
	Only []string
	// SkipMissing leaves out a server whose files are not installed
	// instead of failing (tests that find some servers).
	SkipMissing bool
}

var shaRE = regexp.MustCompile(`@SHA256:([^@"]+)@`)

// RenderServers renders the template for a development install: every
// production path replaced, every @SHA256:path@ the hash of the file now
// at that path, the review fields filled. A server whose files are not
// installed is an error, unless Only leaves it out.
func RenderServers(tmpl []byte, r Render) ([]byte, error) {
	bin, err := canonical(r.Bin)
	if err != nil {
		return nil, fmt.Errorf("render servers: bin: %w", err)
	}
	node := r.Node
	if node == "" {
		if node, err = exec.LookPath("node"); err != nil {
			return nil, fmt.Errorf("render servers: node: %w", err)
		}
	}
	if node, err = canonical(node); err != nil {
		return nil, fmt.Errorf("render servers: node: %w", err)
	}
	by := r.ReviewedBy
	if by == "" {
		by = "make deps (development)"
	}
	at := r.ReviewedAt
	if at.IsZero() {
		at = time.Now()
	}
	var doc struct {
		ProtocolVersion string            `json:"protocol_version"`
		Servers         []json.RawMessage `json:"servers"`
	}
	if err := json.Unmarshal(tmpl, &doc); err != nil {
		return nil, fmt.Errorf("render servers: template: %w", err)
	}
	paths := strings.NewReplacer(
		prodNode, node,
		prodBin, bin+"/",
		prodOpt, bin+"/",
		"@REVIEWED_BY@", by,
		"@REVIEWED_AT@", at.UTC().Format(time.RFC3339),
	)
	var out []json.RawMessage
	for _, raw := range doc.Servers {
		var head struct{ ID string }
		if err := json.Unmarshal(raw, &head); err != nil {
			return nil, fmt.Errorf("render servers: %w", err)
		}
		if len(r.Only) > 0 && !contains(r.Only, head.ID) {
			continue
		}
		s := paths.Replace(string(raw))
		var herr error
		s = shaRE.ReplaceAllStringFunc(s, func(m string) string {
			p := shaRE.FindStringSubmatch(m)[1]
			sum, err := fileSHA256(p)
			if err != nil {
				herr = errors.Join(herr, fmt.Errorf("server %s: %w (run make deps)", head.ID, err))
			}
			return sum
		})
		if herr == nil {
			herr = checkInstalled(head.ID, s)
		}
		if herr != nil && r.SkipMissing {
			continue
		}
		if herr != nil {
			return nil, fmt.Errorf("render servers: %w", herr)
		}
		var compact bytes.Buffer
		if err := json.Compact(&compact, []byte(s)); err != nil {
			return nil, fmt.Errorf("render servers: server %s: %w", head.ID, err)
		}
		out = append(out, compact.Bytes())
	}
	b, err := json.MarshalIndent(map[string]any{"protocol_version": doc.ProtocolVersion, "servers": out}, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// checkInstalled fails when an absolute path the entry runs (its
// executable and its arguments below the install) does not exist.
func checkInstalled(id, entry string) error {
	var e ServerEntry
	if err := json.Unmarshal([]byte(entry), &e); err != nil {
		return fmt.Errorf("server %s: %w", id, err)
	}
	for _, p := range append([]string{e.Executable}, e.Arguments...) {
		if !filepath.IsAbs(p) {
			continue
		}
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("server %s: %s is missing: run make deps", id, p)
		}
	}
	return nil
}

func canonical(p string) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	return filepath.EvalSymlinks(abs)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// ServerEntry is the part of a reviewed entry a direct run needs: the
// ground truth of the corpus and the bench start the same server, with the
// same arguments, environment, initialization options and settings, on a
// normal checkout.
type ServerEntry struct {
	ID                    string          `json:"id"`
	Name                  string          `json:"name"`
	Languages             []EntryLanguage `json:"languages"`
	Executable            string          `json:"executable"`
	ExecutableSHA256      string          `json:"executable_sha256"`
	Arguments             []string        `json:"arguments"`
	Env                   []string        `json:"env"`
	InitializationOptions json.RawMessage `json:"initialization_options"`
	Settings              json.RawMessage `json:"settings"`
	ExternalRoots         []ExternalRoot  `json:"external_roots"`
}

// ExternalRoot is a directory outside the workspace whose locations the
// service names by module.
type ExternalRoot struct {
	Dir    string `json:"dir"`
	Module string `json:"module"`
}

// EntryLanguage is one language id of an entry and its extensions.
type EntryLanguage struct {
	ID         string   `json:"id"`
	Extensions []string `json:"extensions"`
}

// Extensions are every extension the entry serves.
func (e ServerEntry) Extensions() []string {
	var out []string
	for _, l := range e.Languages {
		out = append(out, l.Extensions...)
	}
	return out
}

// LanguageID is the languageId a file of extension ext opens with; "" when
// the entry does not serve it.
func (e ServerEntry) LanguageID(ext string) string {
	for _, l := range e.Languages {
		if contains(l.Extensions, ext) {
			return l.ID
		}
	}
	return ""
}

// ServerFile is a rendered reviewed-server file.
type ServerFile struct {
	Path    string
	Servers []ServerEntry
}

// LoadServerFile reads a rendered file (make deps: .bin/servers.json).
func LoadServerFile(path string) (*ServerFile, error) {
	abs, err := canonical(path)
	if err != nil {
		return nil, fmt.Errorf("server file: %w (run make deps)", err)
	}
	b, err := os.ReadFile(abs)
	if err != nil {
		return nil, fmt.Errorf("server file: %w", err)
	}
	var doc struct {
		Servers []ServerEntry `json:"servers"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("server file %s: %w", abs, err)
	}
	return &ServerFile{Path: abs, Servers: doc.Servers}, nil
}

// Server is the entry with id, if the file has it.
func (f *ServerFile) Server(id string) (ServerEntry, bool) {
	for _, s := range f.Servers {
		if s.ID == id {
			return s, true
		}
	}
	return ServerEntry{}, false
}

// ForExtension is the entry serving ext, the first in file order (the
// daemon routes the same way).
func (f *ServerFile) ForExtension(ext string) (ServerEntry, bool) {
	for _, s := range f.Servers {
		if s.LanguageID(ext) != "" {
			return s, true
		}
	}
	return ServerEntry{}, false
}

// WriteServerFile renders the template file for r's install into out and
// loads the result: what make deps does, for tests that render the
// production template against the install they were given.
func WriteServerFile(template, out string, r Render) (*ServerFile, error) {
	tmpl, err := os.ReadFile(template)
	if err != nil {
		return nil, err
	}
	b, err := RenderServers(tmpl, r)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(out, b, 0o644); err != nil {
		return nil, err
	}
	return LoadServerFile(out)
}

// RenderForTests is how tests render the template: for LSP_TEST_BIN's install
// when make test names it, with every reviewed server required (a missing
// install step fails the run instead of skipping its tests), else for the
// install in fallback with the servers not installed there left out.
func RenderForTests(fallback string) Render {
	if bin := os.Getenv("LSP_TEST_BIN"); bin != "" {
		return Render{Bin: bin}
	}
	return Render{Bin: fallback, SkipMissing: true}
}
