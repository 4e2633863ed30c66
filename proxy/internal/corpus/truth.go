package corpus

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
	"unicode/utf16"

	"github.com/hanzoai/lsp/proxy/internal/devstack"
	"github.com/hanzoai/lsp/proxy/internal/lspdirect"
)

// Tools are the compared operations: the first three per position, the
// last two per file.
var Tools = []string{"hover", "definition", "references", "symbols", "diagnostics"}

// truth is what the direct server answered on the ground-truth checkout.
type truth struct {
	files     int      // source files of the language in the tree
	chosen    []string // the files positions come from
	positions []Position
	cold      Position      // the position of the first useful answer
	coldStart time.Duration // server start → first useful answer
	rss       int64         // the direct server's process tree, warm, after every query
	// pos[tool][i] answers positions[i]; file[tool][j] answers chosen[j].
	pos  map[string][]Answer
	file map[string][]Answer
	rt   roots
}

// startDirect starts the reviewed entry of r's language on the checkout,
// the ordinary way: its executable, arguments, environment,
// initialization options and settings as the server file has them, a
// fresh home, the dependencies where the install put them.
func startDirect(ctx context.Context, r Repo, sv servers, checkout, home, cacheDir string) (*lspdirect.Server, error) {
	e, err := sv.entry(r.Language)
	if err != nil {
		return nil, err
	}
	for _, d := range []string{".cache", ".config", filepath.Join(".local", "share"), "tmp"} {
		if err := os.MkdirAll(filepath.Join(home, d), 0o755); err != nil {
			return nil, err
		}
	}
	env := []string{"HOME=" + home, "XDG_CACHE_HOME=" + filepath.Join(home, ".cache"),
		"XDG_CONFIG_HOME=" + filepath.Join(home, ".config"), "XDG_DATA_HOME=" + filepath.Join(home, ".local", "share"),
		"LANG=C.UTF-8", "TMPDIR=" + os.TempDir(), "PATH=" + filepath.Dir(e.Executable) + ":/usr/bin:/bin"}
	if l, _ := langOf(r.Language); l.Env != nil {
		extra, err := l.Env(home, cacheDir)
		if err != nil {
			return nil, err
		}
		env = append(env, extra...)
	}
	env = append(env, e.Env...)
	return lspdirect.StartConfigured(ctx, checkout, env, e.InitializationOptions, e.Settings, append([]string{e.Executable}, e.Arguments...)...)
}

func textPos(uri string, p Position) map[string]any {
	return map[string]any{"textDocument": map[string]any{"uri": uri}, "position": lspdirect.Position{Line: p.Line, Character: p.Character}}
}

