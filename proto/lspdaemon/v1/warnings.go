package lspdaemonv1

// The bounds of PrepareHeader.tree_warnings. The proxy names each tree
// entry it dropped, at most MaxTreeWarnings lines in all (the last then
// says how many more there were), each of at most MaxTreeWarningBytes;
// the daemon keeps them with the published tree and refuses a header over
// these bounds.
const (
	MaxTreeWarnings     = 1000
	MaxTreeWarningBytes = 2048
)
