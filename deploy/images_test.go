package deploy_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/hanzoai/lsp/deploy/internal/dockerfile"
)

// The images, checked as text: nothing here needs a Docker engine.

func parseDockerfile(t testing.TB, name string) *dockerfile.File {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("images", name))
	if err != nil {
		t.Fatal(err)
	}
	f, err := dockerfile.Parse(string(b))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return f
}

var dockerfiles = []string{"proxy.Dockerfile", "daemon.Dockerfile"}

// TestImagesPinnedAndNonRoot: every base image is pinned by digest (a stage
// may also build FROM an earlier stage), the shipped stage runs as a
// non-root user, and the Go toolchain is the one go.work names.
func TestImagesPinnedAndNonRoot(t *testing.T) {
	goVersion := goWorkVersion(t)
	for _, name := range dockerfiles {
		t.Run(name, func(t *testing.T) {
			f := parseDockerfile(t, name)
			stages := map[string]bool{} // earlier stage names
			for _, st := range f.Stages {
				if stages[st.From] {
					continue
				}
				ref, err := dockerfile.ParseRef(st.From)
				if err != nil {
					t.Fatal(err)
				}
				if ref.Digest == "" {
					t.Errorf("FROM %s: not pinned by digest", st.From)
				}
				if ref.Tag == "" || ref.Tag == "latest" {
					t.Errorf("FROM %s: name a version tag beside the digest, for the reader", st.From)
				}
				if ref.Name == "golang" && !strings.HasPrefix(ref.Tag, goVersion+"-") {
					t.Errorf("FROM %s: the Go toolchain must be go.work's %s", st.From, goVersion)
				}
				if st.Name != "" {
					stages[st.Name] = true
				}
			}
			user := f.Final().User()
			uid, gid, _ := strings.Cut(user, ":")
			if user == "" || uid == "root" || uid == "0" || gid == "root" || gid == "0" {
				t.Errorf("the shipped stage runs as %q: want a non-root USER", user)
			}
			if n, err := strconv.Atoi(uid); err != nil || n != 65532 {
				// The manifests' runAsUser; a numeric USER lets
				// runAsNonRoot verify it without a passwd lookup.
				t.Errorf("USER %q: want 65532:65532, the manifests' runAsUser", user)
			}
			entry := f.Final().Each("ENTRYPOINT")
			if len(entry) != 1 || !strings.HasPrefix(entry[0].Args, `["/`) {
				t.Errorf("ENTRYPOINT: want one exec-form entrypoint with an absolute path, have %v", entry)
			}
		})
	}
}

var (
	secretNameRE  = regexp.MustCompile(`(?i)(secret|passw|token|credential|private|api_?key|access_?key|_key$|^key$|auth)`)
	secretValueRE = regexp.MustCompile(`-----BEGIN|AKIA[0-9A-Z]{16}|gh[pousr]_[A-Za-z0-9]{20,}|xox[abprs]-|sk-[A-Za-z0-9]{20,}|://[^/\s:@]+:[^/\s@]+@`)
	secretFileRE  = regexp.MustCompile(`(?i)(\.pem|\.key|\.p12|\.pfx|id_rsa|id_ed25519|\.env|\.npmrc|\.netrc|credentials|\.git-credentials)(\s|$|/)`)
)

// TestImagesHaveNoSecrets: no ARG or ENV with a secret-looking name or
// value, no secret-looking file copied in, nothing fetched by ADD.
func TestImagesHaveNoSecrets(t *testing.T) {
	for _, name := range dockerfiles {
		t.Run(name, func(t *testing.T) {
			for _, problem := range secretProblems(t, parseDockerfile(t, name)) {
				t.Error(problem)
			}
		})
	}
}

