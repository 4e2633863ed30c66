// Package config loads the daemon's environment (LSP_DAEMON_*, LSP_*) and
// its reviewed-server file (code-intel-config.v1, CONTRACT §7): which
// language servers may run, pinned by SHA-256 and signed off by a reviewer.
// Nothing in a repository can add to or widen this list.
package config

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Env is the daemon's environment configuration.
type Env struct {
	Listen        string        // LSP_DAEMON_LISTEN
	ConfigFile    string        // LSP_DAEMON_CONFIG
	Root          string        // LSP_DAEMON_ROOT
	WorkspaceTTL  time.Duration // LSP_WORKSPACE_TTL
	Unjailed      bool          // LSP_UNJAILED
	LogLevel      string        // LSP_LOG_LEVEL
	ShutdownGrace time.Duration // LSP_SHUTDOWN_GRACE
	DebugListen   string        // LSP_DAEMON_DEBUG_LISTEN: loopback address for pprof; empty is off
	// Pool budgets; zero is no bound (see pool.Budget).
	PoolMaxServers int   // LSP_POOL_MAX_SERVERS
	MaxPrepares    int   // LSP_DAEMON_MAX_PREPARES: Prepare calls at once (0: rpc.DefaultMaxPrepares)
	PoolMaxRSS     int64 // LSP_POOL_MAX_RSS, bytes
	PoolMaxDisk    int64 // LSP_POOL_MAX_DISK, bytes
	// Mutual TLS for a host:port listener (required there, refused on a
	// unix socket): the daemon's certificate and key, and the CA whose
	// client certificates (the proxies') it accepts.
	TLSCert     string // LSP_DAEMON_TLS_CERT
	TLSKey      string // LSP_DAEMON_TLS_KEY
	TLSClientCA string // LSP_DAEMON_TLS_CLIENT_CA
}

// LoadEnv reads the environment through getenv.
func LoadEnv(getenv func(string) string) (*Env, error) {
	e := &Env{
		Listen:        or(getenv("LSP_DAEMON_LISTEN"), "unix:///tmp/lsp-daemon.sock"),
		ConfigFile:    getenv("LSP_DAEMON_CONFIG"),
		Root:          or(getenv("LSP_DAEMON_ROOT"), "/var/lib/lsp-daemon"),
		LogLevel:      or(getenv("LSP_LOG_LEVEL"), "info"),
		WorkspaceTTL:  24 * time.Hour,
		ShutdownGrace: 20 * time.Second,
		DebugListen:   getenv("LSP_DAEMON_DEBUG_LISTEN"),
		TLSCert:       strings.TrimSpace(getenv("LSP_DAEMON_TLS_CERT")),
		TLSKey:        strings.TrimSpace(getenv("LSP_DAEMON_TLS_KEY")),
		TLSClientCA:   strings.TrimSpace(getenv("LSP_DAEMON_TLS_CLIENT_CA")),
	}
	var errs []error
	if v := getenv("LSP_WORKSPACE_TTL"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			errs = append(errs, fmt.Errorf("LSP_WORKSPACE_TTL=%q: not a positive duration", v))
		}
		e.WorkspaceTTL = d
	}
	if v := getenv("LSP_SHUTDOWN_GRACE"); v != "" {
		d, err := time.ParseDuration(strings.TrimSpace(v))
		if err != nil || d <= 0 {
			errs = append(errs, fmt.Errorf("LSP_SHUTDOWN_GRACE=%q: not a positive duration", v))
		}
		e.ShutdownGrace = d
	}
	if v := getenv("LSP_POOL_MAX_SERVERS"); v != "" {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 0 {
			errs = append(errs, fmt.Errorf("LSP_POOL_MAX_SERVERS=%q: not a count", v))
		}
		e.PoolMaxServers = n
	}
	if v := getenv("LSP_DAEMON_MAX_PREPARES"); v != "" {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 1 {
			errs = append(errs, fmt.Errorf("LSP_DAEMON_MAX_PREPARES=%q: not a positive count", v))
		}
		e.MaxPrepares = n
	}
	for _, b := range []struct {
		name string
		dst  *int64
	}{{"LSP_POOL_MAX_RSS", &e.PoolMaxRSS}, {"LSP_POOL_MAX_DISK", &e.PoolMaxDisk}} {
		if v := getenv(b.name); v != "" {
			n, err := ParseBytes(v)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: %w", b.name, v, err))
			}
			*b.dst = n
		}
	}
	if v := getenv("LSP_UNJAILED"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("LSP_UNJAILED=%q: not a boolean", v))
		}
		e.Unjailed = b
	}
	if e.ConfigFile == "" {
		errs = append(errs, errors.New("LSP_DAEMON_CONFIG is required: the reviewed-server file"))
	}
	if !strings.HasPrefix(e.Listen, "unix://") && !strings.Contains(e.Listen, ":") {
		errs = append(errs, fmt.Errorf("LSP_DAEMON_LISTEN=%q: want unix:///path.sock or host:port", e.Listen))
	}
	tlsSet := e.TLSCert != "" || e.TLSKey != "" || e.TLSClientCA != ""
	tlsAll := e.TLSCert != "" && e.TLSKey != "" && e.TLSClientCA != ""
	switch {
	case strings.HasPrefix(e.Listen, "unix://") && tlsSet:
		errs = append(errs, errors.New("LSP_DAEMON_TLS_* apply to a host:port LSP_DAEMON_LISTEN; a unix socket is guarded by its file mode"))
	case !strings.HasPrefix(e.Listen, "unix://") && !tlsAll:
		// Trees must never travel in the clear, nor reach an unverified peer.
		errs = append(errs, fmt.Errorf("LSP_DAEMON_LISTEN=%q: a host:port listener needs LSP_DAEMON_TLS_CERT, LSP_DAEMON_TLS_KEY and LSP_DAEMON_TLS_CLIENT_CA", e.Listen))
	}
	return e, errors.Join(errs...)
}

