package ledger

// CommitAsOneBatchIDs is CommitAsOneBatch, also returning the id each row's caller would have been
// given (0 for a row that failed).
func CommitAsOneBatchIDs(l *Ledger, rows []Row, pipelined bool) ([]int64, []error) {
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
	ids, errs := make([]int64, len(rows)), make([]error, len(rows))
	for i, q := range qs {
		if errs[i] = <-q.done; errs[i] == nil {
			ids[i] = q.id
		}
	}
	return ids, errs
}
