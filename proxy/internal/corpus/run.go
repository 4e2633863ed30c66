package corpus

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hanzoai/lsp/proxy/internal/devstack"
)

// Target is the agreement every tool must reach on every repository.
const Target = 98.0

// Options configure a run.
type Options struct {
	Dir       string // scratch: checkouts, the stack; removed by the caller
	CacheDir  string // downloads kept between runs (module cache, npm, tools)
	CorpusDir string // shared/corpus
	DaemonBin string
	// Servers is the reviewed-server file both sides run (make deps:
	// .bin/servers.json): the daemon is configured with it, the ground
	// truth starts its entries directly. A repository whose language has
	// no entry there is skipped.
	Servers string
	Repos   []Repo
	PerRepo int  // positions per repository (default 40)
	Keep    bool // keep each repository's checkouts (for debugging)
	// Fixed, per repository name, replaces the chosen positions with these
	// (the make test slice).
	Fixed map[string][]Fixed
	Log   func(format string, args ...any)
	// ColdWait bounds the wait for the service's first useful answer
	// (default 2m); past it the repository is still queried, and its
	// answers are what they are.
	ColdWait time.Duration
	// JailCC is the daemon's LSP_JAIL_CC ("" its default; "off" runs Go
	// servers without a C compiler, CGO_ENABLED=0).
	JailCC string
	// DaemonUID runs the service's daemon as that uid (devstack); 0: as
	// this process.
	DaemonUID int
	// DaemonEnv are more LSP_* variables for the daemon, over the
	// corpus's own (lsp-corpus -daemon-env).
	DaemonEnv map[string]string
	// OnResult, when set, sees each repository's result as it is done.
	OnResult func(*Result)
	// NextCommit also prepares, once the answers are compared, the
	// repository's next commit (an empty one on top: the same tree and
	// lockfiles, a new revision), as an agent does after every push; its
	// time is Result.Next.
	NextCommit bool
}

// Stat is one tool's agreement on one repository.
type Stat struct {
	Agree int `json:"agree"`
	Total int `json:"total"`
	// Capped counts the answers the service cut at its bound and said so
	// (partial, with the daemon's cut warning) whose items are all among
	// the ground truth's: neither agreement nor disagreement, and left
	// out of the percentage; the table prints how many.
	Capped int `json:"capped,omitempty"`
	// Rerun counts the agreements (within Agree) that the first draws of
	// the two sides did not give and a redraw of one side did, on a fresh
	// index (redraw); the table prints how many.
	Rerun int `json:"rerun,omitempty"`
}

// Pct is the agreement in percent of the answers that were not capped
// (100 with nothing to compare).
func (s Stat) Pct() float64 {
	n := s.Total - s.Capped
	if n <= 0 {
		return 100
	}
	return 100 * float64(s.Agree) / float64(n)
}

// capWarning is what the daemon says on an answer it cut at its bound
// (query.converter.truncated).
const capWarning = "the server's answer was cut at the daemon's bound"

// capped reports whether got is want cut at the service's bound: marked
// partial with the cut warning, shorter than want, every item of it one of
// want's.
func capped(want, got Answer) bool {
	if got.State != "partial" || !contains(got.Warnings, capWarning) || len(got.Lines) >= len(want.Lines) || got.Err != "" {
		return false
	}
	have := make(map[string]bool, len(want.Lines))
	for _, l := range want.Lines {
		have[l] = true
	}
	for _, l := range got.Lines {
		if !have[l] {
			return false
		}
	}
	return true
}

// Disagreement is one position (or file) where the answers differ.
type Disagreement struct {
	Tool     string    `json:"tool"`
	Position *Position `json:"position,omitempty"`
	Path     string    `json:"path"`
	Truth    Answer    `json:"truth"`
	Service  Answer    `json:"service"`
	alts     []Answer  // reruns' answers of the ground truth other than Service (redraw)
}

