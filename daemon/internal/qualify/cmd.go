package qualify

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/hanzoai/lsp/daemon/internal/config"
	"github.com/hanzoai/lsp/daemon/internal/runtime"
)

// Commands are the subcommands Main serves.
var Commands = []string{"status", "qualify"}

// Main runs `lsp-daemon status|qualify args…` and returns the exit code: 0
// (for qualify: every server qualified), 1 (a server did not qualify), 2
// (bad usage or a configuration refused).
func Main(ctx context.Context, cmd string, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("lsp-daemon "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := fs.String("config", getenv("LSP_DAEMON_CONFIG"), "the reviewed-server file (code-intel-config.v1); default $LSP_DAEMON_CONFIG")
	asJSON := fs.Bool("json", false, "print JSON")
	start := true
	if cmd == "qualify" {
		fs.BoolVar(&start, "start", true, "initialize each server against its built-in canary workspace")
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "lsp-daemon %s: unexpected argument %q\n", cmd, fs.Arg(0))
		return 2
	}
	if *cfgPath == "" {
		fmt.Fprintf(stderr, "lsp-daemon %s: --config is required\n", cmd)
		return 2
	}
	cf, err := config.LoadFile(*cfgPath)
	if err != nil {
		fmt.Fprintf(stderr, "lsp-daemon %s: %v\n", cmd, err)
		return 2
	}
	switch cmd {
	case "status":
		st := StatusOf(cf)
		if *asJSON {
			return printJSON(stdout, stderr, st)
		}
		printStatus(stdout, st)
		return 0
	case "qualify":
		log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
		if start {
			if err := runtime.BecomeSubreaper(); err != nil {
				log.Warn("cannot become a child subreaper", "err", err)
			}
		}
		r, err := Run(ctx, cf, Options{Start: start, Log: log})
		if err != nil {
			fmt.Fprintf(stderr, "lsp-daemon qualify: %v\n", err)
			return 2
		}
		code := 0
		if !r.Qualified {
			code = 1
		}
		if *asJSON {
			if c := printJSON(stdout, stderr, r); c != 0 {
				return c
			}
			return code
		}
		printReport(stdout, r)
		return code
	}
	fmt.Fprintf(stderr, "lsp-daemon: unknown command %q\n", cmd)
	return 2
}

func printJSON(stdout, stderr io.Writer, v any) int {
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		fmt.Fprintln(stderr, "lsp-daemon:", err)
		return 2
	}
	return 0
}

func languages(ls []Language) string {
	var parts []string
	for _, l := range ls {
		parts = append(parts, fmt.Sprintf("%s (%s)", l.ID, strings.Join(l.Extensions, " ")))
	}
	return strings.Join(parts, ", ")
}

func printServer(w io.Writer, s ServerStatus) {
	fmt.Fprintf(w, "  name:        %s (%s)\n", s.Name, s.ProtocolVersion)
	fmt.Fprintf(w, "  languages:   %s\n", languages(s.Languages))
	fmt.Fprintf(w, "  reviewed:    by %s at %s\n", s.ReviewedBy, s.ReviewedAt.Format("2006-01-02T15:04:05Z07:00"))
	fmt.Fprintf(w, "  timeout:     %d ms\n", s.RequestTimeoutMS)
	fmt.Fprintf(w, "  pin:         sha256:%s\n", s.ExecutableSHA256)
	fmt.Fprintf(w, "  descriptor:  %s\n", s.DescriptorFingerprint)
	if s.PinnedTypeScript {
		fmt.Fprintf(w, "  typescript:  tsserver.path pinned\n")
	}
}

func printStatus(w io.Writer, st Status) {
	fmt.Fprintf(w, "config %s (%s), %d server(s); nothing was started\n", st.Source, st.ProtocolVersion, len(st.Servers))
	for _, s := range st.Servers {
		fmt.Fprintf(w, "\n%s\n", s.ID)
		printServer(w, s)
	}
}

func yes(b bool) string {
	if b {
		return "ok"
	}
	return "FAILED"
}

func printReport(w io.Writer, r Report) {
	verdict := "every server qualified"
	if !r.Qualified {
		verdict = "NOT QUALIFIED"
	}
	fmt.Fprintf(w, "config %s (%s): %s\n", r.Source, r.ProtocolVersion, verdict)
	for _, s := range r.Servers {
		state := "qualified"
		if !s.Qualified {
			state = "NOT QUALIFIED"
		}
		fmt.Fprintf(w, "\n%s: %s\n", s.ID, state)
		printServer(w, s.ServerStatus)
		fmt.Fprintf(w, "  review:      %s\n  pin check:   %s\n", yes(s.Checks.Review), yes(s.Checks.ExecutableHash))
		if s.Checks.Started != nil {
			fmt.Fprintf(w, "  started:     %s\n", yes(*s.Checks.Started))
			fmt.Fprintf(w, "  canary:      %s\n", yes(*s.Checks.CanaryAnswered))
		}
		if n := s.Negotiated; n != nil {
			name := strings.TrimSpace(n.ServerName + " " + n.ServerVersion)
			if name == "" {
				name = "(no serverInfo)"
			}
			fmt.Fprintf(w, "  server:      %s, generation %d\n", name, n.Generation)
			fmt.Fprintf(w, "  tools:       %s\n", strings.Join(n.Tools, " "))
			fmt.Fprintf(w, "  capabilities: %s\n", strings.Join(n.Capabilities, " "))
			fmt.Fprintf(w, "  capability fingerprint: %s\n", n.CapabilityFingerprint)
			fmt.Fprintf(w, "  canary %s: %s → %s\n", n.Canary, n.CanaryDoc, strings.Join(n.CanarySymbols, " "))
		}
		if s.Error != "" {
			fmt.Fprintf(w, "  error:       %s\n", s.Error)
		}
	}
}
