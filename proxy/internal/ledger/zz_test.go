package ledger_test

import (
	"fmt"
	"testing"
	"time"
)

func TestZZProfile(t *testing.T) {
	l, _ := open(t)
	l.Credit(ctx, "acme", 1<<40, "x")
	p := l.Pool()
	for _, q := range []string{
		"SELECT 1",
		"SELECT lsp_live_held('acme', NULL)",
		"SELECT lsp_charged_within('tk-acme','repo','c1', interval '1 day')",
		"SELECT lsp_lock_account('acme', false)",
		"SELECT * FROM lsp_hold('ID','acme','tk-acme','s','repo','cID','r',2, interval '1 hour', interval '1 day')",
		"SELECT lsp_record_query('acme','tk-acme','s','repo','c1','op','go','r',200,'')",
	} {
		var best time.Duration = time.Hour
		var total time.Duration
		for i := 0; i < 50; i++ {
			qq := q
			if len(q) > 30 {
				qq = fmt.Sprint(q)
			}
			qq = replaceID(qq, i)
			t0 := time.Now()
			if _, err := p.Exec(ctx, qq); err != nil {
				t.Fatal(err)
			}
			d := time.Since(t0)
			total += d
			best = min(best, d)
		}
		t.Logf("%-100s best %v avg %v", q, best, total/50)
	}
}

func replaceID(s string, i int) string {
	out := ""
	for j := 0; j < len(s); j++ {
		if j+2 <= len(s) && s[j:j+2] == "ID" {
			out += fmt.Sprint("x", i)
			j++
			continue
		}
		out += string(s[j])
	}
	return out
}