// Result is one repository's row.
type Result struct {
	Repo     string `json:"repo"`
	Language string `json:"language"`
	What     string `json:"what"`
	Files    int    `json:"files"`
	// Positions and the files they come from.
	Positions int      `json:"positions"`
	Chosen    []string `json:"chosen_files"`
	// Prepare is POST /prepare through the first useful answer; Clone,
	// Install and Cold are git clone --depth 1, the ground truth's own
	// dependency install (go mod download, npm ci, pnpm/yarn install: the
	// service's prepare includes its dependency phase, so the baseline
	// includes the install) and the direct server's own cold start
	// (start → first useful answer) on the ground-truth checkout.
	Prepare float64 `json:"prepare_seconds"`
	// PrepareCall is the POST /prepare alone, of Prepare: the rest is
	// the wait for the first useful answer after it.
	PrepareCall float64 `json:"prepare_call_seconds"`
	Clone       float64 `json:"clone_seconds"`
	Install     float64 `json:"install_seconds"`
	Cold        float64 `json:"cold_start_seconds"`
	// Next is the prepare of the next commit (Options.NextCommit), with
	// the first revision's workspace dropped: what the daemon kept for
	// the repository (its home, its dependency cache) is all it reuses.
	Next float64 `json:"next_commit_prepare_seconds,omitempty"`
	// ServiceRSS is the RSS of the language's server tree in the daemon
	// (bwrap, init, the server and its children) with this repository's
	// workspace warm and alone, after every query; DirectRSS the same
	// server's tree run directly on the ground-truth checkout.
	ServiceRSS int64           `json:"service_rss_bytes"`
	DirectRSS  int64           `json:"direct_rss_bytes"`
	Tools      map[string]Stat `json:"tools"`
	// Externals: definitions the ground truth placed outside the
	// repository, and how many of them the service matched.
	Externals Stat `json:"externals"`
	// Warnings of the prepare and the answers; InstallError is the ground
	// truth's own install failure, if any.
	Warnings     []string `json:"warnings"`
	InstallError string   `json:"install_error,omitempty"`
	// EmptyCurrent counts answers the service marked current with nothing
	// in them where the ground truth answered.
	EmptyCurrent int `json:"empty_current"`
	// Answered counts, per tool, the compared answers where the ground
	// truth said something (an agreement on nothing proves little).
	Answered map[string]int `json:"answered"`
	// NoUsefulAnswer: the service gave no useful hover at the cold
	// position within ColdWait (Prepare is then that wait, not a time).
	NoUsefulAnswer bool           `json:"no_useful_answer,omitempty"`
	ColdWait       float64        `json:"cold_wait_seconds"`
	Err            string         `json:"error,omitempty"`
	Seconds        float64        `json:"seconds"`
	Disagreements  []Disagreement `json:"disagreements,omitempty"`
	// Capped are the answers Stat.Capped counts, with the two sides'
	// item counts only.
	Capped []Disagreement `json:"capped,omitempty"`
	// Reruns are the answers Stat.Rerun counts, with the first draws'
	// answers of both sides.
	Reruns []Disagreement `json:"reruns,omitempty"`
	// Slowest are the slowest answer of each side (ground truth first),
	// with the other side's time on the same question.
	Slowest []Slow `json:"slowest,omitempty"`
}

// Slow is one question's time on both sides.
type Slow struct {
	Side     string    `json:"side"`
	Tool     string    `json:"tool"`
	Position *Position `json:"position"`
	Truth    float64   `json:"truth_seconds"`
	Service  float64   `json:"service_seconds"`
}

// seconds is the time of the side it is the slowest of.
func (s Slow) seconds() float64 {
	if s.Side == "truth" {
		return s.Truth
	}
	return s.Service
}

// Met reports whether every tool reached the target.
func (r *Result) Met() bool {
	if r.Err != "" {
		return false
	}
	for _, t := range Tools {
		if r.Tools[t].Pct() < Target {
			return false
		}
	}
	return true
}

const (
	org   = "corpus"
	token = "corpus-forge-token"
)

