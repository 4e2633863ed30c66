package config

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// server is a valid gopls entry as a generic map, for tests to spoil.
func server() map[string]any {
	return map[string]any{
		"protocol_version":   ServerProtocol,
		"id":                 "gopls",
		"name":               "gopls",
		"languages":          []any{map[string]any{"id": "go", "extensions": []any{".go"}}},
		"executable":         "/opt/tools/gopls",
		"arguments":          []any{"serve"},
		"executable_sha256":  strings.Repeat("ab", 32),
		"request_timeout_ms": 15000,
		"reviewed_by":        "operator",
		"reviewed_at":        "2026-08-20T00:00:00Z",
	}
}

// tsServer is a valid typescript-language-server entry.
func tsServer() map[string]any {
	return map[string]any{
		"protocol_version": ServerProtocol,
		"id":               "typescript",
		"name":             "TypeScript Language Server",
		"languages": []any{
			map[string]any{"id": "typescript", "extensions": []any{".ts"}},
			map[string]any{"id": "typescriptreact", "extensions": []any{".tsx"}},
		},
		"executable":        "/usr/bin/node",
		"arguments":         []any{"/opt/ts/node_modules/typescript-language-server/lib/cli.mjs", "--stdio"},
		"executable_sha256": strings.Repeat("cd", 32),
		"initialization_options": map[string]any{
			"tsserver":                          map[string]any{"path": "/opt/ts/node_modules/typescript/lib/tsserver.js", "useSyntaxServer": "never"},
			"disableAutomaticTypingAcquisition": true,
		},
		"request_timeout_ms": 15000,
		"reviewed_by":        "operator",
		"reviewed_at":        "2026-08-20T00:00:00Z",
	}
}

func doc(servers ...map[string]any) map[string]any {
	list := make([]any, len(servers))
	for i, s := range servers {
		list[i] = s
	}
	return map[string]any{"protocol_version": FileProtocol, "servers": list}
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParseAcceptsTheReferenceServers(t *testing.T) {
	f, err := Parse(mustJSON(t, doc(server(), tsServer())))
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Servers) != 2 || f.Servers[1].TSServerPath() != "/opt/ts/node_modules/typescript/lib/tsserver.js" {
		t.Fatalf("parsed %+v", f.Servers)
	}
	if f.Servers[0].TSServerPath() != "" {
		t.Fatalf("gopls has no tsserver path, got %q", f.Servers[0].TSServerPath())
	}
}

