package ledger

// CommitAsOneBatch commits rows as one batch, the way the group committer does, and returns what
// each row's caller would have been told. It makes a batch's make-up deterministic in tests.
// pipelined picks how a batch of several rows is sent: single-row statements in one round trip, or
// the array statement.
func CommitAsOneBatch(l *Ledger, rows []Row, pipelined bool) []error {
	cfg := GroupCommit{PipelineMax: 1}
	if pipelined {
		cfg.PipelineMax = len(rows)
	}
	b := &lane{l: l, cfg: cfg}
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