func or(v, def string) string {
	if v = strings.TrimSpace(v); v != "" {
		return v
	}
	return def
}

// Protocol versions of the reviewed-server file and of each entry.
const (
	FileProtocol   = "code-intel-config.v1"
	ServerProtocol = "code-intel-lsp.v1"
	MaxServers     = 32
	maxFileBytes   = 1 << 20
)

// File is a parsed, validated reviewed-server file.
type File struct {
	Servers []Server
	// Source is the label and digest of the real file, derived here, never
	// taken from the file's own contents.
	Source string
}

// Language maps a language id to file extensions.
type Language struct {
	ID         string   `json:"id"`
	Extensions []string `json:"extensions"`
}

// Server is one reviewed language server.
type Server struct {
	ProtocolVersion       string          `json:"protocol_version"`
	ID                    string          `json:"id"`
	Name                  string          `json:"name"`
	Languages             []Language      `json:"languages"`
	Executable            string          `json:"executable"`
	Arguments             []string        `json:"arguments"`
	ExecutableSHA256      string          `json:"executable_sha256"`
	InitializationOptions json.RawMessage `json:"initialization_options,omitempty"`
	Settings              json.RawMessage `json:"settings,omitempty"`
	Env                   []string        `json:"env,omitempty"`
	// ReadOnly are system paths the server reads besides the libraries
	// every jail has (clangd: /usr/include; rust-analyzer: cargo, rustc
	// and the patched sysroot), bound read-only at their own path.
	ReadOnly []string `json:"read_only,omitempty"`
	// ExternalRoots name directories outside the workspace whose
	// locations answers keep, as module + path (clangd's system headers,
	// rust-analyzer's standard library); any other outside location is
	// dropped.
	ExternalRoots []ExternalRoot `json:"external_roots,omitempty"`
	// RSSEstimateMB is the pool's admission estimate for one server of
	// the entry until one has been measured (0: none).
	RSSEstimateMB int `json:"rss_estimate_mb,omitempty"`
	// LoadQuietMS is how long the server must stay quiet (no progress, no
	// publication) before its first load counts as done at a prepare;
	// absent: the pool's default (gopls's: its workspace diagnostics come
	// ~2 s after its load ends). 0 for a server with no load to report
	// after it starts, or whose load problems come later anyway.
	LoadQuietMS *int `json:"load_quiet_ms,omitempty"`
	// ReadsDependencies false says the server reads nothing the
	// dependency phase writes (npm packages, Go modules, a compile
	// database): it finds everything it answers with in the tree itself
	// (the JSON, YAML and shell servers). A prepare focused on one of its
	// files publishes the tree before that phase and runs the phase behind
	// it (pool.Prepare's late). Absent: true.
	ReadsDependencies *bool     `json:"reads_dependencies,omitempty"`
	RequestTimeoutMS  int       `json:"request_timeout_ms"`
	ReviewedBy        string    `json:"reviewed_by"`
	ReviewedAt        time.Time `json:"reviewed_at"`
}

