package migrations

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"regexp"
	"sort"
	"strconv"
)

//go:embed *.sql
var files embed.FS

// ReadonlyRole is the NOLOGIN role that dashboards use (through a login role the operator grants it to).
const ReadonlyRole = "lsp_readonly"

// ReadonlyViews are the views ReadonlyRole may SELECT. Grants are (re)applied on every migration run so
// that a role the operator creates later still receives them.
var ReadonlyViews = []string{"v_ledger_rows", "v_money_rows", "v_usage_rows", "v_usage_daily", "v_balances", "v_holds"}

// ReadonlyFunctions are the functions ReadonlyRole may EXECUTE, by signature: those its views call
// (a function in a view runs with the reader's EXECUTE right).
var ReadonlyFunctions = []string{"lsp_usage_rollup_rows(text, timestamptz, timestamptz, text)"}

// Migration is one numbered SQL file.
type Migration struct {
	Version int
	Name    string // file name, e.g. "001_ledger.sql"
	SQL     string
	// Checksum is the hex SHA-256 of SQL; the runner records it to notice a file edited after deployment.
	Checksum string
}

var fileName = regexp.MustCompile(`^([0-9]{3,})_[a-z0-9_]+\.sql$`)

// All returns every migration in ascending version order. It fails on a misnamed file or a duplicate
// version, so a broken set is caught by this package's tests rather than at deploy time.
func All() ([]Migration, error) {
	entries, err := fs.ReadDir(files, ".")
	if err != nil {
		return nil, fmt.Errorf("read migrations: %w", err)
	}
	var out []Migration
	seen := map[int]string{}
	for _, e := range entries {
		m := fileName.FindStringSubmatch(e.Name())
		if m == nil {
			return nil, fmt.Errorf("migration %q: name must be NNN_description.sql", e.Name())
		}
		v, err := strconv.Atoi(m[1])
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("migration %q: bad version", e.Name())
		}
		if prev, dup := seen[v]; dup {
			return nil, fmt.Errorf("migration %q: version %d already used by %q", e.Name(), v, prev)
		}
		seen[v] = e.Name()
		b, err := files.ReadFile(e.Name())
		if err != nil {
			return nil, fmt.Errorf("read migration %q: %w", e.Name(), err)
		}
		sum := sha256.Sum256(b)
		out = append(out, Migration{Version: v, Name: e.Name(), SQL: string(b), Checksum: hex.EncodeToString(sum[:])})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out, nil
}

// Fingerprint identifies the whole set (versions and contents). Test helpers use it to name a migrated
// template database so that a stale template is never reused after a file changes.
func Fingerprint() (string, error) {
	all, err := All()
	if err != nil {
		return "", err
	}
	h := sha256.New()
	for _, m := range all {
		fmt.Fprintf(h, "%d %s %s\n", m.Version, m.Name, m.Checksum)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
