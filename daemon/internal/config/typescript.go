package config

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// typescript-language-server chooses which TypeScript to run from its
// initialization options: a valid tsserver.path wins; without one (or when
// that path is invalid) it takes the workspace's own
// node_modules/typescript, that is, code from the repository. So an entry
// that runs it, or that sets tsserver at all, must pin tsserver.path to a
// reviewed tsserver.js and switch off the two ways tsserver loads more code
// on its own: automatic type acquisition (it runs npm) and global plugins
// (the plugins option). Project plugins named in a repository's tsconfig.json
// are resolved only next to the pinned TypeScript (tsserver's peer
// node_modules), because typescript-language-server never passes
// --allowLocalPluginLoads; so they can name only what the operator
// installed there.
//
// tsserver.useSyntaxServer must be "never": by default a second, syntax-only
// tsserver answers hover, definition, references, completion and signature
// help while the project loads, without resolving imports, and the answer
// would look complete. With one semantic server a request waits for the
// project instead (within its deadline).

// tsOptions are the initialization options the daemon checks; the rest pass
// through unread.
type tsOptions struct {
	Tsserver                          json.RawMessage `json:"tsserver"`
	Plugins                           json.RawMessage `json:"plugins"`
	DisableAutomaticTypingAcquisition json.RawMessage `json:"disableAutomaticTypingAcquisition"`
	NpmLocation                       json.RawMessage `json:"npmLocation"`
}

type tsserverOptions struct {
	Path            *string         `json:"path"`
	FallbackPath    json.RawMessage `json:"fallbackPath"`
	UseSyntaxServer *string         `json:"useSyntaxServer"`
}

// runsTypeScriptLanguageServer reports whether an argument is the CLI of
// typescript-language-server (its package directory is on the path).
func runsTypeScriptLanguageServer(s Server) bool {
	for _, a := range s.Arguments {
		if strings.Contains(filepath.ToSlash(a), "/typescript-language-server/") {
			return true
		}
	}
	return false
}

// checkTypeScript validates the TypeScript-specific part of an entry's
// initialization options; field names the entry for errors.
func checkTypeScript(s Server, field func(string) string) error {
	var opts tsOptions
	raw := bytes.TrimSpace(s.InitializationOptions)
	isObject := len(raw) > 0 && raw[0] == '{'
	if isObject {
		if err := json.Unmarshal(raw, &opts); err != nil {
			return fmt.Errorf("%s: %w", field("initialization_options"), err)
		}
	}
	if !runsTypeScriptLanguageServer(s) && isNull(opts.Tsserver) {
		return nil
	}
	if !isObject || isNull(opts.Tsserver) {
		return fmt.Errorf("%s: typescript-language-server needs tsserver.path pinned to the reviewed tsserver.js, or it runs the repository's own TypeScript", field("initialization_options.tsserver.path"))
	}
	var ts tsserverOptions
	if err := json.Unmarshal(opts.Tsserver, &ts); err != nil {
		return fmt.Errorf("%s: want an object: %w", field("initialization_options.tsserver"), err)
	}
	switch {
	case ts.Path == nil:
		return fmt.Errorf("%s: required: the reviewed tsserver.js", field("initialization_options.tsserver.path"))
	case !filepath.IsAbs(*ts.Path) || filepath.Clean(*ts.Path) != *ts.Path:
		return fmt.Errorf("%s: want an absolute, clean path", field("initialization_options.tsserver.path"))
	case filepath.Base(*ts.Path) != "tsserver.js" || filepath.Base(filepath.Dir(*ts.Path)) != "lib":
		return fmt.Errorf("%s: want the path of a TypeScript package's lib/tsserver.js", field("initialization_options.tsserver.path"))
	case !isNull(ts.FallbackPath):
		return fmt.Errorf("%s: not allowed: the pinned path is the only TypeScript", field("initialization_options.tsserver.fallbackPath"))
	case ts.UseSyntaxServer == nil || *ts.UseSyntaxServer != "never":
		return fmt.Errorf("%s: must be \"never\": while a project loads, the syntax server answers without the project (imports unresolved), which would pass a partial answer off as current", field("initialization_options.tsserver.useSyntaxServer"))
	case string(bytes.TrimSpace(opts.DisableAutomaticTypingAcquisition)) != "true":
		return fmt.Errorf("%s: must be true: type acquisition runs npm", field("initialization_options.disableAutomaticTypingAcquisition"))
	case !isNull(opts.NpmLocation):
		return fmt.Errorf("%s: not allowed", field("initialization_options.npmLocation"))
	case !isNull(opts.Plugins) && string(bytes.TrimSpace(opts.Plugins)) != "[]":
		return fmt.Errorf("%s: must be empty: a global tsserver plugin is code the review did not cover", field("initialization_options.plugins"))
	}
	return nil
}