// TestParseNamesTheField: every way to spoil an entry is refused with an
// error that names the offending field.
func TestParseNamesTheField(t *testing.T) {
	set := func(k string, v any) func(map[string]any) { return func(m map[string]any) { m[k] = v } }
	del := func(k string) func(map[string]any) { return func(m map[string]any) { delete(m, k) } }
	initOpts := func(f func(o map[string]any)) func(map[string]any) {
		return func(m map[string]any) { f(m["initialization_options"].(map[string]any)) }
	}
	many := func(n int, v any) []any {
		out := make([]any, n)
		for i := range out {
			out[i] = v
		}
		return out
	}
	for _, tc := range []struct {
		name  string
		base  func() map[string]any
		spoil func(map[string]any)
		field string
	}{
		{"server protocol", server, set("protocol_version", "code-intel-lsp.v2"), "servers[0].protocol_version"},
		{"id pattern", server, set("id", "Go Pls"), "servers[0].id"},
		{"id empty", server, set("id", ""), "servers[0].id"},
		{"name empty", server, set("name", ""), "servers[0].name"},
		{"name too long", server, set("name", strings.Repeat("n", 129)), "servers[0].name"},
		{"executable relative", server, set("executable", "bin/gopls"), "servers[0].executable"},
		{"read_only relative", server, set("read_only", []any{"usr/include"}), "servers[0].read_only"},
		{"read_only root", server, set("read_only", []any{"/"}), "servers[0].read_only"},
		{"read_only unclean", server, set("read_only", []any{"/usr/../etc"}), "servers[0].read_only"},
		{"external root relative", server, set("external_roots", []any{map[string]any{"dir": "include", "module": "x@1"}}), "servers[0].external_roots"},
		{"external root module", server, set("external_roots", []any{map[string]any{"dir": "/usr/include", "module": "no version"}}), "servers[0].external_roots"},
		{"rss estimate negative", server, set("rss_estimate_mb", -1), "servers[0].rss_estimate_mb"},
		{"load quiet negative", server, set("load_quiet_ms", -1), "servers[0].load_quiet_ms"},
		{"load quiet too long", server, set("load_quiet_ms", 60_001), "servers[0].load_quiet_ms"},
		{"executable unclean", server, set("executable", "/opt/../opt/gopls"), "servers[0].executable"},
		{"sha256 short", server, set("executable_sha256", "abc"), "servers[0].executable_sha256"},
		{"sha256 upper", server, set("executable_sha256", strings.Repeat("AB", 32)), "servers[0].executable_sha256"},
		{"too many arguments", server, set("arguments", many(33, "x")), "servers[0].arguments"},
		{"argument with NUL", server, set("arguments", []any{"a\x00b"}), "servers[0].arguments"},
		{"argument too long", server, set("arguments", []any{strings.Repeat("a", 4097)}), "servers[0].arguments"},
		{"timeout low", server, set("request_timeout_ms", 99), "servers[0].request_timeout_ms"},
		{"timeout high", server, set("request_timeout_ms", 300001), "servers[0].request_timeout_ms"},
		{"reviewed_by missing", server, del("reviewed_by"), "servers[0].reviewed_by"},
		{"reviewed_by too long", server, set("reviewed_by", strings.Repeat("r", 129)), "servers[0].reviewed_by"},
		{"reviewed_at missing", server, del("reviewed_at"), "servers[0].reviewed_at"},
		{"init options too large", server, set("initialization_options", map[string]any{"x": strings.Repeat("a", 64<<10)}), "servers[0].initialization_options"},
		{"no languages", server, set("languages", []any{}), "servers[0].languages"},
		{"too many languages", server, set("languages", many(17, map[string]any{"id": "go", "extensions": []any{".go"}})), "servers[0].languages"},
		{"language id", server, set("languages", []any{map[string]any{"id": "Go!", "extensions": []any{".go"}}}), "servers[0].languages[0]"},
		{"language without extensions", server, set("languages", []any{map[string]any{"id": "go", "extensions": []any{}}}), "servers[0].languages[0]"},
		{"extension shape", server, set("languages", []any{map[string]any{"id": "go", "extensions": []any{"go"}}}), "servers[0].languages[0].extensions"},
		{"extension twice", server, set("languages", []any{
			map[string]any{"id": "go", "extensions": []any{".go"}},
			map[string]any{"id": "go2", "extensions": []any{".go"}},
		}), "servers[0].languages[1].extensions"},
		{"env shape", server, set("env", []any{"lower=1"}), "servers[0].env"},
		{"ts without tsserver", tsServer, del("initialization_options"), "servers[0].initialization_options.tsserver.path"},
		{"ts without path", tsServer, initOpts(func(o map[string]any) { o["tsserver"] = map[string]any{} }), "servers[0].initialization_options.tsserver.path"},
		{"ts relative path", tsServer, initOpts(func(o map[string]any) {
			o["tsserver"] = map[string]any{"path": "node_modules/typescript/lib/tsserver.js"}
		}), "servers[0].initialization_options.tsserver.path"},
		{"ts path not tsserver.js", tsServer, initOpts(func(o map[string]any) {
			o["tsserver"] = map[string]any{"path": "/opt/ts/node_modules/typescript/lib/typescript.js"}
		}), "servers[0].initialization_options.tsserver.path"},
		{"ts fallback path", tsServer, initOpts(func(o map[string]any) {
			o["tsserver"] = map[string]any{"path": "/opt/ts/node_modules/typescript/lib/tsserver.js", "fallbackPath": "/x/lib/tsserver.js"}
		}), "servers[0].initialization_options.tsserver.fallbackPath"},
		{"ts syntax server", tsServer, initOpts(func(o map[string]any) {
			o["tsserver"] = map[string]any{"path": "/opt/ts/node_modules/typescript/lib/tsserver.js", "useSyntaxServer": "auto"}
		}), "servers[0].initialization_options.tsserver.useSyntaxServer"},
		{"ts syntax server default", tsServer, initOpts(func(o map[string]any) {
			o["tsserver"] = map[string]any{"path": "/opt/ts/node_modules/typescript/lib/tsserver.js"}
		}), "servers[0].initialization_options.tsserver.useSyntaxServer"},
		{"ts type acquisition on", tsServer, initOpts(func(o map[string]any) { o["disableAutomaticTypingAcquisition"] = false }), "servers[0].initialization_options.disableAutomaticTypingAcquisition"},
		{"ts type acquisition default", tsServer, initOpts(func(o map[string]any) { delete(o, "disableAutomaticTypingAcquisition") }), "servers[0].initialization_options.disableAutomaticTypingAcquisition"},
		{"ts npm location", tsServer, initOpts(func(o map[string]any) { o["npmLocation"] = "/usr/bin/npm" }), "servers[0].initialization_options.npmLocation"},
		{"ts plugins", tsServer, initOpts(func(o map[string]any) {
			o["plugins"] = []any{map[string]any{"name": "p", "location": "/opt/p"}}
		}), "servers[0].initialization_options.plugins"},
		{"tsserver set on another server", server, set("initialization_options", map[string]any{"tsserver": map[string]any{"path": "rel", "useSyntaxServer": "never"}}), "servers[0].initialization_options.tsserver.path"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.base()
			tc.spoil(s)
			_, err := Parse(mustJSON(t, doc(s)))
			if err == nil {
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), "config: "+tc.field+":") {
				t.Fatalf("error %q does not name %s", err, tc.field)
			}
		})
	}
}

