package ctl

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/hanzoai/lsp/proxy/internal/devforge"
	"github.com/hanzoai/lsp/proxy/internal/devstack"
)

// dev runs the stack until ctx ends and prints a curl to paste.
func dev(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("dev", flag.ContinueOnError)
	dir := fs.String("dir", ".dev", "where the stack keeps its state (recreated on every run)")
	servers := fs.String("servers", ".bin/servers.json", "the reviewed-server file (make deps renders production's template with the .bin paths): every language it names is served")
	daemonBin := fs.String("daemon-bin", ".bin/lsp-daemon", "the lsp-daemon binary")
	listen := fs.String("listen", "127.0.0.1:8080", "proxy listen address")
	var repos repoList
	fs.Var(&repos, "repo", "a local git repository to serve as dev/<its folder name> (repeatable; its branches and tags as they are at start)")
	if err := fs.Parse(args); err != nil {
		return usageError(err.Error())
	}
	if fs.NArg() > 0 {
		return usageError("dev takes no arguments; use --repo PATH for each repository")
	}
	// Check every repository before anything starts: a typo should cost
	// nothing.
	local, err := repos.resolve()
	if err != nil {
		return err
	}
	abs, err := filepath.Abs(*dir)
	if err != nil {
		return err
	}
	if err := os.RemoveAll(abs); err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	sf, err := devstack.LoadServerFile(*servers)
	if err != nil {
		return err
	}
	ids := make([]string, 0, len(sf.Servers))
	for _, e := range sf.Servers {
		ids = append(ids, e.ID)
	}
	fmt.Fprintf(stdout, "starting Postgres, the dev forge, the daemon (%s) and the proxy…\n", strings.Join(ids, ", "))
	s, err := devstack.Start(ctx, devstack.Options{Dir: abs, DaemonBin: *daemonBin, ServerFile: sf.Path, Listen: *listen, Log: log})
	if err != nil {
		return err
	}
	defer s.Stop()

	const org, sample, forgeToken = "dev", "hello", "dev-forge-token"
	served := []servedRepo{}
	if _, taken := local[sample]; !taken {
		commit, err := devforge.CreateRepo(s.ForgeRoot, org, sample, devstack.SampleRepo, "sample repository")
		if err != nil {
			return err
		}
		// The sample's documented position: greet.Hello in main.go.
		served = append(served, servedRepo{name: sample, commit: commit, pos: devforge.Position{Path: "main.go", Line: 10, Character: 20, Name: "Hello"}, found: true})
	}
	for _, name := range repos.names {
		src := local[name]
		commit, err := devforge.Import(s.ForgeRoot, org, name, src)
		if err != nil {
			return err
		}
		pos, found, err := devforge.FindFunction(ctx, filepath.Join(s.ForgeRoot, org, name+".git"))
		if err != nil {
			return fmt.Errorf("dev: %s: %w", src, err)
		}
		served = append(served, servedRepo{name: name, src: src, commit: commit, pos: pos, found: found})
	}
	s.Forge.Grant(forgeToken, org+"/*")
	if err := s.Ledger.Credit(ctx, org, 1000, "make run"); err != nil {
		return err
	}
	tok, err := s.Token("dev-user", org, nil, []string{"billing:" + org})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, `
The LSP service is up; every language server runs in the daemon's jail.
  proxy    %s
  forge    %s
  ledger   org %q credited 1000¢; a prepare costs 2¢ (the first call on a revision prepares it)
  state    %s  (Postgres in %s)
  key      %s  (sign more dev tokens: lspctl dev-token --key %s --owner %s)

export LSP_URL=%s LSP_FORGE_TOKEN=%s
export LSP_TOKEN=%s
`, s.ProxyURL, s.ForgeURL, org, abs, s.PGDir, s.KeyFile, s.KeyFile, org, s.ProxyURL, forgeToken, tok)
	for _, r := range served {
		fmt.Fprintf(stdout, "\nrepository %s/%s at %s", org, r.name, r.commit[:12])
		if r.src != "" {
			fmt.Fprintf(stdout, " (from %s: its branches and tags as committed now)", r.src)
		}
		fmt.Fprintln(stdout)
		if !r.found {
			fmt.Fprintf(stdout, "  no Go, TypeScript or JavaScript function found; list a file's symbols with\n  lspctl symbols --repo %s --path PATH\n", r.name)
			continue
		}
		fmt.Fprintf(stdout, `  hover over %s in %s:
  curl -sS %s/v1/lsp/hover -H "Authorization: Bearer $LSP_TOKEN" -H 'X-Forge-Token: %s' \
    -H 'Content-Type: application/json' -d '{"repo":"%s","path":"%s","line":%d,"character":%d}'
  lspctl hover --repo %s --at %s:%d:%d
`, r.pos.Name, r.pos.Path, s.ProxyURL, forgeToken, r.name, jsonPath(r.pos.Path), r.pos.Line, r.pos.Character,
			r.name, r.pos.Path, r.pos.Line+1, r.pos.Character+1)
	}
	fmt.Fprintf(stdout, "\nUsage page: %s/v1/lsp/dashboard#token=%s\nMCP clients: %s/v1/lsp/mcp (Streamable HTTP, the same bearer token).\n\nCtrl-C stops everything.\n", s.ProxyURL, tok, s.ProxyURL)
	<-ctx.Done()
	fmt.Fprintln(stdout, "\nstopping…")
	return nil
}

// servedRepo is one repository the banner shows.
type servedRepo struct {
	name, src, commit string
	pos               devforge.Position
	found             bool
}

// repoList is the repeatable --repo flag.
type repoList struct {
	paths []string
	names []string // in flag order, after resolve
}

func (l *repoList) String() string { return strings.Join(l.paths, ",") }

func (l *repoList) Set(v string) error {
	l.paths = append(l.paths, v)
	return nil
}

// resolve turns the paths into absolute directories by repository name,
// refusing a path that is not a git repository and two of one name.
func (l *repoList) resolve() (map[string]string, error) {
	byName := map[string]string{}
	for _, p := range l.paths {
		if rest, ok := strings.CutPrefix(p, "~/"); ok {
			home, err := os.UserHomeDir()
			if err != nil {
				return nil, err
			}
			p = filepath.Join(home, rest)
		}
		abs, err := filepath.Abs(p)
		if err != nil {
			return nil, err
		}
		name, err := devforge.RepoName(abs)
		if err != nil {
			return nil, usageError(err.Error())
		}
		if other, dup := byName[name]; dup {
			return nil, usageError(fmt.Sprintf("--repo %s and --repo %s would both be repository %q", other, abs, name))
		}
		if err := devforge.CheckRepository(abs); err != nil {
			return nil, usageError(fmt.Sprintf("--repo %s: not a git repository's top folder (run git init and commit, or pass the repository's top folder): %v", abs, err))
		}
		byName[name] = abs
		l.names = append(l.names, name)
	}
	return byName, nil
}

// jsonPath escapes a path for the JSON body in the printed curl.
func jsonPath(p string) string {
	b, _ := json.Marshal(p)
	return strings.Trim(string(b), `"`)
}
