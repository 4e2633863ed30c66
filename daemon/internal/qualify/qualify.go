package qualify

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/hanzoai/lsp/daemon/internal/config"
	"github.com/hanzoai/lsp/daemon/internal/lsp"
	"github.com/hanzoai/lsp/daemon/internal/runtime"
)

// Language is one language of a server, as reported.
type Language struct {
	ID         string   `json:"id"`
	Extensions []string `json:"extensions"`
}

// ServerStatus is what the file says about one server: no executable, no
// argument, no environment, no option value.
type ServerStatus struct {
	ID               string     `json:"id"`
	Name             string     `json:"name"`
	ProtocolVersion  string     `json:"protocol_version"`
	Languages        []Language `json:"languages"`
	ReviewedBy       string     `json:"reviewed_by"`
	ReviewedAt       time.Time  `json:"reviewed_at"`
	RequestTimeoutMS int        `json:"request_timeout_ms"`
	ExecutableSHA256 string     `json:"executable_sha256"`
	// DescriptorFingerprint binds executable, pin, arguments, environment,
	// options and languages without revealing them.
	DescriptorFingerprint string `json:"descriptor_fingerprint"`
	// PinnedTypeScript is true when the entry pins tsserver.path.
	PinnedTypeScript bool `json:"pinned_typescript"`
}

// Status is the answer of `lsp-daemon status`.
type Status struct {
	ProtocolVersion string         `json:"protocol_version"`
	Source          string         `json:"source"`
	Servers         []ServerStatus `json:"servers"`
}

// StatusOf describes a loaded file. It reads nothing else and starts
// nothing.
func StatusOf(cf *config.File) Status {
	st := Status{ProtocolVersion: config.FileProtocol, Source: cf.Source, Servers: []ServerStatus{}}
	for _, s := range cf.Servers {
		ss := ServerStatus{
			ID: s.ID, Name: s.Name, ProtocolVersion: s.ProtocolVersion,
			ReviewedBy: s.ReviewedBy, ReviewedAt: s.ReviewedAt.UTC(),
			RequestTimeoutMS: s.RequestTimeoutMS, ExecutableSHA256: s.ExecutableSHA256,
			DescriptorFingerprint: config.DescriptorFingerprint(s),
			PinnedTypeScript:      s.TSServerPath() != "",
		}
		for _, l := range s.Languages {
			ss.Languages = append(ss.Languages, Language{ID: l.ID, Extensions: slices.Clone(l.Extensions)})
		}
		st.Servers = append(st.Servers, ss)
	}
	return st
}

// Checks are the qualification booleans of one server. Started and
// CanaryAnswered are nil when start was not asked for.
type Checks struct {
	Review         bool  `json:"review"`
	ExecutableHash bool  `json:"executable_hash"`
	Started        *bool `json:"started"`
	CanaryAnswered *bool `json:"canary_answered"`
}

// Negotiated is what a started server agreed to.
type Negotiated struct {
	ServerName            string   `json:"server_name"`
	ServerVersion         string   `json:"server_version"`
	Generation            uint64   `json:"generation"`
	Capabilities          []string `json:"capabilities"`
	Tools                 []string `json:"tools"`
	CapabilityFingerprint string   `json:"capability_fingerprint"`
	// Canary names the built-in workspace, the document asked about and
	// the symbols the server found in it.
	Canary        string   `json:"canary"`
	CanaryDoc     string   `json:"canary_document"`
	CanarySymbols []string `json:"canary_symbols"`
}

// ServerReport is one server's qualification.
type ServerReport struct {
	ServerStatus
	Qualified  bool        `json:"qualified"`
	Checks     Checks      `json:"checks"`
	Negotiated *Negotiated `json:"negotiated,omitempty"`
	Error      string      `json:"error,omitempty"`
}

// Report is the answer of `lsp-daemon qualify`.
type Report struct {
	ProtocolVersion string         `json:"protocol_version"`
	Source          string         `json:"source"`
	Started         bool           `json:"started"`
	Qualified       bool           `json:"qualified"`
	Servers         []ServerReport `json:"servers"`
}

// Options configure Run.
type Options struct {
	// Start initializes each server against its canary workspace.
	Start bool
	// Spawner starts servers; runtime.Unjailed when nil. The canary
	// workspaces are built in, never tenant code.
	Spawner runtime.Spawner
	// Dir holds the qualified copies and the canary workspaces; a fresh
	// temporary directory (removed afterwards) when empty.
	Dir string
	Log *slog.Logger
}

// Run qualifies every server of cf. It never returns early: each server
// gets its own verdict, and Report.Qualified is true only when all passed.
func Run(ctx context.Context, cf *config.File, o Options) (Report, error) {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Spawner == nil {
		o.Spawner = runtime.Unjailed(o.Log)
	}
	if o.Dir == "" && o.Start {
		d, err := os.MkdirTemp("", "lsp-daemon-qualify-")
		if err != nil {
			return Report{}, fmt.Errorf("qualify: %w", err)
		}
		defer removeTree(d)
		o.Dir = d
	}
	st := StatusOf(cf)
	r := Report{ProtocolVersion: st.ProtocolVersion, Source: st.Source, Started: o.Start, Qualified: true}
	for i, s := range cf.Servers {
		sr := qualifyOne(ctx, s, st.Servers[i], o)
		r.Qualified = r.Qualified && sr.Qualified
		r.Servers = append(r.Servers, sr)
	}
	return r, nil
}