func isNull(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) == 0 || string(t) == "null"
}

// TSServerPath is the entry's pinned tsserver.js, "" when it has none. The
// entry was validated by Parse.
func (s Server) TSServerPath() string {
	var opts tsOptions
	if json.Unmarshal(s.InitializationOptions, &opts) != nil || isNull(opts.Tsserver) {
		return ""
	}
	var ts tsserverOptions
	if json.Unmarshal(opts.Tsserver, &ts) != nil || ts.Path == nil {
		return ""
	}
	return *ts.Path
}

// TypeScriptLib is the pinned TypeScript package of an entry: its directory
// (the parent of lib/) and its module name, name@version from its
// package.json ("typescript@5.9.3"). ok is false for an entry without
// tsserver.path.
func TypeScriptLib(s Server) (dir, module string, ok bool, err error) {
	p := s.TSServerPath()
	if p == "" {
		return "", "", false, nil
	}
	if err := checkRegularFile(p); err != nil {
		return "", "", true, fmt.Errorf("server %q: tsserver.path: %w", s.ID, err)
	}
	dir = filepath.Dir(filepath.Dir(p))
	pj := filepath.Join(dir, "package.json")
	if err := checkRegularFile(pj); err != nil {
		return "", "", true, fmt.Errorf("server %q: tsserver.path: the TypeScript package.json: %w", s.ID, err)
	}
	f, err := os.Open(pj)
	if err != nil {
		return "", "", true, fmt.Errorf("server %q: tsserver.path: %w", s.ID, err)
	}
	defer f.Close()
	var pkg struct {
		Name    string `json:"name"`
		Version string `json:"version"`
	}
	if err := json.NewDecoder(io.LimitReader(f, 1<<20)).Decode(&pkg); err != nil {
		return "", "", true, fmt.Errorf("server %q: tsserver.path: the TypeScript package.json: %w", s.ID, err)
	}
	if !idRE.MatchString(pkg.Name) || pkg.Version == "" || len(pkg.Version) > 64 || strings.ContainsAny(pkg.Version, "/ \x00") {
		return "", "", true, fmt.Errorf("server %q: tsserver.path: the TypeScript package.json has no usable name and version", s.ID)
	}
	return dir, pkg.Name + "@" + pkg.Version, true, nil
}

// Verify checks an entry against the files on disk without copying
// anything: the executable is an absolute, canonical, non-link regular file
// whose SHA-256 is the pin, and a pinned tsserver.js exists as such a file
// inside a TypeScript package. It is qualification with --start=false.
func Verify(s Server) error {
	if err := checkRegularFile(s.Executable); err != nil {
		return fmt.Errorf("server %q: executable: %w", s.ID, err)
	}
	sum, err := fileSHA256(s.Executable)
	if err != nil {
		return fmt.Errorf("server %q: executable: %w", s.ID, err)
	}
	if sum != s.ExecutableSHA256 {
		return fmt.Errorf("server %q: executable_sha256 mismatch: the file hashes to %s", s.ID, sum)
	}
	if _, _, _, err := TypeScriptLib(s); err != nil {
		return err
	}
	return nil
}

// DescriptorFingerprint binds everything that decides what an entry runs
// and how: executable path and pin, arguments, environment, initialization
// options, settings and languages. For an interpreter such as Node the
// executable pin proves only the interpreter; the fingerprint at least
// changes whenever the script paths or options do. It reveals none of them.
func DescriptorFingerprint(s Server) string {
	b, _ := json.Marshal([]any{s.ProtocolVersion, s.ID, s.Executable, s.ExecutableSHA256, s.Arguments, s.Env,
		canonicalOrRaw(s.InitializationOptions), canonicalOrRaw(s.Settings), s.Languages})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// canonicalOrRaw re-encodes JSON with sorted keys, so that formatting does
// not change a fingerprint.
func canonicalOrRaw(raw json.RawMessage) any {
	if isNull(raw) {
		return nil
	}
	var v any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return string(raw)
	}
	return v
}