// TestSecretProblemsFindsSecrets shows the check above is not vacuous.
func TestSecretProblemsFindsSecrets(t *testing.T) {
	for _, tc := range []struct{ name, src, want string }{
		{"clean", "FROM x\nARG VERSION=1\nENV PATH=/bin\nCOPY a.go /\n", ""},
		{"secret arg", "FROM x\nARG NPM_TOKEN\n", "NPM_TOKEN: a secret-looking name"},
		{"key env", "FROM x\nENV LSP_TENANT_KEY_SECRET=abc\n", "a secret-looking name"},
		{"pem value", "FROM x\nENV CERT=\"-----BEGIN CERTIFICATE-----\"\n", "a secret-looking value"},
		{"url with password", "FROM x\nENV DB=postgres://u:pw@db/x\n", "a secret-looking value"},
		{"aws key", "FROM x\nARG ID=AKIAABCDEFGHIJKLMNOP\n", "a secret-looking value"},
		{"key file", "FROM x\nCOPY deploy/tls.key /etc/\n", "a secret-looking file"},
		{"npmrc", "FROM x\nCOPY .npmrc ./\n", "a secret-looking file"},
		{"add", "FROM x\nADD https://example.com/x.tgz /\n", "ADD"},
		{"build secret", "FROM x\nRUN --mount=type=secret,id=t cat /run/secrets/t\n", "handles a secret"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := dockerfile.Parse(tc.src)
			if err != nil {
				t.Fatal(err)
			}
			got := strings.Join(secretProblems(t, f), "\n")
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Fatalf("problems = %q, want %q", got, tc.want)
			}
		})
	}
}

func secretProblems(t testing.TB, f *dockerfile.File) []string {
	t.Helper()
	var out []string
	check := func(in dockerfile.Instruction, k, v string) {
		if secretNameRE.MatchString(k) {
			out = append(out, fmt.Sprintf("line %d: %s %s: a secret-looking name; secrets reach the container at run time", in.Line, in.Cmd, k))
		}
		if secretValueRE.MatchString(v) {
			out = append(out, fmt.Sprintf("line %d: %s %s: a secret-looking value", in.Line, in.Cmd, k))
		}
	}
	all := append([]dockerfile.Instruction(nil), f.Preamble...)
	for _, st := range f.Stages {
		all = append(all, st.Instructions...)
	}
	for _, in := range all {
		switch in.Cmd {
		case "ARG":
			k, v, _ := dockerfile.ParseArg(in.Args)
			check(in, k, v)
		case "ENV":
			pairs, err := dockerfile.ParseEnv(in.Args)
			if err != nil {
				t.Fatalf("line %d: %v", in.Line, err)
			}
			for _, kv := range pairs {
				check(in, kv[0], kv[1])
			}
		case "COPY":
			if secretFileRE.MatchString(in.Args) {
				out = append(out, fmt.Sprintf("line %d: COPY %s: a secret-looking file", in.Line, in.Args))
			}
		case "ADD":
			out = append(out, fmt.Sprintf("line %d: ADD: use COPY (ADD fetches URLs and unpacks archives)", in.Line))
		case "RUN":
			if strings.Contains(in.Args, "--mount=type=secret") || secretValueRE.MatchString(in.Args) {
				out = append(out, fmt.Sprintf("line %d: RUN handles a secret", in.Line))
			}
		}
	}
	return out
}

