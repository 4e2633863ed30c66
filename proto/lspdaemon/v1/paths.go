package lspdaemonv1

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// The tree path rule: which repository paths the daemon writes, and so
// which the proxy may send in a PrepareHeader (FileEntry.path) or name in a
// QueryRequest (path). Both sides call CheckTreePath, so a path the proxy
// keeps is never one that makes the daemon refuse the whole tree (before,
// a file named `a\b.go`, or one over 1,024 bytes, passed the proxy and
// failed every prepare of its repository). The proxy drops a file whose
// path fails it, with a warning in the prepare answer, and may drop more
// (`.git` segments); the daemon refuses a tree that holds one.
const (
	// MaxTreePathBytes bounds a whole path.
	MaxTreePathBytes = 1024
	// MaxTreeNameBytes bounds one segment: NAME_MAX, the longest name a
	// Linux file system stores.
	MaxTreeNameBytes = 255
)

// MaxPushMessageBytes bounds one message of a Prepare stream: its header
// (the manifest and the tree's warnings) and its trailer (a digest per
// file). gRPC's default of 4 MiB, which the daemon had, is less than trees
// within the file limits need (50,000 files of 80-byte paths; a trailer of
// 64,000 digests), so such a tree failed every prepare as "too large". The
// daemon receives no larger message; the proxy refuses a tree whose header
// or trailer would be larger before it sends any.
const MaxPushMessageBytes = 64 << 20

// TenantHeader is the gRPC metadata key of a Prepare stream that names
// its workspace's tenant key before the header is sent: the daemon gives
// each tenant its share of the prepares it handles at once without
// receiving (decoding) a manifest first, and refuses a header of another
// tenant.
const TenantHeader = "x-lsp-tenant"

// MaxPushChunkBytes bounds the bytes of one data message of a Prepare
// stream. The daemon receives a few messages ahead of its writes, and
// MaxPushMessageBytes, meant for a header's manifest, would let each of
// them hold 64 MiB: so it refuses a data message over this bound
// (InvalidArgument). The proxy's chunk size (daemonclient.ChunkSize) must
// not exceed it.
const MaxPushChunkBytes = 1 << 20

// CheckTreePath says why p breaks the rule, nil when it keeps it: a
// non-empty, valid UTF-8, '/'-separated relative path of at most
// MaxTreePathBytes bytes; no control character (below 0x20, or 0x7f) and
// no backslash (a separator on Windows clients, and ambiguous in URIs);
// no empty, "." or ".." segment, and none longer than MaxTreeNameBytes.
func CheckTreePath(p string) error {
	switch {
	case p == "":
		return errors.New("empty path")
	case len(p) > MaxTreePathBytes:
		return fmt.Errorf("path longer than %d bytes", MaxTreePathBytes)
	case !utf8.ValidString(p):
		return errors.New("path is not valid UTF-8")
	case strings.HasPrefix(p, "/"):
		return errors.New("absolute path")
	}
	for i := 0; i < len(p); i++ {
		if c := p[i]; c < 0x20 || c == 0x7f || c == '\\' {
			return errors.New("path has a control character or backslash")
		}
	}
	for seg := range strings.SplitSeq(p, "/") {
		switch {
		case seg == "":
			return errors.New("path has an empty segment")
		case seg == "." || seg == "..":
			return errors.New("path has a '.' or '..' segment")
		case len(seg) > MaxTreeNameBytes:
			return fmt.Errorf("path has a segment longer than %d bytes", MaxTreeNameBytes)
		}
	}
	return nil
}

// ValidTreePath reports whether p keeps the tree path rule (CheckTreePath).
func ValidTreePath(p string) bool { return CheckTreePath(p) == nil }