func TestParseFileLevel(t *testing.T) {
	many := make([]map[string]any, MaxServers+1)
	for i := range many {
		many[i] = server()
		many[i]["id"] = fmt.Sprintf("s%d", i)
		many[i]["languages"] = []any{map[string]any{"id": "l", "extensions": []any{fmt.Sprintf(".x%d", i)}}}
	}
	dup := doc(server(), server())
	dup["servers"].([]any)[1].(map[string]any)["languages"] = []any{map[string]any{"id": "go", "extensions": []any{".go2"}}}
	unknownTop := doc(server())
	unknownTop["extra"] = 1
	unknownServer := server()
	unknownServer["workspace_id"] = "w"
	for _, tc := range []struct {
		name, raw, want string
	}{
		{"file protocol", string(mustJSON(t, map[string]any{"protocol_version": "v0", "servers": []any{server()}})), "config: protocol_version:"},
		{"no servers", string(mustJSON(t, doc())), "config: servers:"},
		{"too many servers", string(mustJSON(t, doc(many...))), "config: servers:"},
		{"duplicate id", string(mustJSON(t, dup)), "config: servers[1].id:"},
		{"duplicate extension across servers", func() string {
			a, b := server(), server()
			b["id"] = "other"
			return string(mustJSON(t, doc(a, b)))
		}(), "config: servers[1].languages[0].extensions:"},
		{"unknown top-level field", string(mustJSON(t, unknownTop)), `unknown field "extra"`},
		{"unknown server field", string(mustJSON(t, doc(unknownServer))), `unknown field "workspace_id"`},
		{"trailing data", string(mustJSON(t, doc(server()))) + "{}", "trailing data"},
		{"not json", "{", "config:"},
		{"bad reviewed_at", strings.Replace(string(mustJSON(t, doc(server()))), "2026-08-20T00:00:00Z", "yesterday", 1), "config:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.raw))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v; want one containing %q", err, tc.want)
			}
		})
	}
}