// Run measures every repository of o.Repos through one dev stack (daemon
// jailed, as in production). A repository that fails is a row with Err,
// not a failed run; an error means the stack itself could not run.
func Run(ctx context.Context, o Options) ([]*Result, error) {
	if o.PerRepo == 0 {
		o.PerRepo = 40
	}
	if o.ColdWait == 0 {
		o.ColdWait = 2 * time.Minute
	}
	if o.Log == nil {
		o.Log = func(string, ...any) {}
	}
	sf, err := devstack.LoadServerFile(o.Servers)
	if err != nil {
		return nil, err
	}
	sv := servers{file: sf}
	for _, d := range []string{o.Dir, o.CacheDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	if err := os.Chmod(o.Dir, 0o755); err != nil { // Postgres runs as its own user
		return nil, err
	}
	daemonEnv := map[string]string{
		"LSP_DEPS_GO_PROXY":     daemonGoProxies(o.CacheDir),
		"LSP_DEPS_NPM_REGISTRY": "https://registry.npmjs.org/",
		// gopls directly peaks at ~11 GiB on aws-sdk-go's references of
		// context.Context (~37,000 results); in the default 4 GiB jail it
		// was killed (exit 137) four times in one run, and the answers
		// after each kill were 503s and 504s. The jail's bound is the
		// operator's to size (deploy/README.md); this machine has 24 GiB.
		// 16G, not 12G: the jail sets GOMEMLIMIT at three quarters of its
		// bound, and at 9 GiB gopls, which holds ~10 GiB warm here, was
		// held under its own heap: the on-demand load of a file behind
		// aws-sdk-go's integration tag took it past the daemon's 55 s
		// bound (twice; 38.6 and 25.7 s at 16G, the ground truth
		// 23.7–42.6 s over those four runs).
		"LSP_JAIL_MEMORY": "16G",
	}
	if o.JailCC != "" {
		daemonEnv["LSP_JAIL_CC"] = o.JailCC
	}
	maps.Copy(daemonEnv, o.DaemonEnv)
	stack, err := devstack.Start(ctx, devstack.Options{
		Dir: filepath.Join(o.Dir, "stack"), DaemonBin: o.DaemonBin, ServerFile: sf.Path,
		DaemonEnv: daemonEnv, DaemonUID: o.DaemonUID,
		// The corpus asks at full speed from one org: the default per-org
		// rate limit would answer 429s, which are no disagreement of the
		// servers.
		ProxyEnv: map[string]string{"LSP_REQUEST_TIMEOUT": "5m", "LSP_RATE_LIMIT": "0"},
		Log:      slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})),
	})
	if err != nil {
		return nil, fmt.Errorf("dev stack: %w", err)
	}
	defer stack.Stop()
	// The first repository's prepare and ratio are measured as on a daemon
	// that has been up a while: with the standard library's build seed,
	// and without its making beside them.
	if sv.has("go") {
		if err := stack.Daemon.AwaitBuildSeed(ctx, devstack.BuildSeedWait); err != nil {
			o.Log("note: %v", err)
		}
	}
	stack.Forge.Grant(token, org+"/*")
	if err := stack.Ledger.Credit(ctx, org, 1_000_000, "corpus"); err != nil {
		return nil, err
	}
	jwt, err := stack.Token("corpus", org, nil, nil)
	if err != nil {
		return nil, err
	}
	c := &client{url: stack.ProxyURL, jwt: jwt, forge: token, http: &http.Client{}}
	var out []*Result
	for _, r := range o.Repos {
		if !sv.has(r.Language) {
			o.Log("%s: no %s server in %s: skipped", r.Name, r.Language, sf.Path)
			continue
		}
		start := time.Now()
		res := runRepo(ctx, o, sv, stack, c, r)
		res.Seconds = time.Since(start).Seconds()
		o.Log("%s: %.1fs%s", r.Name, res.Seconds, map[bool]string{true: " error: " + res.Err, false: ""}[res.Err != ""])
		out = append(out, res)
		if o.OnResult != nil {
			o.OnResult(res)
		}
		if ctx.Err() != nil {
			break
		}
	}
	return out, nil
}

