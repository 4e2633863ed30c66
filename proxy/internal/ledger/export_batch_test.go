package ledger

// CommitAsOneBatch commits rows as one batch, the way the group committer does, and returns what
// each row's caller would have been told. It makes a batch's make-up deterministic in tests.
func CommitAsOneBatch(l *Ledger, rows []Row) []error {
	b := &lane{l: l, cfg: GroupCommit{}.withDefaults()}
	qs := make([]*queued, len(rows))
	for i, r := range rows {
		qs[i] = &queued{row: r, done: make(chan error, 1)}
	}
	b.commit(qs)
	errs := make([]error, len(rows))
	for i, q := range qs {
		errs[i] = <-q.done
	}
	return errs
}