// writeFile writes content to dir/name and returns its canonical path.
func writeFile(t *testing.T, dir, name, content string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		t.Fatal(err)
	}
	return real
}

func canonicalTempDir(t *testing.T) string {
	d, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestLoadFile(t *testing.T) {
	dir := canonicalTempDir(t)
	good := writeFile(t, dir, "servers.json", string(mustJSON(t, doc(server()))), 0o644)
	f, err := LoadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(f.Source, "servers.json@sha256:") || len(f.Source) != len("servers.json@sha256:")+64 {
		t.Fatalf("source = %q; want the file name and its digest", f.Source)
	}
	link := filepath.Join(dir, "link.json")
	if err := os.Symlink(good, link); err != nil {
		t.Fatal(err)
	}
	big := writeFile(t, dir, "big.json", strings.Repeat(" ", maxFileBytes+1), 0o644)
	for _, tc := range []struct{ name, path, want string }{
		{"relative", "servers.json", "absolute"},
		{"unclean", dir + "/./servers.json", "absolute"},
		{"link", link, "a link"},
		{"directory", dir, "not a regular file"},
		{"missing", filepath.Join(dir, "nope.json"), "no such file"},
		{"too large", big, "larger than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LoadFile(tc.path)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "config file:") {
				t.Fatalf("error %v; want config file: …%s…", err, tc.want)
			}
		})
	}
}

func TestQualifyCopiesWhatItHashed(t *testing.T) {
	dir := canonicalTempDir(t)
	exe := writeFile(t, dir, "tools/server", "#!/bin/sh\necho reviewed\n", 0o755)
	sum, err := FileSHA256(exe)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "bin")
	s := Server{ID: "x", Executable: exe, ExecutableSHA256: sum}
	got, err := Qualify(s, bin)
	if err != nil {
		t.Fatal(err)
	}
	if got != filepath.Join(bin, sum) {
		t.Fatalf("qualified path %q; want the content address", got)
	}
	fi, err := os.Stat(got)
	if err != nil || fi.Mode().Perm()&0o222 != 0 {
		t.Fatalf("the copy is writable or missing: %v %v", fi.Mode(), err)
	}
	if err := Verify(s); err != nil {
		t.Fatalf("verify: %v", err)
	}

	// The file changes after review: both checks refuse it.
	if err := os.WriteFile(exe, []byte("#!/bin/sh\necho swapped\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := Verify(s); err == nil || !strings.Contains(err.Error(), "executable_sha256 mismatch") {
		t.Fatalf("verify of a swapped file: %v", err)
	}
	if _, err := Qualify(s, filepath.Join(dir, "bin2")); err == nil || !strings.Contains(err.Error(), "executable_sha256 mismatch") {
		t.Fatalf("qualify of a swapped file: %v", err)
	}
	link := filepath.Join(dir, "tools/link")
	if err := os.Symlink(exe, link); err != nil {
		t.Fatal(err)
	}
	if err := Verify(Server{ID: "x", Executable: link, ExecutableSHA256: sum}); err == nil || !strings.Contains(err.Error(), "a link") {
		t.Fatalf("verify of a link: %v", err)
	}
}