func runRepo(ctx context.Context, o Options, sv servers, stack *devstack.Stack, c *client, r Repo) *Result {
	res := &Result{Repo: r.Name, Language: r.Language, What: r.What, Tools: map[string]Stat{}}
	fail := func(step string, err error) *Result {
		res.Err = step + ": " + err.Error()
		return res
	}
	dir := filepath.Join(o.Dir, r.Name)
	src, checkout := filepath.Join(dir, "src"), filepath.Join(dir, "checkout")
	if !o.Keep {
		defer removeTree(dir)
	}
	if err := materialize(ctx, r, o.CorpusDir, o.CacheDir, src); err != nil {
		return fail("materialize", err)
	}
	if _, err := commitTree(ctx, src); err != nil {
		return fail("commit", err)
	}
	if err := pushToForge(ctx, src, stack.ForgeRoot, org, r.Name); err != nil {
		return fail("push to forge", err)
	}
	// The ground truth: a normal checkout, dependencies installed the
	// ordinary way.
	if _, err := run(ctx, dir, gitEnv(), "git", "clone", "--quiet", src, checkout); err != nil {
		return fail("checkout", err)
	}
	o.Log("%s: installing dependencies (%s)", r.Name, r.Install)
	installStart := time.Now()
	err := install(ctx, r, o.CacheDir, filepath.Join(dir, "package-cache"), checkout)
	res.Install = time.Since(installStart).Seconds()
	if err != nil {
		res.InstallError = err.Error()
		o.Log("%s: ground-truth install failed: %v", r.Name, err)
	}
	if r.Install == "go" {
		addMissingSums(ctx, o.CacheDir, checkout)
	}
	t, err := groundTruth(ctx, r, sv, checkout, filepath.Join(dir, "home"), o.CacheDir, o.PerRepo, o.Fixed[r.Name], false, o.Log)
	if err != nil {
		return fail("ground truth", err)
	}
	res.Files, res.Positions, res.Chosen, res.Cold = t.files, len(t.positions), t.chosen, t.coldStart.Seconds()

	// The baseline's clone, from the same forge.
	cloneStart := time.Now()
	if _, err := run(ctx, dir, gitEnv(), "git", "-c", "http.extraHeader=Authorization: Bearer "+token,
		"clone", "--quiet", "--depth=1", stack.ForgeURL+"/"+org+"/"+r.Name+".git", filepath.Join(dir, "shallow")); err != nil {
		return fail("git clone --depth 1", err)
	}
	res.Clone = time.Since(cloneStart).Seconds()

	o.Log("%s: preparing through the service", r.Name)
	took, call, warnings, err := prepareService(ctx, c, r.Name, t.cold, o.ColdWait)
	res.Prepare, res.PrepareCall, res.Warnings = took.Seconds(), call.Seconds(), warnings
	if err != nil && !errors.Is(err, errNoUsefulAnswer) {
		return fail("prepare", err)
	}
	res.NoUsefulAnswer, res.ColdWait = err != nil, o.ColdWait.Seconds()
	if l, _ := langOf(r.Language); l.AwaitIdle && err == nil {
		// As the ground truth waits for the server's work-done progress
		// to end before its questions, the service's questions wait for
		// its answers to stop saying the server is still indexing.
		awaitIndexed(ctx, c, r.Name, t.cold, idleWait)
	}
	pos, file := serviceAnswers(ctx, c, r.Name, t)
	res.DirectRSS = t.rss
	if e, err := sv.entry(r.Language); err == nil && stack.Daemon != nil {
		needle := filepath.Join(stack.Daemon.Root, "bin", e.ExecutableSHA256)
		for _, a := range e.Arguments {
			if filepath.IsAbs(a) {
				needle = a
				break
			}
		}
		res.ServiceRSS = devstack.MatchingRSS(stack.Daemon.Pid(), needle)
	}
	defer dropWorkspace(context.WithoutCancel(ctx), c, r.Name)
	compare(res, t, pos, file)
	if l, _ := langOf(r.Language); l.Reruns > 0 && stack.Daemon != nil {
		redraw(ctx, res, l, func() (*truth, error) {
			if err := removeGlobs(checkout, l.IndexDirs); err != nil {
				return nil, err
			}
			return groundTruth(ctx, r, sv, checkout, filepath.Join(dir, "home"), o.CacheDir, o.PerRepo, o.Fixed[r.Name], true, o.Log)
		}, func() (pos, file map[string][]Answer, err error) {
			// The daemon keeps a repository's home, and clangd's index in
			// it, past its workspace: the redraw starts without it. Every
			// question is asked again, in the first draw's order (the
			// answers depend on what the server was asked before them).
			dropWorkspace(ctx, c, r.Name)
			if err := removeGlobs(filepath.Join(stack.Daemon.Root, "homes", "*", r.Name), l.HomeIndexDirs); err != nil {
				return nil, nil, err
			}
			if _, _, _, err := prepareService(ctx, c, r.Name, t.cold, o.ColdWait); err != nil {
				return nil, nil, err
			}
			awaitIndexed(ctx, c, r.Name, t.cold, idleWait)
			pos, file = serviceAnswers(ctx, c, r.Name, t)
			return pos, file, nil
		}, t, o.Log)
	}
	if o.NextCommit {
		dropWorkspace(ctx, c, r.Name)
		if res.Next, err = prepareNext(ctx, c, src, stack.ForgeRoot, r.Name, t.cold, o.ColdWait); err != nil {
			o.Log("%s: next commit: %v", r.Name, err)
		}
	}
	return res
}