// groundTruth runs the direct server on the checkout, chooses positions
// and records its answers.
//
// A patient ground truth (a rerun's, redraw) asks a file it opens
// only once the server has published the file's diagnostics and been
// quiet for a second, as a developer who waits for the editor to show
// the file before hovering: clangd indexes an opened file's preamble on
// its own thread, and a hover asked at once on a header's method lacked
// the documentation that the index gives a moment later.
func groundTruth(ctx context.Context, r Repo, sv servers, checkout, home, cacheDir string, perRepo int, fix []Fixed, patient bool, log func(string, ...any)) (*truth, error) {
	goroot := ""
	if out, err := exec.Command("go", "env", "GOROOT").Output(); err == nil {
		goroot = strings.TrimSpace(string(out))
	}
	t := &truth{pos: map[string][]Answer{}, file: map[string][]Answer{},
		rt: roots{checkout: checkout, modcache: modCache(cacheDir), goroot: goroot}}
	if e, err := sv.entry(r.Language); err == nil {
		t.rt.ext = e.ExternalRoots
	}
	// Eight files give the positions; more stand by for a repository
	// whose first eight give fewer than perRepo (small files, few uses).
	const baseFiles = 8
	t.files, t.chosen = chooseFiles(checkout, sv.extensions(r.Language), 3*baseFiles)
	var fixed []Position
	if len(fix) > 0 {
		t.chosen = nil
		for _, f := range fix {
			p, err := f.resolve(checkout)
			if err != nil {
				return nil, err
			}
			fixed = append(fixed, p)
			if !contains(t.chosen, p.Path) {
				t.chosen = append(t.chosen, p.Path)
			}
		}
	}
	if len(t.chosen) == 0 {
		return nil, fmt.Errorf("no source files")
	}
	texts := map[string][]byte{}
	for _, f := range t.chosen {
		b, err := readFile(checkout, f)
		if err != nil {
			return nil, err
		}
		texts[f] = b
	}

	start := time.Now()
	srv, err := startDirect(ctx, r, sv, checkout, home, cacheDir)
	if err != nil {
		return nil, fmt.Errorf("direct server: %w", err)
	}
	defer srv.Close()
	if l, _ := langOf(r.Language); l.FileTools {
		return fileTruth(ctx, r, sv, srv, t, start, checkout, log)
	}
	// The first useful answer: a hover that says something, on the first
	// chosen file's first candidates.
	// The first chosen file with candidates goes first.
	var first []Position
	for i, f := range t.chosen {
		if first = candidates(f, texts[f]); len(first) > 0 {
			t.chosen[0], t.chosen[i] = t.chosen[i], t.chosen[0]
			break
		}
	}
	if len(fixed) > 0 {
		first = fixed[:1]
	}
	if len(first) == 0 {
		return nil, fmt.Errorf("no identifier uses in %v", t.chosen)
	}
	// Up to 60: a shell script's first uses are often of variables the
	// environment sets, on which bash-language-server has nothing to say.
	if len(first) > 60 {
		first = first[:60]
	}
	// The service's prepare opens an anchor document on each server (the
	// daemon's query.findAnchor: the first file of the language in path
	// order, outside node_modules and hidden directories) and keeps it
	// open: tsserver's references search its project too.
	anchor := findAnchor(checkout, sv.extensions(r.Language))
	if anchor != "" {
		if err := srv.Open(anchor, sv.languageID(anchor)); err != nil {
			return nil, err
		}
	}
	if t.chosen[0] != anchor {
		if err := srv.Open(t.chosen[0], sv.languageID(t.chosen[0])); err != nil {
			return nil, err
		}
	}
	for found := false; !found && len(first) > 0; {
		for _, p := range first {
			cctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
			h, err := srv.Hover(cctx, p.Path, lspdirect.Position{Line: p.Line, Character: p.Character})
			cancel()
			if err == nil && strings.TrimSpace(h) != "" {
				t.cold, t.coldStart, found = p, time.Since(start), true
				break
			}
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if time.Since(start) > 3*time.Minute {
			return nil, fmt.Errorf("direct server: no hover in 3m on %s", t.chosen[0])
		}
		if !found {
			time.Sleep(200 * time.Millisecond)
		}
	}
	if l, _ := langOf(r.Language); l.AwaitIdle {
		ictx, cancel := context.WithTimeout(ctx, idleWait)
		err := srv.Idle(ictx, 3*time.Second)
		cancel()
		if err != nil {
			log("ground truth %s: server still busy: %v", r.Name, err)
		}
	}
	if l, _ := langOf(r.Language); l.Settle {
		sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		srv.WaitQuiet(sctx, 2500*time.Millisecond)
		cancel()
	}
	// The other files open as the loop reaches them, as the service opens
	// a file at its first query: tsserver's references search only the
	// projects of open files (and an inferred project holds the open loose
	// files), so with every file open up front the truth found references
	// the service could not have seen yet. A file that yields no position
	// is closed again until the diagnostics, as the service never opened it.
	open := map[string]bool{t.chosen[0]: true, anchor: true}
	var unqueried []string
	call := func(method string, params any) (json.RawMessage, error) {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		var raw json.RawMessage
		err := srv.Call(cctx, method, params, &raw)
		return raw, err
	}

	per := min(baseFiles, len(t.chosen))
	perFile := (perRepo + per - 1) / per
	used := 0
	for _, f := range t.chosen {
		if len(fixed) == 0 && used >= baseFiles && len(t.positions) >= perRepo {
			break
		}
		used++
		if !open[f] {
			if err := srv.Open(f, sv.languageID(f)); err != nil {
				return nil, err
			}
			open[f] = true
			if patient {
				for wait := time.Now().Add(20 * time.Second); time.Now().Before(wait) && !settled(srv, []string{f}, nil, time.Second); {
					time.Sleep(100 * time.Millisecond)
				}
			}
		}
		raw, err := call("textDocument/documentSymbol", map[string]any{"textDocument": map[string]any{"uri": srv.URI(f)}})
		a := Answer{Lines: truthSymbols(raw)}
		if err != nil {
			a.Err = err.Error()
		}
		t.file["symbols"] = append(t.file["symbols"], a)
		decls := declStarts(raw)
		var cands []Position
		for _, c := range candidates(f, texts[f]) {
			if !decls[[2]int{c.Line, c.Character - 1}] {
				cands = append(cands, c)
			}
		}
		kept, try := 0, spread(cands, 5*perFile)
		if len(fixed) > 0 {
			try, perFile = nil, len(fixed)
			for _, p := range fixed {
				if p.Path == f {
					try = append(try, p)
				}
			}
		}
		for _, c := range try {
			if kept == perFile {
				break
			}
			start := time.Now()
			raw, err := call("textDocument/definition", textPos(srv.URI(f), c))
			if err != nil && len(fixed) == 0 {
				continue
			}
			locs := t.rt.truthLocations(raw)
			if len(locs) == 0 && len(fixed) == 0 {
				continue
			}
			kept++
			t.positions = append(t.positions, c)
			t.pos["definition"] = append(t.pos["definition"], timed(Answer{Lines: locs}, start))
			start = time.Now()
			h, err := srv.Hover(ctx, f, lspdirect.Position{Line: c.Line, Character: c.Character})
			a := Answer{Lines: hoverLines(t.rt.externalNames(h), checkout, t.rt.goroot)}
			if err != nil {
				a.Err = err.Error()
			}
			t.pos["hover"] = append(t.pos["hover"], timed(a, start))
			params := textPos(srv.URI(f), c)
			params["context"] = map[string]any{"includeDeclaration": true}
			start = time.Now()
			raw, err = call("textDocument/references", params)
			a = Answer{Lines: t.rt.truthLocations(raw)}
			if err != nil {
				a.Err = err.Error()
			}
			t.pos["references"] = append(t.pos["references"], timed(a, start))
		}
		if kept == 0 && f != t.chosen[0] && f != anchor {
			if err := srv.CloseDoc(f); err != nil {
				return nil, err
			}
			unqueried = append(unqueried, f)
		}
	}
	t.chosen = t.chosen[:used]
	for _, f := range unqueried {
		if err := srv.Open(f, sv.languageID(f)); err != nil {
			return nil, err
		}
	}
	// Diagnostics as an editor sees them: what the server published, once
	// it has published for every chosen file and been quiet for five
	// seconds on all of them. (Waiting two seconds on the first file alone
	// took the others before gopls's analyzers reached them under load:
	// aws-sdk-go's "+build line is no longer needed" hints, the
	// orphaned-file warning of a file excluded by build tags, and
	// pkcs11's analyzer findings, which come after its cgo preambles are
	// compiled.)
	l, _ := langOf(r.Language)
	if l.Diagnose != "" {
		uris := make([]string, len(t.chosen))
		for i, f := range t.chosen {
			uris[i] = srv.URI(f)
		}
		if _, err := call("workspace/executeCommand", map[string]any{"command": l.Diagnose, "arguments": []any{map[string]any{"Files": uris}}}); err != nil {
			log("ground truth %s: %s: %v", r.Name, l.Diagnose, err)
		}
	}
	var want map[string]int
	if l.Published != nil {
		want = map[string]int{}
		for _, f := range t.chosen {
			n, err := l.Published(call, srv.URI(f))
			if err != nil {
				log("ground truth %s: %s: %v", r.Name, f, err)
				want = nil
				break
			}
			want[f] = n
		}
	}
	waited := time.Now()
	for deadline := waited.Add(60 * time.Second); ; time.Sleep(250 * time.Millisecond) {
		if settled(srv, t.chosen, want, 5*time.Second) {
			break
		}
		if time.Now().After(deadline) {
			log("ground truth %s: diagnostics not settled after %s; taken as they are", r.Name, time.Since(waited).Round(time.Second))
			break
		}
	}
	for _, f := range t.chosen {
		raw, _ := srv.Diagnostics(f)
		t.file["diagnostics"] = append(t.file["diagnostics"], Answer{Lines: truthDiagnostics(raw, checkout)})
	}
	t.rss = devstack.TreeRSS(srv.Pid())
	log("ground truth %s: %d positions in %d files, cold start %.2fs", r.Name, len(t.positions), len(t.chosen), t.coldStart.Seconds())
	return t, nil
}

// fileTruth is the ground truth of a FileTools language: every chosen file
// opened (as the service opens each at its first query), the first
// useful answer its first file's non-empty document symbols, then each
// file's symbols and, once the server is quiet, its diagnostics.
func fileTruth(ctx context.Context, r Repo, sv servers, srv *lspdirect.Server, t *truth, start time.Time, checkout string, log func(string, ...any)) (*truth, error) {
	const baseFiles = 8
	t.chosen = t.chosen[:min(baseFiles, len(t.chosen))]
	call := func(method string, params any) (json.RawMessage, error) {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		var raw json.RawMessage
		err := srv.Call(cctx, method, params, &raw)
		return raw, err
	}
	syms := func(f string) (json.RawMessage, error) {
		return call("textDocument/documentSymbol", map[string]any{"textDocument": map[string]any{"uri": srv.URI(f)}})
	}
	if err := srv.Open(t.chosen[0], sv.languageID(t.chosen[0])); err != nil {
		return nil, err
	}
	for {
		raw, err := syms(t.chosen[0])
		if err == nil && len(truthSymbols(raw)) > 0 {
			t.cold, t.coldStart = Position{Path: t.chosen[0]}, time.Since(start)
			break
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if time.Since(start) > 3*time.Minute {
			return nil, fmt.Errorf("direct server: no document symbols in 3m on %s", t.chosen[0])
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, f := range t.chosen {
		if f != t.chosen[0] {
			if err := srv.Open(f, sv.languageID(f)); err != nil {
				return nil, err
			}
		}
		raw, err := syms(f)
		a := Answer{Lines: truthSymbols(raw)}
		if err != nil {
			a.Err = err.Error()
		}
		t.file["symbols"] = append(t.file["symbols"], a)
	}
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		if settled(srv, t.chosen, nil, 2*time.Second) {
			break
		}
	}
	for _, f := range t.chosen {
		raw, _ := srv.Diagnostics(f)
		t.file["diagnostics"] = append(t.file["diagnostics"], Answer{Lines: truthDiagnostics(raw, checkout)})
	}
	t.rss = devstack.TreeRSS(srv.Pid())
	log("ground truth %s: %d files (document symbols and diagnostics), cold start %.2fs", r.Name, len(t.chosen), t.coldStart.Seconds())
	return t, nil
}

// declStarts are the selection-range starts of a document's symbols: a
// position there is a declaration, not a use.
// findAnchor is the daemon's anchor document for a language in root (see
// daemon/internal/query/anchor.go): the first file in path order with one
// of the language server's extensions, node_modules and hidden
// directories skipped; "" when none.
func findAnchor(root string, exts []string) string {
	found, seen := "", 0
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if seen++; seen > 20000 {
			return filepath.SkipAll
		}
		name := d.Name()
		if d.IsDir() {
			if p != root && (name == "node_modules" || name[0] == '.') {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() || !slices.Contains(exts, filepath.Ext(name)) {
			return nil
		}
		if rel, err := filepath.Rel(root, p); err == nil {
			found = filepath.ToSlash(rel)
			return filepath.SkipAll
		}
		return nil
	})
	return found
}

func declStarts(raw json.RawMessage) map[[2]int]bool {
	out := map[[2]int]bool{}
	var walk func(json.RawMessage)
	walk = func(raw json.RawMessage) {
		var syms []struct {
			SelectionRange *lspRange `json:"selectionRange"`
			Location       *struct{ Range lspRange }
			Children       json.RawMessage `json:"children"`
		}
		if json.Unmarshal(raw, &syms) != nil {
			return
		}
		for _, s := range syms {
			switch {
			case s.SelectionRange != nil:
				out[[2]int{s.SelectionRange.Start.Line, s.SelectionRange.Start.Character}] = true
			case s.Location != nil:
				out[[2]int{s.Location.Range.Start.Line, s.Location.Range.Start.Character}] = true
			}
			if len(s.Children) > 0 {
				walk(s.Children)
			}
		}
	}
	walk(raw)
	return out
}

// Fixed names a position by its file, the text of its line (the first
// line holding Needle) and the identifier in it: stable across a
// snapshot's line numbers.
type Fixed struct {
	Path, Needle, Ident string
}

func (f Fixed) resolve(root string) (Position, error) {
	b, err := readFile(root, f.Path)
	if err != nil {
		return Position{}, err
	}
	for i, l := range strings.Split(string(b), "\n") {
		at := strings.Index(l, f.Needle)
		if at < 0 {
			continue
		}
		in := strings.Index(l[at:], f.Ident)
		if in < 0 {
			break
		}
		col := len(utf16.Encode([]rune(l[:at+in])))
		return Position{Path: f.Path, Line: i, Character: col + 1, Ident: f.Ident, Test: isTestFile(f.Path)}, nil
	}
	return Position{}, fmt.Errorf("%s: no line holds %q with %q", f.Path, f.Needle, f.Ident)
}

// idleWait bounds each side's wait for the server's indexing to end
// (Lang.AwaitIdle): one bound for both, or under load the side that gives
// up first asks a server with half an index (fmt's references, 68–100 %
// over six runs, each shortfall saying the service's clangd was still
// indexing, while the ground truth had waited it out).
const idleWait = 5 * time.Minute

// settled: every file has been published (with want's count of
// diagnostics, when given) and none for quiet.
func settled(srv interface {
	Diagnostics(string) (json.RawMessage, time.Time)
}, files []string, want map[string]int, quiet time.Duration) bool {
	var latest time.Time
	for _, f := range files {
		raw, last := srv.Diagnostics(f)
		if last.IsZero() {
			return false
		}
		if n, ok := want[f]; ok {
			var ds []json.RawMessage
			if json.Unmarshal(raw, &ds) != nil || len(ds) != n {
				return false
			}
		}
		if last.After(latest) {
			latest = last
		}
	}
	return time.Since(latest) > quiet
}
