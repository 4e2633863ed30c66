package operation

// Progress is one step of a prepare, for a caller who watches (an event
// stream, MCP progress notifications, a progress bar). Steps come in this
// order, each at most once except fetching (once when it starts, once with
// the counts): resolving, then — when the revision is not prepared yet —
// waiting (another request of this proxy is preparing it; nothing else
// follows but ready) or fetching, pushing, indexing; then ready.
type Progress struct {
	Stage string
	Files int   // fetching (when done) and pushing: files in the tree
	Bytes int64 // fetching (when done) and pushing: bytes in the tree
}

// The stages.
const (
	StageResolving = "resolving"
	StageWaiting   = "waiting"
	StageFetching  = "fetching"
	StagePushing   = "pushing"
	StageIndexing  = "indexing"
	StageReady     = "ready"
)

// report tells the caller's progress func, if any. The func may be called
// from the leader's goroutine and after the request ended (a push runs on,
// detached): it must not block and must drop calls once nobody listens.
func (c Caller) report(p Progress) {
	if c.Progress != nil {
		c.Progress(p)
	}
}