// prepareNext makes an empty commit on top of src, pushes it to the forge,
// and times the prepare of that commit through its first useful answer.
func prepareNext(ctx context.Context, c *client, src, forgeRoot, name string, cold Position, coldWait time.Duration) (float64, error) {
	env := gitEnv()
	if _, err := run(ctx, src, env, "git", "commit", "--quiet", "--allow-empty", "--no-verify", "-m", "next"); err != nil {
		return 0, err
	}
	out, err := run(ctx, src, env, "git", "rev-parse", "HEAD")
	if err != nil {
		return 0, err
	}
	if _, err := run(ctx, src, env, "git", "push", "--quiet", filepath.Join(forgeRoot, org, name+".git"), "main"); err != nil {
		return 0, err
	}
	next := c.at(strings.TrimSpace(string(out)))
	defer dropWorkspace(context.WithoutCancel(ctx), next, name)
	took, _, _, err := prepareService(ctx, next, name, cold, coldWait)
	return took.Seconds(), err
}

// removeGlobs removes what each of globs, relative to base (itself a
// glob), matches.
func removeGlobs(base string, globs []string) error {
	for _, g := range globs {
		matches, err := filepath.Glob(filepath.Join(base, g))
		if err != nil {
			return err
		}
		for _, m := range matches {
			if err := os.RemoveAll(m); err != nil {
				return err
			}
		}
	}
	return nil
}

// redraw draws both sides again while disagreements remain, each at
// most l.Reruns times: the ground truth on a fresh index and patient
// (groundTruth), then the service on a fresh workspace (prepared again).
// A disagreement is reconciled when a redraw of one side gives what a
// draw of the other gave: that answer is one the server itself gives on
// an ordinary checkout. It counts as agreement (Stat.Rerun). clangd's
// background index is not the same from one run to the next: jq's
// src/jv.c was indexed without any of its comments in 3 of 6 runs of the
// same clangd on the same compilation database, unjailed, and fmt's
// format.h:1196 is a reference of FMT_END_EXPORT in some runs of either
// side and not in others (HIP §5).
func redraw(ctx context.Context, res *Result, l Lang, truthAgain func() (*truth, error), serviceAgain func() (pos, file map[string][]Answer, err error), t *truth, log func(string, ...any)) {
	for i := 0; i < l.Reruns && len(res.Disagreements) > 0 && ctx.Err() == nil; i++ {
		log("%s: %d disagreement(s): the ground truth again, on a fresh index (%d of %d)", res.Repo, len(res.Disagreements), i+1, l.Reruns)
		again, err := truthAgain()
		if err != nil {
			log("%s: ground truth rerun: %v", res.Repo, err)
			return
		}
		settle(res, func(d *Disagreement) bool {
			alt, ok := answerAt(again.positions, again.chosen, again.pos, again.file, d)
			if ok && !alt.equal(d.Service) {
				d.alts = append(d.alts, alt)
			}
			return ok && alt.equal(d.Service)
		})
	}
	for i := 0; i < l.Reruns && len(res.Disagreements) > 0 && ctx.Err() == nil; i++ {
		log("%s: %d disagreement(s): the service again, on a fresh workspace (%d of %d)", res.Repo, len(res.Disagreements), i+1, l.Reruns)
		pos, file, err := serviceAgain()
		if err != nil {
			log("%s: service rerun: %v", res.Repo, err)
			return
		}
		settle(res, func(d *Disagreement) bool {
			got, ok := answerAt(t.positions, t.chosen, pos, file, d)
			if !ok {
				return false
			}
			for _, want := range append([]Answer{d.Truth}, d.alts...) {
				if want.equal(got) {
					return true
				}
			}
			return false
		})
	}
}

// answerAt is the answer to d's question among a draw's answers: pos by
// position (positions' order), file by path (chosen's order).
func answerAt(positions []Position, chosen []string, pos, file map[string][]Answer, d *Disagreement) (Answer, bool) {
	if d.Position != nil {
		for i, p := range positions {
			if p == *d.Position && i < len(pos[d.Tool]) {
				return pos[d.Tool][i], true
			}
		}
		return Answer{}, false
	}
	for j, f := range chosen {
		if f == d.Path && j < len(file[d.Tool]) {
			return file[d.Tool][j], true
		}
	}
	return Answer{}, false
}