// TestDaemonImageToolVersions: the daemon image installs the servers at the
// versions pinned elsewhere in the repository, on the Node release the
// TypeScript server declares.
func TestDaemonImageToolVersions(t *testing.T) {
	f := parseDockerfile(t, "daemon.Dockerfile")
	build := f.StageNamed("build")
	ts := f.StageNamed("typescript")
	if build == nil || ts == nil {
		t.Fatal("daemon.Dockerfile: want stages named build and typescript")
	}
	if got, want := build.Args(f.GlobalArgs)["GOPLS_VERSION"], makefileVar(t, "GOPLS_VERSION"); got != want {
		t.Errorf("GOPLS_VERSION = %q, the Makefile pins %q", got, want)
	}
	if !containsRun(build, "golang.org/x/tools/gopls@${GOPLS_VERSION}") {
		t.Error("the build stage does not install gopls@${GOPLS_VERSION}")
	}
	lock := readTSLock(t)
	args := ts.Args(f.GlobalArgs)
	for arg, pkg := range map[string]string{
		"TYPESCRIPT_VERSION":                 "typescript",
		"TYPESCRIPT_LANGUAGE_SERVER_VERSION": "typescript-language-server",
	} {
		if args[arg] == "" || args[arg] != lock.Declared[pkg] || args[arg] != lock.Locked[pkg] {
			t.Errorf("%s = %q; deploy/typescript declares %q and locks %q", arg, args[arg], lock.Declared[pkg], lock.Locked[pkg])
		}
	}
	// npm ci installs exactly the lock file; --engine-strict makes the
	// build fail on a Node the packages do not declare.
	if !containsRun(ts, "npm ci") || !containsRun(ts, "--ignore-scripts") || !containsRun(ts, "--engine-strict") {
		t.Error("the typescript stage must install with npm ci --ignore-scripts --engine-strict")
	}
	copied := strings.Join(argsOf(ts.Each("COPY")), "\n")
	for _, file := range []string{"deploy/typescript/package.json", "deploy/typescript/package-lock.json"} {
		if !strings.Contains(copied, file) {
			t.Errorf("the typescript stage does not copy %s", file)
		}
	}
	nodeRef, err := dockerfile.ParseRef(ts.From)
	if err != nil {
		t.Fatal(err)
	}
	if nodeRef.Name != "node" || f.Final().From != ts.From {
		t.Errorf("the typescript stage and the shipped stage must both be the pinned node image, have %q and %q", ts.From, f.Final().From)
	}
	nodeVersion, _, _ := strings.Cut(nodeRef.Tag, "-")
	engine := lock.Engines["typescript-language-server"]
	if !satisfiesMin(nodeVersion, engine) {
		t.Errorf("node %s does not satisfy typescript-language-server's engines %q", nodeVersion, engine)
	}
	if !strings.HasPrefix(nodeVersion, "22.") {
		t.Errorf("node %s: the image runs Node 22, the release typescript-language-server 6.0.0 declares", nodeVersion)
	}
	readme := readRepoFile(t, "deploy/README.md")
	if !strings.Contains(readme, "Node "+nodeVersion) {
		t.Errorf("deploy/README.md does not document the image's Node %s", nodeVersion)
	}
	final := f.Final()
	if !containsRun(final, "bubblewrap=${BUBBLEWRAP_VERSION}") || final.Args(f.GlobalArgs)["BUBBLEWRAP_VERSION"] == "" {
		t.Error("the shipped stage must install bubblewrap at a pinned BUBBLEWRAP_VERSION")
	}
	// The compiler the jail shows the go command (cgo files load as in an
	// ordinary checkout): gcc-12 and binutils pinned, and named in
	// LSP_JAIL_CC, which New refuses to start without when it is missing.
	for pkg, arg := range map[string]string{"gcc-12": "GCC_VERSION", "binutils": "BINUTILS_VERSION"} {
		if !containsRun(final, pkg+"=${"+arg+"}") || !regexp.MustCompile(`^[0-9][0-9.]*-[0-9A-Za-z.+~]+$`).MatchString(final.Args(f.GlobalArgs)[arg]) {
			t.Errorf("the shipped stage must install %s at a pinned Debian %s (have %q)", pkg, arg, final.Args(f.GlobalArgs)[arg])
		}
	}
	if !strings.Contains(readRepoFile(t, "deploy/images/daemon.Dockerfile"), "LSP_JAIL_CC=/usr/bin/gcc-12") {
		t.Error("the shipped stage must point LSP_JAIL_CC at the gcc-12 it installs")
	}
}

// satisfiesMin reports whether version satisfies a ">=x.y.z" constraint.
func satisfiesMin(version, constraint string) bool {
	min, ok := strings.CutPrefix(strings.TrimSpace(constraint), ">=")
	if !ok {
		return false
	}
	parse := func(s string) []int {
		var out []int
		for _, p := range strings.Split(strings.TrimSpace(s), ".") {
			n, err := strconv.Atoi(p)
			if err != nil {
				return nil
			}
			out = append(out, n)
		}
		return out
	}
	v, m := parse(version), parse(min)
	if len(v) != 3 || len(m) != 3 {
		return false
	}
	for i := range v {
		if v[i] != m[i] {
			return v[i] > m[i]
		}
	}
	return true
}

func containsRun(st *dockerfile.Stage, s string) bool {
	for _, in := range st.Each("RUN") {
		if strings.Contains(in.Args, s) {
			return true
		}
	}
	return false
}

func argsOf(ins []dockerfile.Instruction) []string {
	var out []string
	for _, in := range ins {
		out = append(out, in.Args)
	}
	return out
}

