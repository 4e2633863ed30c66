package corpus

import "testing"

// TestCompareCapped: a references answer the daemon cut at its bound and
// marked partial, every item among the ground truth's, is counted as
// capped — neither agreement nor disagreement. Cut without saying so, or
// with an item the truth lacks, it is a disagreement.
func TestCompareCapped(t *testing.T) {
	want := Answer{Lines: []string{"a.go:1:1", "a.go:2:1", "b.go:3:1", "c.go:4:1"}}
	cut := []string{"a.go:1:1", "b.go:3:1"}
	for _, tc := range []struct {
		name                    string
		got                     Answer
		agree, capped, disagree int
	}{
		{"capped and said so", Answer{Lines: cut, State: "partial", Warnings: []string{capWarning}}, 0, 1, 0},
		{"cut silently", Answer{Lines: cut, State: "current"}, 0, 0, 1},
		{"partial for another reason", Answer{Lines: cut, State: "partial", Warnings: []string{"gopls could not load the project: x"}}, 0, 0, 1},
		{"an item the truth lacks", Answer{Lines: []string{"a.go:1:1", "z.go:9:9"}, State: "partial", Warnings: []string{capWarning}}, 0, 0, 1},
		{"the same", Answer{Lines: want.Lines, State: "current"}, 1, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := &truth{positions: []Position{{Path: "a.go"}}, pos: map[string][]Answer{}, file: map[string][]Answer{}}
			pos := map[string][]Answer{}
			for _, tool := range Tools[:3] {
				tr.pos[tool] = []Answer{{}}
				pos[tool] = []Answer{{}}
			}
			tr.pos["references"], pos["references"] = []Answer{want}, []Answer{tc.got}
			res := &Result{Tools: map[string]Stat{}}
			compare(res, tr, pos, map[string][]Answer{})
			st := res.Tools["references"]
			if st.Agree != tc.agree || st.Capped != tc.capped || len(res.Disagreements) != tc.disagree || len(res.Capped) != tc.capped {
				t.Fatalf("stat %+v, %d disagreement(s), %d capped listed; want agree %d capped %d disagree %d", st, len(res.Disagreements), len(res.Capped), tc.agree, tc.capped, tc.disagree)
			}
			if tc.capped > 0 && st.Pct() != 100 {
				t.Fatalf("pct %v: the one position is capped, so nothing is left to disagree", st.Pct())
			}
		})
	}
}