var (
	idRE   = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)
	extRE  = regexp.MustCompile(`^\.[A-Za-z0-9]{1,16}$`)
	hashRE = regexp.MustCompile(`^[0-9a-f]{64}$`)
	envRE  = regexp.MustCompile(`^[A-Z][A-Z0-9_]{0,63}=[^\x00]*$`)
)

// ExternalRoot is one directory whose files answers name by module.
type ExternalRoot struct {
	Dir    string `json:"dir"`
	Module string `json:"module"`
}

var moduleRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._+-]{0,63}@[A-Za-z0-9][A-Za-z0-9._+~-]{0,63}$`)

// LoadFile reads and validates the reviewed-server file at path. It must be
// an absolute, canonical, non-link regular file. Every error names the field.
func LoadFile(path string) (*File, error) {
	if err := checkRegularFile(path); err != nil {
		return nil, fmt.Errorf("config file: %w", err)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("config file: %w", err)
	}
	defer f.Close()
	raw, err := io.ReadAll(io.LimitReader(f, maxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("config file: %w", err)
	}
	if len(raw) > maxFileBytes {
		return nil, fmt.Errorf("config file: larger than %d bytes", maxFileBytes)
	}
	cf, err := Parse(raw)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(raw)
	cf.Source = filepath.Base(path) + "@sha256:" + hex.EncodeToString(sum[:])
	return cf, nil
}

// Parse validates the file's contents.
func Parse(raw []byte) (*File, error) {
	var doc struct {
		ProtocolVersion string   `json:"protocol_version"`
		Servers         []Server `json:"servers"`
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if dec.More() {
		return nil, errors.New("config: trailing data after the JSON object")
	}
	if doc.ProtocolVersion != FileProtocol {
		return nil, fmt.Errorf("config: protocol_version: want %q", FileProtocol)
	}
	if len(doc.Servers) == 0 || len(doc.Servers) > MaxServers {
		return nil, fmt.Errorf("config: servers: want 1 to %d entries", MaxServers)
	}
	ids := map[string]bool{}
	exts := map[string]string{}
	for i, s := range doc.Servers {
		field := func(name string) string { return fmt.Sprintf("config: servers[%d].%s", i, name) }
		switch {
		case s.ProtocolVersion != ServerProtocol:
			return nil, fmt.Errorf("%s: want %q", field("protocol_version"), ServerProtocol)
		case !idRE.MatchString(s.ID):
			return nil, fmt.Errorf("%s: want %s", field("id"), idRE)
		case ids[s.ID]:
			return nil, fmt.Errorf("%s: %q repeated", field("id"), s.ID)
		case s.Name == "" || len(s.Name) > 128:
			return nil, fmt.Errorf("%s: want 1 to 128 characters", field("name"))
		case !filepath.IsAbs(s.Executable) || filepath.Clean(s.Executable) != s.Executable:
			return nil, fmt.Errorf("%s: want an absolute, clean path", field("executable"))
		case !hashRE.MatchString(s.ExecutableSHA256):
			return nil, fmt.Errorf("%s: want 64 lowercase hex digits", field("executable_sha256"))
		case len(s.Arguments) > 32:
			return nil, fmt.Errorf("%s: at most 32", field("arguments"))
		case s.RequestTimeoutMS < 100 || s.RequestTimeoutMS > 300_000:
			return nil, fmt.Errorf("%s: want 100 to 300000", field("request_timeout_ms"))
		case s.ReviewedBy == "" || len(s.ReviewedBy) > 128:
			return nil, fmt.Errorf("%s: want 1 to 128 characters", field("reviewed_by"))
		case s.ReviewedAt.IsZero():
			return nil, fmt.Errorf("%s: required (RFC 3339)", field("reviewed_at"))
		case len(s.InitializationOptions) > 64<<10 || len(s.Settings) > 64<<10:
			return nil, fmt.Errorf("%s: initialization_options and settings are at most 64 KiB", field("initialization_options"))
		case len(s.Languages) == 0 || len(s.Languages) > 16:
			return nil, fmt.Errorf("%s: want 1 to 16 entries", field("languages"))
		}
		for _, a := range s.Arguments {
			if len(a) > 4096 || strings.ContainsRune(a, 0) {
				return nil, fmt.Errorf("%s: an argument is too long or has NUL", field("arguments"))
			}
		}
		if len(s.ReadOnly) > 16 {
			return nil, fmt.Errorf("%s: at most 16", field("read_only"))
		}
		for _, p := range s.ReadOnly {
			if !filepath.IsAbs(p) || filepath.Clean(p) != p || p == "/" || strings.ContainsRune(p, 0) {
				return nil, fmt.Errorf("%s: %q is not a clean absolute path below /", field("read_only"), p)
			}
		}
		if s.RSSEstimateMB < 0 || s.RSSEstimateMB > 1<<16 {
			return nil, fmt.Errorf("%s: want 0 to 65536", field("rss_estimate_mb"))
		}
		if q := s.LoadQuietMS; q != nil && (*q < 0 || *q > 60_000) {
			return nil, fmt.Errorf("%s: want 0 to 60000", field("load_quiet_ms"))
		}
		if len(s.ExternalRoots) > 16 {
			return nil, fmt.Errorf("%s: at most 16", field("external_roots"))
		}
		for _, x := range s.ExternalRoots {
			if !filepath.IsAbs(x.Dir) || filepath.Clean(x.Dir) != x.Dir || x.Dir == "/" || !moduleRE.MatchString(x.Module) {
				return nil, fmt.Errorf("%s: want a clean absolute dir below / and a module name@version", field("external_roots"))
			}
		}
		for _, e := range s.Env {
			if !envRE.MatchString(e) {
				return nil, fmt.Errorf("%s: %q is not NAME=value", field("env"), e)
			}
		}
		for j, l := range s.Languages {
			if !idRE.MatchString(l.ID) || len(l.Extensions) == 0 || len(l.Extensions) > 16 {
				return nil, fmt.Errorf("%s: want an id and 1 to 16 extensions", field(fmt.Sprintf("languages[%d]", j)))
			}
			for _, x := range l.Extensions {
				if !extRE.MatchString(x) {
					return nil, fmt.Errorf("%s: %q is not an extension like .go", field(fmt.Sprintf("languages[%d].extensions", j)), x)
				}
				if other, dup := exts[x]; dup {
					return nil, fmt.Errorf("%s: %q already served by %q", field(fmt.Sprintf("languages[%d].extensions", j)), x, other)
				}
				exts[x] = s.ID
			}
		}
		if err := checkTypeScript(s, field); err != nil {
			return nil, err
		}
		ids[s.ID] = true
	}
	return &File{Servers: doc.Servers}, nil
}

// checkRegularFile refuses relative, unclean and link paths and anything
// that is not a regular file.
func checkRegularFile(path string) error {
	if !filepath.IsAbs(path) || filepath.Clean(path) != path {
		return fmt.Errorf("%q: want an absolute, clean path", path)
	}
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return err
	}
	if real != path {
		return fmt.Errorf("%q: a link (or under one); name the real file", path)
	}
	fi, err := os.Lstat(path)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%q: not a regular file", path)
	}
	return nil
}

// Qualify checks a server's executable against its pin and copies it into
// binDir/<sha256>, read-only, so that what runs is exactly what was hashed:
// there is no window between hashing and starting in which the file at the
// configured path could be swapped. It returns the path to run.
func Qualify(s Server, binDir string) (string, error) {
	if err := checkRegularFile(s.Executable); err != nil {
		return "", fmt.Errorf("server %q: executable: %w", s.ID, err)
	}
	if _, _, _, err := TypeScriptLib(s); err != nil {
		return "", err
	}
	dst := filepath.Join(binDir, s.ExecutableSHA256)
	if sum, err := fileSHA256(dst); err == nil && sum == s.ExecutableSHA256 {
		return dst, nil
	}
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		return "", err
	}
	in, err := os.Open(s.Executable)
	if err != nil {
		return "", fmt.Errorf("server %q: executable: %w", s.ID, err)
	}
	defer in.Close()
	tmp, err := os.CreateTemp(binDir, ".qualify-")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name())
	h := sha256.New()
	if _, err := io.Copy(io.MultiWriter(tmp, h), in); err != nil {
		tmp.Close()
		return "", fmt.Errorf("server %q: copy executable: %w", s.ID, err)
	}
	if err := tmp.Close(); err != nil {
		return "", err
	}
	// The digest is of the bytes written to the copy, not of the file at
	// the configured path at some other moment.
	if got := hex.EncodeToString(h.Sum(nil)); got != s.ExecutableSHA256 {
		return "", fmt.Errorf("server %q: executable_sha256 mismatch: the file hashes to %s", s.ID, got)
	}
	if err := os.Chmod(tmp.Name(), 0o555); err != nil {
		return "", err
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return "", err
	}
	return dst, nil
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// FileSHA256 is the lowercase hex digest of a file, for operators writing pins.
func FileSHA256(path string) (string, error) { return fileSHA256(path) }