func TestTypeScriptLib(t *testing.T) {
	dir := canonicalTempDir(t)
	exe := writeFile(t, dir, "node", "#!/bin/sh\n", 0o755)
	sum, _ := FileSHA256(exe)
	tsserver := writeFile(t, dir, "ts/node_modules/typescript/lib/tsserver.js", "// tsserver\n", 0o644)
	writeFile(t, dir, "ts/node_modules/typescript/package.json", `{"name":"typescript","version":"5.9.3"}`, 0o644)
	m := tsServer()
	m["executable"], m["executable_sha256"] = exe, sum
	m["initialization_options"].(map[string]any)["tsserver"] = map[string]any{"path": tsserver, "useSyntaxServer": "never"}
	f, err := Parse(mustJSON(t, doc(m)))
	if err != nil {
		t.Fatal(err)
	}
	s := f.Servers[0]
	libDir, module, ok, err := TypeScriptLib(s)
	if err != nil || !ok || module != "typescript@5.9.3" || libDir != filepath.Join(dir, "ts/node_modules/typescript") {
		t.Fatalf("TypeScriptLib = %q %q %v %v", libDir, module, ok, err)
	}
	if err := Verify(s); err != nil {
		t.Fatal(err)
	}
	if _, err := Qualify(s, filepath.Join(dir, "bin")); err != nil {
		t.Fatal(err)
	}

	// A pinned tsserver.js that is gone would make typescript-language-server
	// fall back to the repository's TypeScript: qualification refuses.
	if err := os.Remove(tsserver); err != nil {
		t.Fatal(err)
	}
	if err := Verify(s); err == nil || !strings.Contains(err.Error(), "tsserver.path") {
		t.Fatalf("verify without tsserver.js: %v", err)
	}
	if _, err := Qualify(s, filepath.Join(dir, "bin3")); err == nil || !strings.Contains(err.Error(), "tsserver.path") {
		t.Fatalf("qualify without tsserver.js: %v", err)
	}
	if _, _, ok, err := TypeScriptLib(Server{ID: "gopls"}); ok || err != nil {
		t.Fatalf("a server without tsserver: ok=%v err=%v", ok, err)
	}
}

func TestDescriptorFingerprint(t *testing.T) {
	parse := func(m map[string]any) Server {
		f, err := Parse(mustJSON(t, doc(m)))
		if err != nil {
			t.Fatal(err)
		}
		return f.Servers[0]
	}
	base := DescriptorFingerprint(parse(tsServer()))
	// Formatting of the same options does not change it.
	s := parse(tsServer())
	s.InitializationOptions = json.RawMessage(`{ "disableAutomaticTypingAcquisition" : true,
		"tsserver": {"useSyntaxServer": "never", "path":"/opt/ts/node_modules/typescript/lib/tsserver.js"} }`)
	if DescriptorFingerprint(s) != base {
		t.Fatal("reformatted options changed the fingerprint")
	}
	other := tsServer()
	other["arguments"] = []any{"/opt/other/node_modules/typescript-language-server/lib/cli.mjs", "--stdio"}
	if DescriptorFingerprint(parse(other)) == base {
		t.Fatal("other arguments, same fingerprint")
	}
	if strings.Contains(base, "/opt") || len(base) != 64 {
		t.Fatalf("fingerprint %q", base)
	}
}

func FuzzParse(f *testing.F) {
	f.Add(mustJSON(f, doc(server())))
	f.Add(mustJSON(f, doc(server(), tsServer())))
	f.Add([]byte(`{"protocol_version":"code-intel-config.v1","servers":[{"initialization_options":{"tsserver":null}}]}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		cf, err := Parse(raw)
		if err != nil {
			return
		}
		if len(cf.Servers) == 0 || len(cf.Servers) > MaxServers {
			t.Fatalf("accepted %d servers", len(cf.Servers))
		}
		ids := map[string]bool{}
		for _, s := range cf.Servers {
			if ids[s.ID] || !filepath.IsAbs(s.Executable) {
				t.Fatalf("accepted a repeated id or a relative executable: %+v", s)
			}
			ids[s.ID] = true
			if runsTypeScriptLanguageServer(s) && s.TSServerPath() == "" {
				t.Fatalf("accepted typescript-language-server without a pinned tsserver: %+v", s)
			}
		}
	})
}