// settle moves the disagreements reconciled reports to res.Reruns,
// counted as agreement.
func settle(res *Result, reconciled func(d *Disagreement) bool) {
	keep := res.Disagreements[:0]
	for _, d := range res.Disagreements {
		if !reconciled(&d) {
			keep = append(keep, d)
			continue
		}
		st := res.Tools[d.Tool]
		st.Agree++
		st.Rerun++
		res.Tools[d.Tool] = st
		if d.Service.empty() && d.Service.Err == "" && d.Service.State == "current" {
			res.EmptyCurrent-- // the server, rerun, had nothing to say either
		}
		res.Reruns = append(res.Reruns, d)
	}
	res.Disagreements = keep
}

// compare fills the agreement figures and the disagreements.
func compare(res *Result, t *truth, pos, file map[string][]Answer) {
	add := func(tool string, p *Position, path string, want, got Answer) {
		st := res.Tools[tool]
		st.Total++
		if !want.empty() {
			if res.Answered == nil {
				res.Answered = map[string]int{}
			}
			res.Answered[tool]++
		}
		if want.equal(got) {
			st.Agree++
		} else if capped(want, got) {
			st.Capped++
			res.Capped = append(res.Capped, Disagreement{Tool: tool, Position: p, Path: path, Truth: Answer{Lines: []string{fmt.Sprintf("%d item(s)", len(want.Lines))}}, Service: Answer{Lines: []string{fmt.Sprintf("%d item(s)", len(got.Lines))}, State: got.State, Warnings: got.Warnings}})
		} else {
			res.Disagreements = append(res.Disagreements, Disagreement{Tool: tool, Position: p, Path: path, Truth: want, Service: got})
			if got.empty() && got.Err == "" && got.State == "current" && !want.empty() {
				res.EmptyCurrent++
			}
		}
		res.Tools[tool] = st
		for _, w := range got.Warnings {
			if !contains(res.Warnings, w) {
				res.Warnings = append(res.Warnings, w)
			}
		}
	}
	slowest := [2]Slow{{Side: "truth"}, {Side: "service"}}
	for i := range t.positions {
		p := &t.positions[i]
		for _, tool := range Tools[:3] {
			want, got := t.pos[tool][i], pos[tool][i]
			add(tool, p, p.Path, want, got)
			for k, secs := range [2]float64{want.Seconds, got.Seconds} {
				if secs > slowest[k].seconds() {
					slowest[k] = Slow{Side: slowest[k].Side, Tool: tool, Position: p, Truth: want.Seconds, Service: got.Seconds}
				}
			}
			if tool == "definition" && len(want.Lines) > 0 && strings.HasPrefix(want.Lines[0], "ext ") {
				res.Externals.Total++
				if want.equal(got) {
					res.Externals.Agree++
				}
			}
		}
	}
	for _, s := range slowest {
		if s.Tool != "" {
			res.Slowest = append(res.Slowest, s)
		}
	}
	for j, f := range t.chosen {
		for _, tool := range Tools[3:] {
			add(tool, nil, f, t.file[tool][j], file[tool][j])
		}
	}
}