func qualifyOne(ctx context.Context, s config.Server, st ServerStatus, o Options) ServerReport {
	sr := ServerReport{ServerStatus: st}
	// The file was parsed strictly: reviewed_by and reviewed_at are present
	// and bounded, or it would not have loaded.
	sr.Checks.Review = s.ReviewedBy != "" && !s.ReviewedAt.IsZero()
	if err := config.Verify(s); err != nil {
		sr.Error = redact(err.Error(), s)
		return sr
	}
	sr.Checks.ExecutableHash = true
	if !o.Start {
		sr.Qualified = sr.Checks.Review
		return sr
	}
	neg, started, err := startCanary(ctx, s, o)
	answered := err == nil
	sr.Checks.Started, sr.Checks.CanaryAnswered = &started, &answered
	sr.Negotiated = neg
	if err != nil {
		sr.Error = redact(err.Error(), s)
		return sr
	}
	sr.Qualified = sr.Checks.Review
	return sr
}

// startCanary copies the executable as the daemon does, starts the server
// on a canary workspace, asks for the canary document's symbols and closes
// it, reaping every process.
func startCanary(ctx context.Context, s config.Server, o Options) (*Negotiated, bool, error) {
	base := filepath.Join(o.Dir, s.ID)
	exe, err := config.Qualify(s, filepath.Join(o.Dir, "bin"))
	if err != nil {
		return nil, false, err
	}
	spec := Spec(s, exe)
	c := canaryFor(spec.Extensions, spec.LanguageIDs)
	ws := runtime.Workspace{Root: filepath.Join(base, "workspace"), Home: filepath.Join(base, "home")}
	if err := c.write(ws.Root); err != nil {
		return nil, false, fmt.Errorf("canary workspace: %w", err)
	}
	if err := os.MkdirAll(ws.Home, 0o700); err != nil {
		return nil, false, fmt.Errorf("canary home: %w", err)
	}
	srv, err := runtime.Start(ctx, o.Spawner, spec.Spec, ws, o.Log.With("server", s.ID))
	if err != nil {
		return nil, false, err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		_ = srv.Close(cctx)
		cancel()
	}()
	info := srv.Info()
	neg := &Negotiated{
		ServerName: clip(info.Name), ServerVersion: clip(info.Version), Generation: info.Generation,
		Tools: srv.Tools(), CapabilityFingerprint: srv.CapabilityFingerprint(),
		Canary: c.name, CanaryDoc: c.doc, CanarySymbols: []string{},
	}
	if neg.Tools == nil {
		neg.Tools = []string{}
	}
	qctx, cancel := context.WithTimeout(ctx, spec.RequestTimeout)
	defer cancel()
	err = srv.Do(qctx, func(ctx context.Context, cl *lsp.Client, _ uint64) error {
		neg.Capabilities = capabilityNames(cl.Capabilities().Raw)
		if !cl.Has(lsp.ToolDocumentSymbols) {
			return nil
		}
		u := srv.URI(c.doc)
		if err := cl.DidOpen(ctx, u, spec.LanguageID(c.doc), c.files[c.doc]); err != nil {
			return err
		}
		syms, err := cl.DocumentSymbols(ctx, u)
		if err != nil {
			return err
		}
		for _, sym := range syms.Items {
			if len(neg.CanarySymbols) < 32 {
				neg.CanarySymbols = append(neg.CanarySymbols, clip(sym.Name))
			}
		}
		if c.want != "" && !slices.Contains(neg.CanarySymbols, c.want) {
			return fmt.Errorf("the canary's symbols %q do not include %q", neg.CanarySymbols, c.want)
		}
		return nil
	})
	if err != nil {
		return neg, true, fmt.Errorf("canary query: %w", err)
	}
	return neg, true, nil
}

var capName = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9]{0,63}$`)

// capabilityNames are the top-level capabilities a server declared (those
// not false or null), sorted and bounded.
func capabilityNames(raw json.RawMessage) []string {
	var m map[string]json.RawMessage
	names := []string{}
	if json.Unmarshal(raw, &m) != nil {
		return names
	}
	for k, v := range m {
		v = bytes.TrimSpace(v)
		if !capName.MatchString(k) || string(v) == "false" || string(v) == "null" {
			continue
		}
		names = append(names, k)
	}
	slices.Sort(names)
	if len(names) > 64 {
		names = names[:64]
	}
	return names
}

// redact keeps host paths and argv out of an error: they are the
// operator's secrets as much as the environment is.
func redact(msg string, s config.Server) string {
	type repl struct{ old, new string }
	var rs []repl
	if p := s.TSServerPath(); p != "" {
		rs = append(rs, repl{p, "<tsserver.path>"}, repl{filepath.Dir(filepath.Dir(p)), "<typescript>"})
	}
	for _, a := range s.Arguments {
		if len(a) > 2 {
			rs = append(rs, repl{a, "<argument>"})
		}
	}
	rs = append(rs, repl{s.Executable, "<executable>"}, repl{filepath.Dir(s.Executable), "<executable dir>"})
	// Longest first, so that a path is replaced before its directory.
	slices.SortFunc(rs, func(a, b repl) int { return len(b.old) - len(a.old) })
	for _, r := range rs {
		if r.old != "" && r.old != "/" {
			msg = strings.ReplaceAll(msg, r.old, r.new)
		}
	}
	return clipN(msg, 512)
}

func clip(s string) string { return clipN(s, 128) }

func clipN(s string, n int) string {
	s = strings.ToValidUTF8(s, "")
	if len(s) <= n {
		return s
	}
	for n > 0 && !isRuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }

// removeTree removes a qualification directory; Go's module cache is
// written read-only, so write bits are restored first.
func removeTree(dir string) {
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(p, 0o700)
		}
		return nil
	})
	_ = os.RemoveAll(dir)
}
