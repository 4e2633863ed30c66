package readiness

import (
	"strings"

	"github.com/hanzoai/lsp/daemon/internal/lsp"
)

// bash-language-server 5.8.1 analyses the workspace's scripts in the
// background once initialized (its backgroundAnalysisMaxFiles, the
// reviewed entry's 500) and reports only in its log, at info level, how
// that went: "BackgroundAnalysis: resolving glob …", "… Glob resolved
// with 12 files after 0.1 seconds", "… Completed after 0.4 seconds.". Its
// references and workspace symbols come from that analysis, so an answer
// before "Completed" misses the scripts not yet read (seen on x/sys:
// references to a function of mkall.sh from its own file alone). The
// analysis ends without "Completed" only when it is skipped (max files 0)
// or gives up, and then it says so at warning level: after its 10 s
// budget ("stopped after 10000ms; workspace symbols may be incomplete")
// or when the glob failed ("failed resolving glob …"). Giving up — or
// stopping the discovery at its directories limit, after which it still
// completes — leaves every cross-file answer short: a load problem.
//
// Like clangd's index, the analysis comes after the server is up and
// feeds only the answers about other files (IndexInBackground): a prepare
// does not wait for it, the queries that read it (references,
// definitions, workspace symbols) do, and any other answer given
// meanwhile says it came during the analysis.
//
// The info lines need the entry's logLevel at "info" (its default):
// TestShellEntryLogsIndex in deploy keeps the reviewed entry so.
var shellIndexEnds = []string{
	"BackgroundAnalysis: Completed after",
	"BackgroundAnalysis: skipping as backgroundAnalysisMaxFiles was 0",
	"BackgroundAnalysis: stopped after",
	"BackgroundAnalysis: failed resolving glob",
}

var shellIndexFailures = []string{
	"BackgroundAnalysis: stopped after",
	"BackgroundAnalysis: stopped discovery",
	"BackgroundAnalysis: failed resolving glob",
}

func shellIndexed(msg string) bool { return containsAny(msg, shellIndexEnds) }

// shellLog keeps the line from "BackgroundAnalysis:" on, without its
// "12:00:00.000 WARNING ⛔️ " stamp.
func shellLog(typ int, msg string) (string, bool) {
	if typ > 2 || !containsAny(msg, shellIndexFailures) {
		return "", false
	}
	_, rest, _ := strings.Cut(msg, "BackgroundAnalysis: ")
	return "BackgroundAnalysis: " + firstLine(rest), true
}

func containsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

func init() {
	register(lsp.LoadSigns{
		Log:               shellLog,
		IndexLog:          &lsp.IndexLog{Title: "background analysis", Done: shellIndexed},
		IndexInBackground: true,
	}, "shellscript")
}