// PrintTable writes the table of a run.
func PrintTable(w io.Writer, results []*Result) {
	fmt.Fprintf(w, "%-27s %-4s %6s %4s %9s %20s %5s %6s %6s %6s %6s %6s %6s %7s %5s %4s %11s\n",
		"repository", "lang", "files", "pos", "prepare", "clone+inst+cold", "ratio", "next", "hover", "def", "refs", "syms", "diags", "extern", "warn", "emty", "RSS svc/dir")
	for _, r := range results {
		lang := r.Language
		if l, ok := langOf(r.Language); ok {
			lang = l.Short
		}
		if r.Err != "" && r.Positions == 0 {
			fmt.Fprintf(w, "%-27s %-4s %6d  ERROR %s\n", r.Repo, lang, r.Files, r.Err)
			continue
		}
		pct := func(t string) string {
			if r.Err != "" {
				return "-"
			}
			if r.Tools[t].Total == 0 {
				return "n/a" // nothing to compare: no position the ground truth answered
			}
			s := fmt.Sprintf("%.0f%%", r.Tools[t].Pct())
			if c := r.Tools[t].Capped; c > 0 {
				s += fmt.Sprintf("+%dc", c)
			}
			if n := r.Tools[t].Rerun; n > 0 {
				s += fmt.Sprintf("+%dr", n)
			}
			return s
		}
		prep := fmt.Sprintf("%.1fs", r.Prepare)
		if r.NoUsefulAnswer {
			prep = fmt.Sprintf(">%.0fs", r.ColdWait)
		}
		ratio := "-"
		if base := r.Clone + r.Install + r.Cold; base > 0 && !r.NoUsefulAnswer {
			ratio = fmt.Sprintf("%.2f", r.Prepare/base)
		}
		next := "-"
		if r.Next > 0 {
			next = fmt.Sprintf("%.1fs", r.Next)
		}
		fmt.Fprintf(w, "%-27s %-4s %6d %4d %9s %5.1fs+%5.1fs+%5.1fs %5s %6s %6s %6s %6s %6s %6s %3d/%-3d %5d %4d %5d/%-5d\n",
			r.Repo, lang, r.Files, r.Positions, prep, r.Clone, r.Install, r.Cold, ratio, next,
			pct("hover"), pct("definition"), pct("references"), pct("symbols"), pct("diagnostics"),
			r.Externals.Agree, r.Externals.Total, len(r.Warnings), r.EmptyCurrent, r.ServiceRSS>>20, r.DirectRSS>>20)
	}
	fmt.Fprintf(w, "\ntarget: ≥ %.0f%% per tool per repository. prepare = POST /prepare → first useful hover through the proxy (daemon jailed);\n", Target)
	fmt.Fprintln(w, "clone+inst+cold = git clone --depth 1 from the same forge + the ground truth's dependency install (the service's prepare includes its own)")
	fmt.Fprintln(w, "  + the pinned server's own cold start on the ground-truth checkout; ratio = prepare / (clone+inst+cold), target ≤ 1.2.")
	fmt.Fprintln(w, "next = the prepare of the next commit (the same tree, a new revision), the first one's workspace dropped: what the daemon keeps per repository reused.")
	fmt.Fprintln(w, "RSS svc/dir = MiB of the language's server tree, warm after every query: in the daemon (jailed) / the same server run directly.")
	fmt.Fprintln(w, "extern = definitions outside the repository the service matched / the ground truth gave; emty = empty answers marked current where the ground truth answered;")
	fmt.Fprintln(w, "n/a = no position or file to compare (positions are identifier uses the direct server resolves a definition for).")
	fmt.Fprintln(w, "+Nc = N answers capped: the service cut them at its bound and said so (partial), every item among the ground truth's; left out of the percentage, not agreement.")
	fmt.Fprintln(w, "+Nr = N agreements after a redraw of one side on a fresh index (the ground truth, then the service), not on the first draws (a server whose index varies between runs: clangd); counted in the percentage.")
	for _, r := range results {
		if r.Err != "" && r.Positions > 0 {
			fmt.Fprintf(w, "%s: error: %s\n", r.Repo, r.Err)
		}
		if r.InstallError != "" {
			fmt.Fprintf(w, "%s: ground-truth install failed: %s\n", r.Repo, firstLine(r.InstallError))
		}
		for _, x := range r.Warnings {
			fmt.Fprintf(w, "%s: warning: %s\n", r.Repo, firstLine(x))
		}
	}
	fmt.Fprintln(w, "\nper-repository durations, the prepare's POST /prepare and first useful answer after it, and each side's slowest answer (ground truth / service seconds on that question):")
	for _, r := range results {
		fmt.Fprintf(w, "  %-27s %6.1fs", r.Repo, r.Seconds)
		if r.Prepare > 0 {
			fmt.Fprintf(w, "  prepare %.2f+%.2fs", r.PrepareCall, r.Prepare-r.PrepareCall)
		}
		for _, s := range r.Slowest {
			fmt.Fprintf(w, "  %s %s %s:%d:%d %.1f/%.1fs", s.Side, s.Tool, s.Position.Path, s.Position.Line, s.Position.Character, s.Truth, s.Service)
		}
		fmt.Fprintln(w)
	}
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 240 {
		s = s[:240] + "…"
	}
	return s
}