// serverConfig is code-intel-config.v1 as the daemon reads it, reduced to
// what the checks need; unknown fields fail (the daemon's own parser is
// strict too, and TestServerConfigQualifies runs it).
type serverConfig struct {
	ProtocolVersion string `json:"protocol_version"`
	Servers         []struct {
		ProtocolVersion string `json:"protocol_version"`
		ID              string `json:"id"`
		Name            string `json:"name"`
		Languages       []struct {
			ID         string   `json:"id"`
			Extensions []string `json:"extensions"`
		} `json:"languages"`
		Executable            string          `json:"executable"`
		Arguments             []string        `json:"arguments"`
		ExecutableSHA256      string          `json:"executable_sha256"`
		InitializationOptions json.RawMessage `json:"initialization_options"`
		Settings              json.RawMessage `json:"settings"`
		Env                   []string        `json:"env"`
		ReadOnly              []string        `json:"read_only"`
		ExternalRoots         []struct {
			Dir    string `json:"dir"`
			Module string `json:"module"`
		} `json:"external_roots"`
		RSSEstimateMB     int    `json:"rss_estimate_mb"`
		LoadQuietMS       *int   `json:"load_quiet_ms"`
		ReadsDependencies *bool  `json:"reads_dependencies"`
		RequestTimeoutMS  int    `json:"request_timeout_ms"`
		ReviewedBy        string `json:"reviewed_by"`
		ReviewedAt        string `json:"reviewed_at"`
	} `json:"servers"`
}

const configTemplate = "images/servers.json.in"

func readConfigTemplate(t testing.TB) (string, serverConfig) {
	t.Helper()
	b, err := os.ReadFile(configTemplate)
	if err != nil {
		t.Fatal(err)
	}
	var cfg serverConfig
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cfg); err != nil {
		t.Fatalf("%s: %v", configTemplate, err)
	}
	return string(b), cfg
}

