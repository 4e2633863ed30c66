package lspdaemonv1

// MaxQueryBytes bounds a QueryRequest's query (the workspace-symbol
// search string). It goes as-is to every language server asked and into
// the answer's query fingerprint, so the daemon refuses a longer one
// (STATUS_INVALID_REQUEST) whatever the caller; the proxy refuses it
// before with 400.
const MaxQueryBytes = 256
