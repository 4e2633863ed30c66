package corpus

// Repo is one entry of the corpus: where its tree comes from, pinned, and
// how a developer installs its dependencies.
type Repo struct {
	Name     string // forge repository name and the -repo flag's value
	Language string // a corpus.Langs name: "go", "typescript" (TypeScript and JavaScript), "python", …
	// Modules are Go modules (path@version) from the module proxy. With
	// one and no Dirs the module is the repository's root; with Dirs,
	// module i goes into Dirs[i] and the root gets GoWork.
	Modules []string
	Dirs    []string
	GoWork  string
	// Snapshot is a file of shared/corpus (a real repository's tree).
	Snapshot string
	// Vendor runs `go mod vendor` on the tree before it is committed: the
	// tree then has a committed vendor/ like a repository that vendors.
	Vendor bool
	// DropSum removes the go.sum lines of these module paths before the
	// tree is committed.
	DropSum []string
	// Install is how the ground truth installs dependencies: "go" (go mod
	// download in every module), "npm" (npm ci), "pnpm", "yarn" (v1),
	// "berry" (the repository's own .yarn/releases), "none" (nothing to
	// install from the registries these machines reach: PyPI is not one).
	Install string
	// Configure are ./configure's arguments for Install "autotools".
	Configure []string
	// Large repositories run under `make corpus` only, never in the test.
	Large bool
	What  string // what the entry exercises
}

// Repos is the corpus. To add an entry, pin it here (a module version or a
// snapshot in shared/corpus) and say what it exercises; positions are
// chosen from the ground truth, so nothing else is needed.
var Repos = []Repo{
	{Name: "uuid", Language: "go", Modules: []string{"github.com/google/uuid@v1.6.0"}, Install: "go",
		What: "a go.mod without a go directive, std only"},
	{Name: "cobra", Language: "go", Modules: []string{"github.com/spf13/cobra@v1.8.1"}, Install: "go",
		What: "several packages, third-party dependencies (pflag, go-md2man, yaml)"},
	{Name: "color-vendor", Language: "go", Modules: []string{"github.com/fatih/color@v1.16.0"}, Vendor: true, Install: "go",
		What: "a committed vendor/ (module zips never hold one: `go mod vendor` on the real module, then committed)"},
	{Name: "cobra-pflag-work", Language: "go",
		Modules: []string{"github.com/spf13/cobra@v1.8.1", "github.com/spf13/pflag@v1.0.5"}, Dirs: []string{"cobra", "pflag"},
		GoWork: "go 1.22\n\nuse (\n\t./cobra\n\t./pflag\n)\n", Install: "go",
		What: "two real modules plus a go.work (synthesized: a module zip cannot hold a nested module)"},
	{Name: "logrus-nosum", Language: "go", Modules: []string{"github.com/sirupsen/logrus@v1.9.3"},
		DropSum: []string{"golang.org/x/sys"}, Install: "go",
		What: "a go.sum lacking the lines of a dependency it imports (golang.org/x/sys removed)"},
	{Name: "pkcs11", Language: "go", Modules: []string{"github.com/miekg/pkcs11@v1.1.1"}, Install: "go",
		What: "cgo files (import \"C\" with local headers) and build tags"},
	{Name: "axios", Language: "typescript", Snapshot: "axios__axios.tar.gz", Install: "npm",
		What: "package-lock.json (npm), JS sources with .d.ts"},
	{Name: "zustand", Language: "typescript", Snapshot: "pmndrs__zustand.tar.gz", Install: "pnpm",
		What: "pnpm-lock.yaml + pnpm-workspace.yaml (and a package-lock.json beside them)"},
	{Name: "immer", Language: "typescript", Snapshot: "immerjs__immer.tar.gz", Install: "yarn",
		What: "yarn.lock v1"},
	{Name: "redux", Language: "typescript", Snapshot: "reduxjs__redux.tar.gz", Install: "berry",
		What: "Yarn Berry (.yarnrc.yml, .yarn/releases), several tsconfigs"},
	{Name: "vscode-languageserver-node", Language: "typescript", Snapshot: "microsoft__vscode-languageserver-node.tar.gz", Install: "npm",
		What: "npm workspaces monorepo, tsconfig project references"},
	{Name: "click", Language: "python", Snapshot: "pallets__click.tar.gz", Install: "none",
		What: "Python: pyproject.toml and uv.lock (no PyPI here: project + stdlib + bundled typeshed on both sides)"},
	{Name: "x-sys-sh", Language: "shellscript", Modules: []string{"golang.org/x/sys@v0.14.0"}, Install: "none",
		What: "Bash: the real mkall.sh/mkerrors.sh scripts of a Go module (gopls starts beside bash-language-server: a polyglot tree)"},
	{Name: "jq-yaml", Language: "yaml", Snapshot: "jqlang__jq.tar.gz", Install: "none",
		What: "YAML: jq's manual and site data files (no schema: SchemaStore off)"},
	{Name: "axios-json", Language: "json", Snapshot: "axios__axios.tar.gz", Install: "none",
		What: "JSON: package.json, tsconfig.json and fixtures (local and inline $schema only)"},
	{Name: "jq", Language: "c", Snapshot: "jqlang__jq.tar.gz", Install: "autotools", Configure: []string{"--with-oniguruma=builtin"},
		What: "C, autotools (Makefile.am), no compile_commands.json: flags synthesized; the truth configures and reads make -n"},
	{Name: "fmt", Language: "cpp", Snapshot: "fmtlib__fmt.tar.gz", Install: "cmake",
		What: "C++, CMake, no compile_commands.json: flags synthesized; the truth exports CMake's"},
	{Name: "anyhow", Language: "rust", Snapshot: "dtolnay__anyhow.tar.gz", Install: "none",
		What: "Rust, Cargo.toml without Cargo.lock, std through the patched sysroot, dev-dependencies unresolved offline"},
	// Last: it takes longest, and a run cut short still has the rest.
	{Name: "aws-sdk-go", Language: "go", Modules: []string{"github.com/aws/aws-sdk-go@v1.55.5"}, Install: "go", Large: true,
		What: "a large module (thousands of .go files)"},
}

// Lookup is the entry named name.
func Lookup(name string) (Repo, bool) {
	for _, r := range Repos {
		if r.Name == name {
			return r, true
		}
	}
	return Repo{}, false
}