// TestServerConfigMatchesImage: the reviewed-server config generated in the
// image names exactly the image's servers, each executable pinned by the
// SHA-256 the build computes of that same file, its scripts inside what the
// image installs; and the daemon is pointed at it.
func TestServerConfigMatchesImage(t *testing.T) {
	f := parseDockerfile(t, "daemon.Dockerfile")
	final := f.Final()
	_, cfg := readConfigTemplate(t)

	// Where each path in the shipped stage comes from: COPY destinations,
	// and the node binary of the node base image.
	installed := map[string]string{"/usr/local/bin/node": "the node base image"}
	for _, in := range final.Each("COPY") {
		fields := strings.Fields(in.Args)
		if len(fields) >= 2 {
			installed[fields[len(fields)-1]] = in.Args
		}
	}
	under := func(p string) bool {
		for dst := range installed {
			if p == dst || strings.HasPrefix(p, strings.TrimSuffix(dst, "/")+"/") {
				return true
			}
		}
		return false
	}
	ts := f.StageNamed("typescript")
	var tsDir string
	for _, in := range ts.Each("WORKDIR") {
		tsDir = in.Args
	}
	if _, ok := installed[tsDir]; !ok {
		t.Errorf("the TypeScript install %s is not copied into the shipped stage", tsDir)
	}
	// Every npm-installed server (a stage installing a deploy/<name> lock
	// file into its WORKDIR) is copied into the shipped stage, and only
	// their installs hold the servers' scripts.
	npmDirs := map[string]string{} // install dir → stage
	for _, st := range npmStages(f) {
		dir := ""
		for _, in := range st.Each("WORKDIR") {
			dir = in.Args
		}
		npmDirs[dir] = st.Name
		if _, ok := installed[dir]; !ok {
			t.Errorf("the %s install %s is not copied into the shipped stage", st.Name, dir)
		}
	}
	inNpm := func(p string) bool {
		for dir := range npmDirs {
			if strings.HasPrefix(p, dir+"/") {
				return true
			}
		}
		return false
	}

	// Servers from Debian packages the shipped stage installs at the
	// versions the Makefile pins (NATIVE_PKGS), by the executable the
	// package puts there.
	aptServers := map[string]struct{ exe, pkg string }{
		"clangd":        {"/usr/lib/llvm-19/bin/clangd", "clangd-19"},
		"rust-analyzer": {"/usr/bin/rust-analyzer", "rust-web-analyzer"},
	}
	pins := map[string]string{}
	rustPkgs := regexp.MustCompile(`(?m)^RUST_PKGS\s*:=\s*(.+)$`).FindStringSubmatch(readRepoFile(t, "Makefile"))
	if rustPkgs == nil {
		t.Fatal("Makefile: no RUST_PKGS")
	}
	for _, pv := range append(strings.Fields(rustPkgs[1]), makefileVar(t, "CLANGD_PKG")) {
		if p, v, ok := strings.Cut(pv, "="); ok {
			pins[p] = v
		}
	}
	finalArgs := final.Args(f.GlobalArgs)
	aptInstalls := func(pkg string) bool {
		for _, in := range final.Each("RUN") {
			for _, w := range strings.Fields(in.Args) {
				p, v, ok := strings.Cut(w, "=")
				if !ok || p != pkg {
					continue
				}
				if strings.HasPrefix(v, "${") {
					v = finalArgs[strings.Trim(v, "${}")]
				}
				if v == pins[pkg] {
					return true
				}
			}
		}
		return false
	}
	for id, a := range aptServers {
		if pins[a.pkg] == "" || !aptInstalls(a.pkg) {
			t.Errorf("server %s: the shipped stage does not install %s=%s (the Makefile's pin)", id, a.pkg, pins[a.pkg])
		}
		installed[a.exe] = "apt " + a.pkg
	}
	ids := map[string]bool{}
	for _, s := range cfg.Servers {
		ids[s.ID] = true
		if want := "@SHA256:" + s.Executable + "@"; s.ExecutableSHA256 != want {
			t.Errorf("server %s: executable_sha256 = %q, want the build's placeholder %q", s.ID, s.ExecutableSHA256, want)
		}
		if !under(s.Executable) {
			t.Errorf("server %s: executable %s is not installed by the image", s.ID, s.Executable)
		}
		if s.ReviewedBy != "@REVIEWED_BY@" || s.ReviewedAt != "@REVIEWED_AT@" {
			t.Errorf("server %s: reviewed_by/reviewed_at must come from the build (REVIEWED_BY, REVIEWED_AT)", s.ID)
		}
		for _, a := range s.Arguments {
			if strings.HasPrefix(a, "/") && !inNpm(a) {
				t.Errorf("server %s: argument %s is outside the image's installs", s.ID, a)
			}
		}
		// What the jail binds and answers name beside the server: the
		// sysroot the image makes, or system paths its packages install.
		var named []string
		named = append(named, s.ReadOnly...)
		for _, x := range s.ExternalRoots {
			named = append(named, x.Dir)
		}
		for _, p := range named {
			if strings.HasPrefix(p, "/opt/lsp/") && !under(p) && !strings.HasPrefix(p, "/opt/lsp/rust-sysroot") {
				t.Errorf("server %s: %s is not installed by the image", s.ID, p)
			}
		}
	}
	want := map[string]bool{"gopls": true, "clangd": true, "rust-analyzer": true}
	for _, st := range npmDirs {
		want[st] = true
	}
	if fmt.Sprint(ids) != fmt.Sprint(want) {
		t.Errorf("servers %v: want exactly %v, the image's servers", ids, want)
	}
	gopls := makefileVar(t, "GOPLS_VERSION")
	lock := readTSLock(t)
	for _, s := range cfg.Servers {
		switch s.ID {
		case "gopls":
			if s.Executable != "/opt/lsp/bin/gopls" || installed["/opt/lsp/bin/gopls"] != "--from=build /out/gopls /opt/lsp/bin/gopls" {
				t.Errorf("gopls: executable %s is not the gopls the build stage installs", s.Executable)
			}
			if !strings.Contains(s.Name, gopls) {
				t.Errorf("gopls: name %q does not say %s", s.Name, gopls)
			}
		case "typescript":
			if len(s.Arguments) == 0 || s.Arguments[0] != tsDir+"/node_modules/typescript-language-server/lib/cli.mjs" {
				t.Errorf("typescript: arguments %v do not run the installed typescript-language-server", s.Arguments)
			}
			var opts struct {
				Tsserver struct {
					Path string `json:"path"`
				} `json:"tsserver"`
			}
			if err := json.Unmarshal(s.InitializationOptions, &opts); err != nil || opts.Tsserver.Path != tsDir+"/node_modules/typescript/lib/tsserver.js" {
				t.Errorf("typescript: tsserver.path %q is not the installed typescript (%v)", opts.Tsserver.Path, err)
			}
			for _, pkg := range []string{"typescript-language-server", "typescript"} {
				if !strings.Contains(s.Name, pkg+" "+lock.Locked[pkg]) {
					t.Errorf("typescript: name %q does not say %s %s", s.Name, pkg, lock.Locked[pkg])
				}
			}
		}
	}

	// The build fills the placeholders from sha256sum of the files
	// themselves, checks the result with the daemon, and the image points
	// the daemon at it.
	var gen string
	for _, in := range final.Each("RUN") {
		if strings.Contains(in.Args, "servers.json") {
			gen = in.Args
		}
	}
	for _, want := range []string{"@SHA256:", "sha256sum", "lsp-daemon qualify --config", "--start=false", "REVIEWED_BY"} {
		if !strings.Contains(gen, want) {
			t.Errorf("the config step does not contain %q", want)
		}
	}
	var cfgPath string
	for _, in := range final.Each("ENV") {
		pairs, _ := dockerfile.ParseEnv(in.Args)
		for _, kv := range pairs {
			if strings.HasPrefix(kv[0], "LSP_") {
				checkDocumentedVar(t, "daemon.Dockerfile ENV", kv[0])
			}
			if kv[0] == "LSP_DAEMON_CONFIG" {
				cfgPath = kv[1]
			}
		}
	}
	if cfgPath == "" || installed[cfgPath+".in"] == "" || !strings.Contains(installed[cfgPath+".in"], configTemplate) {
		t.Errorf("LSP_DAEMON_CONFIG=%q is not the config generated from %s", cfgPath, configTemplate)
	}
}

// TestServerConfigQualifies runs the real daemon on the image's config,
// its image paths mapped onto this machine's pinned servers (make deps
// installs them): the daemon's strict parser accepts the file and
// `lsp-daemon qualify --start=false` verifies every pin, the pinned
// tsserver.js and its package.
func TestServerConfigQualifies(t *testing.T) {
	gopls := firstExisting(os.Getenv("LSP_TEST_GOPLS"), filepath.Join(repoRoot, ".bin/gopls"))
	tsDir := firstExisting(os.Getenv("LSP_TEST_TYPESCRIPT"), filepath.Join(repoRoot, ".bin/ts"))
	node, _ := exec.LookPath("node")
	if gopls == "" || tsDir == "" || node == "" {
		t.Skip("needs the pinned gopls, the TypeScript server and node: run make deps (make test does)")
	}
	// The other npm servers make deps installs beside the TypeScript one
	// (.bin/<name> for /opt/lsp/<name>).
	bin := filepath.Dir(tsDir)
	mapped := map[string]string{"/opt/lsp/bin/gopls": gopls, "/usr/local/bin/node": node, "/opt/lsp/ts": tsDir}
	for _, st := range npmStages(parseDockerfile(t, "daemon.Dockerfile")) {
		for _, in := range st.Each("WORKDIR") {
			if in.Args != "/opt/lsp/ts" {
				mapped[in.Args] = filepath.Join(bin, filepath.Base(in.Args))
				if _, err := os.Stat(mapped[in.Args]); err != nil {
					t.Skipf("needs %s installed at %s: run make deps", st.Name, mapped[in.Args])
				}
			}
		}
	}
	// The Debian servers are at the same paths here (make deps installs
	// the same packages), the patched sysroot in .bin.
	for _, exe := range []string{"/usr/lib/llvm-19/bin/clangd", "/usr/bin/rust-analyzer"} {
		if _, err := os.Stat(exe); err != nil {
			t.Skipf("needs %s: run make deps", exe)
		}
		mapped[exe] = exe
	}
	mapped["/opt/lsp/rust-sysroot"] = filepath.Join(bin, "rust-sysroot")
	if _, err := os.Stat(mapped["/opt/lsp/rust-sysroot"]); err != nil {
		t.Skipf("needs the patched sysroot at %s: run make deps", mapped["/opt/lsp/rust-sysroot"])
	}
	paths := map[string]string{}
	for k, v := range mapped {
		real, err := filepath.EvalSymlinks(v)
		if err != nil {
			t.Fatal(err)
		}
		if paths[k], err = filepath.Abs(real); err != nil {
			t.Fatal(err)
		}
	}
	raw, _ := readConfigTemplate(t)
	// What the image's RUN step does, here: placeholders first (they
	// contain image paths), then the image paths.
	cfg := strings.NewReplacer("@REVIEWED_BY@", "deploy test", "@REVIEWED_AT@", "2026-01-01T00:00:00Z").Replace(raw)
	for _, m := range regexp.MustCompile(`@SHA256:([^@]*)@`).FindAllStringSubmatch(cfg, -1) {
		sum, err := exec.Command("sha256sum", paths[m[1]]).Output()
		if err != nil {
			t.Fatalf("sha256sum %s: %v", paths[m[1]], err)
		}
		cfg = strings.ReplaceAll(cfg, m[0], strings.Fields(string(sum))[0])
	}
	var pairs []string
	for k, v := range paths {
		pairs = append(pairs, k, v)
	}
	cfg = strings.NewReplacer(pairs...).Replace(cfg)
	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "servers.json")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o444); err != nil {
		t.Fatal(err)
	}

	daemon := filepath.Join(dir, "lsp-daemon")
	build := exec.Command("go", "build", "-o", daemon, "./daemon/cmd/lsp-daemon")
	build.Dir = repoRoot
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build lsp-daemon: %v\n%s", err, out)
	}
	var stdout, stderr bytes.Buffer
	q := exec.Command(daemon, "qualify", "--config", cfgFile, "--start=false", "--json")
	q.Env = []string{"PATH=" + os.Getenv("PATH")}
	q.Stdout, q.Stderr = &stdout, &stderr
	if err := q.Run(); err != nil {
		t.Fatalf("lsp-daemon qualify: %v\n%s%s", err, stdout.String(), stderr.String())
	}
	var report struct {
		Qualified bool `json:"qualified"`
		Servers   []struct {
			ID        string `json:"id"`
			Qualified bool   `json:"qualified"`
		} `json:"servers"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &report); err != nil {
		t.Fatalf("qualify --json: %v\n%s", err, stdout.String())
	}
	if _, cfgParsed := readConfigTemplate(t); !report.Qualified || len(report.Servers) != len(cfgParsed.Servers) {
		t.Fatalf("qualify: %s", stdout.String())
	}
	t.Logf("qualified: %s", summarize(report.Servers))
}

func summarize(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func firstExisting(paths ...string) string {
	for _, p := range paths {
		if p == "" {
			continue
		}
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return ""
}

// npmStages are the stages installing a reviewed npm server: npm ci of a
// deploy/<name>/package-lock.json.
func npmStages(f *dockerfile.File) []*dockerfile.Stage {
	var out []*dockerfile.Stage
	for i := range f.Stages {
		st := &f.Stages[i]
		if containsRun(st, "npm ci") && strings.Contains(strings.Join(argsOf(st.Each("COPY")), "\n"), "package-lock.json") {
			out = append(out, st)
		}
	}
	return out
}

// versionCheck is an npm stage's check of an installed package's version
// against one of its ARGs.
var versionCheck = regexp.MustCompile(`node_modules/([^/"]+)/package\.json"\)\.version'\)" = "\$\{([A-Z_]+)\}"`)

// TestNPMServerStagesMatchLocks: every npm server stage installs its
// deploy/<name> lock with npm ci --ignore-scripts --engine-strict and
// checks each package's version against an ARG equal to what the lock
// pins and package.json declares.
func TestNPMServerStagesMatchLocks(t *testing.T) {
	f := parseDockerfile(t, "daemon.Dockerfile")
	stages := npmStages(f)
	if len(stages) < 5 {
		t.Fatalf("%d npm stages, want typescript, basedpyright, bash, yaml and json", len(stages))
	}
	for _, st := range stages {
		var dir string
		for _, in := range st.Each("COPY") {
			if m := regexp.MustCompile(`deploy/([a-z]+)/package-lock\.json`).FindStringSubmatch(in.Args); m != nil {
				dir = m[1]
			}
		}
		if dir == "" {
			t.Errorf("stage %s copies no deploy/<name>/package-lock.json", st.Name)
			continue
		}
		if !containsRun(st, "npm ci") || !containsRun(st, "--ignore-scripts") || !containsRun(st, "--engine-strict") {
			t.Errorf("stage %s must install with npm ci --ignore-scripts --engine-strict", st.Name)
		}
		lock := readNPMLock(t, dir)
		args := st.Args(f.GlobalArgs)
		checked := 0
		for _, in := range st.Each("RUN") {
			for _, m := range versionCheck.FindAllStringSubmatch(in.Args, -1) {
				pkg, arg := m[1], m[2]
				checked++
				if args[arg] == "" || args[arg] != lock.Locked[pkg] || args[arg] != lock.Declared[pkg] {
					t.Errorf("stage %s: %s = %q; deploy/%s declares %q and locks %q", st.Name, arg, args[arg], dir, lock.Declared[pkg], lock.Locked[pkg])
				}
			}
		}
		if checked != len(lock.Declared) {
			t.Errorf("stage %s checks %d package versions, deploy/%s declares %d", st.Name, checked, dir, len(lock.Declared))
		}
		if st.From != f.Final().From {
			t.Errorf("stage %s: %q is not the shipped stage's node image", st.Name, st.From)
		}
	}
	if !containsRun(f.Final(), "shellcheck=${SHELLCHECK_VERSION}") || f.Final().Args(f.GlobalArgs)["SHELLCHECK_VERSION"] == "" {
		t.Error("the shipped stage must install shellcheck at a pinned SHELLCHECK_VERSION (bash-language-server's shellcheckPath)")
	}
}

// TestServerConfigProgramsReadOnly: a program an entry's environment,
// initialization options or settings name by path (bash-language-server's
// shellcheckPath, rust-analyzer's cargo and rustc) is in its read_only: the
// jail binds nothing else a server might run, and read_only is what the
// daemon checks against its root.
func TestServerConfigProgramsReadOnly(t *testing.T) {
	_, cfg := readConfigTemplate(t)
	for _, s := range cfg.Servers {
		var named []string
		for _, e := range s.Env {
			if _, v, ok := strings.Cut(e, "="); ok {
				named = append(named, v)
			}
		}
		named = append(named, jsonLeaves(t, s.InitializationOptions)...)
		named = append(named, jsonLeaves(t, s.Settings)...)
		for _, p := range named {
			if !strings.HasPrefix(p, "/usr/bin/") && !strings.HasPrefix(p, "/usr/local/bin/") && !strings.HasPrefix(p, "/bin/") {
				continue
			}
			if p != s.Executable && !slices.Contains(s.ReadOnly, p) {
				t.Errorf("server %s: names the program %s but its read_only %q does not list it; the jail would not have it", s.ID, p, s.ReadOnly)
			}
		}
	}
}

// jsonLeaves are the string leaves of a JSON document.
func jsonLeaves(t testing.TB, raw json.RawMessage) []string {
	t.Helper()
	if len(raw) == 0 {
		return nil
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	var out []string
	var walk func(any)
	walk = func(v any) {
		switch x := v.(type) {
		case string:
			out = append(out, x)
		case []any:
			for _, e := range x {
				walk(e)
			}
		case map[string]any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	walk(v)
	return out
}

// TestShellEntryLogsIndex: bash-language-server reports the end of its
// background analysis only in an info-level log line, which the daemon
// waits for before it answers from that analysis (readiness's
// shellscript signs). An entry that logs at warning or error would leave
// every answer waiting and partial.
func TestShellEntryLogsIndex(t *testing.T) {
	_, cfg := readConfigTemplate(t)
	found := false
	for _, s := range cfg.Servers {
		if s.ID != "bash" {
			continue
		}
		found = true
		var opts struct {
			LogLevel *string `json:"logLevel"`
		}
		var settings struct {
			BashIde struct {
				LogLevel *string `json:"logLevel"`
			} `json:"bashIde"`
		}
		if err := json.Unmarshal(s.InitializationOptions, &opts); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(s.Settings, &settings); err != nil {
			t.Fatal(err)
		}
		for where, l := range map[string]*string{"initialization_options": opts.LogLevel, "settings.bashIde": settings.BashIde.LogLevel} {
			if l != nil && *l != "info" && *l != "debug" {
				t.Errorf("bash's %s logLevel is %q; the daemon needs bash-language-server's info lines", where, *l)
			}
		}
	}
	if !found {
		t.Fatal("no bash entry")
	}
}
