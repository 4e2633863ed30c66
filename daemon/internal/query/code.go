package query

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"github.com/hanzoai/lsp/daemon/internal/pool"
	"github.com/hanzoai/lsp/daemon/internal/safefs"
	"github.com/hanzoai/lsp/daemon/internal/sanitize"
	"github.com/hanzoai/lsp/daemon/internal/workspace"
	daemonv1 "github.com/hanzoai/lsp/proto/lspdaemon/v1"
)

// Code with the answer (CONTRACT §4): the lines of each location's range
// and context_lines around it, from the same revision's tree or, for an
// external location, from the dependency's source the servers read.
// Bounded per location and per answer, sanitised like hover text.
const (
	MaxContextLines  = 50
	maxCodeLines     = 400       // per location (a symbol's body included)
	maxCodeLineBytes = 1000      // per line; longer lines are cut
	maxCodeBytes     = 256 << 10 // per answer
	maxReadLines     = 2000
	maxExternalFile  = 8 << 20
	maxSourceBytes   = 32 << 20 // files read for one answer
)

// errNoSource is returned for a location whose file cannot be read, and
// errSourceTooLarge for an external file over maxExternalFile.
var (
	errNoSource       = errors.New("no source for this location")
	errSourceTooLarge = errors.New("the file is larger than the daemon reads")
)

// source is one file's lines and digest.
type source struct {
	lines []string
	sha   string
}

// coder attaches code to the items of one answer.
type coder struct {
	r     *Runner
	w     *pool.Workspace
	ctx   uint32 // context lines
	left  int    // bytes this answer may still carry
	read  int64  // bytes of source read for this answer
	files map[string]*source
	cut   bool // some code was truncated or dropped
	miss  int  // locations whose source could not be read
	// scrub names the daemon's host paths as hover text does: files of
	// the module cache were written by jailed processes.
	scrub *strings.Replacer
}

func (r *Runner) newCoder(w *pool.Workspace, contextLines uint32) *coder {
	return &coder{r: r, w: w, ctx: min(contextLines, MaxContextLines), left: maxCodeBytes, files: map[string]*source{},
		scrub: r.scrubber(w)}
}

// file reads a tree file (module "") or an external module's file.
func (cd *coder) file(module, path string) (*source, error) {
	key := module + "\x00" + path
	if s, ok := cd.files[key]; ok {
		if s == nil {
			return nil, errNoSource
		}
		return s, nil
	}
	if cd.read >= maxSourceBytes {
		// The answer's reading budget is spent: no further file is read.
		cd.cut = true
		cd.files[key] = nil
		return nil, errNoSource
	}
	var text []byte
	var err error
	tooLarge := false
	if module == "" {
		// A file larger than what is left of the budget is not read (it
		// was read whole and then thrown away, for every such location).
		budget := maxSourceBytes - cd.read
		limit := budget
		if m := cd.r.MaxDocument; m > 0 && m < limit {
			limit = m
		}
		var d *pool.Document
		if d, err = cd.w.Document(path, limit); err == nil {
			text = d.Text
		} else if errors.Is(err, pool.ErrDocumentTooLarge) && limit == budget {
			// (Over MaxDocument itself: read refuses it before, with
			// readDocument's answer.)
			cd.cut = true
		}
	} else {
		limit := min(maxExternalFile, maxSourceBytes-cd.read)
		text, err = cd.r.externalFile(cd.w, module, path, limit)
		if errors.Is(err, safefs.ErrTooLarge) {
			// Over the file bound, or what is left of the budget cannot
			// hold it.
			tooLarge = limit == maxExternalFile
			cd.cut = cd.cut || limit < maxExternalFile
		}
	}
	if err == nil && cd.read+int64(len(text)) > maxSourceBytes {
		// Locations in many large files: the later ones carry no code.
		cd.cut = true
		err = errNoSource
	}
	if err != nil {
		cd.files[key] = nil
		if tooLarge {
			return nil, errSourceTooLarge
		}
		return nil, errNoSource
	}
	cd.read += int64(len(text))
	s := &source{lines: splitLines(text)}
	sum := sha256.Sum256(text)
	s.sha = hex.EncodeToString(sum[:])
	cd.files[key] = s
	return s, nil
}

// splitLines splits text into lines without their endings.
func splitLines(text []byte) []string {
	if len(text) == 0 {
		return nil
	}
	text = bytes.TrimSuffix(text, []byte("\n"))
	parts := strings.Split(string(text), "\n")
	for i, p := range parts {
		parts[i] = strings.TrimSuffix(p, "\r")
	}
	return parts
}

// code is lines [first, last] of module's path widened by the context
// lines, within the bounds; nil when the file cannot be read.
func (cd *coder) code(module, path string, first, last uint32) *daemonv1.Code {
	src, err := cd.file(module, path)
	if err != nil {
		cd.miss++
		return nil
	}
	if last < first {
		last = first
	}
	from := uint64(first) - min(uint64(first), uint64(cd.ctx))
	to := uint64(last) + uint64(cd.ctx)
	return cd.cutLines(src, from, to, maxCodeLines)
}

// cutLines takes lines [from, to] of src, at most maxLines of them and
// within the answer's byte budget, each sanitised and bounded.
func (cd *coder) cutLines(src *source, from, to uint64, maxLines int) *daemonv1.Code {
	n := uint64(len(src.lines))
	out := &daemonv1.Code{StartLine: uint32(min(from, n))}
	if from >= n {
		return out
	}
	if to >= n {
		to = n - 1
	}
	if to-from+1 > uint64(maxLines) {
		to = from + uint64(maxLines) - 1
		out.Truncated = true
	}
	for i := from; i <= to; i++ {
		l := codeLine(cd.scrub.Replace(src.lines[i]))
		if len(src.lines[i]) > maxCodeLineBytes {
			out.Truncated = true
		}
		if cd.left < len(l)+1 {
			out.Truncated = true
			break
		}
		cd.left -= len(l) + 1
		out.Lines = append(out.Lines, l)
	}
	if out.Truncated {
		cd.cut = true
	}
	return out
}

// codeLine is one line of source as it may leave the daemon: control
// characters and bidi overrides removed (sanitize.Text, as hover text),
// secret-shaped strings redacted, at most maxCodeLineBytes.
func codeLine(l string) string {
	if len(l) > maxCodeLineBytes {
		cut := maxCodeLineBytes
		for cut > 0 && !utf8.RuneStart(l[cut]) {
			cut--
		}
		l = l[:cut]
	}
	return sanitize.Text(l, maxCodeLineBytes)
}

// warnings are what the coder says about its cuts.
func (cd *coder) warnings() []string {
	var w []string
	if cd.cut {
		w = append(w, "code was cut at the daemon's bounds (truncated)")
	}
	if cd.miss > 0 {
		w = append(w, "the source of some locations could not be read: they carry no code")
	}
	return w
}

// externalFile reads path of an external module as the servers saw it:
// GOROOT's std, the pinned TypeScript library, an installed npm package or
// the workspace's Go module cache. Roots in the workspace's home or its
// tree's node_modules are where jailed processes or the dependency phase
// wrote, so the read starts from the home (or the tree's parent) the
// daemon made and goes down without following any link (safefs); the
// other roots are the daemon's own installs and are read the same way
// from the root.
func (r *Runner) externalFile(w *pool.Workspace, module, path string, maxBytes int64) ([]byte, error) {
	if err := workspace.CheckPath(path, 1024); err != nil {
		return nil, err
	}
	if module == "" || len(module) > 512 || !utf8.ValidString(module) || strings.ContainsAny(module, "\x00\\") {
		return nil, errNoSource
	}
	for _, x := range r.externals(w) {
		var dir string
		switch {
		case x.Module == module:
			dir = x.Dir
		case x.Module == "":
			esc, ok := escapeModule(module)
			if !ok {
				continue
			}
			dir = filepath.Join(x.Dir, filepath.FromSlash(esc))
		default:
			continue
		}
		return readBeneath(w, dir, path, maxBytes)
	}
	return nil, errNoSource
}

// readBeneath reads dir/rel, at most maxBytes of it, without following a
// link below the trusted directory dir is in.
func readBeneath(w *pool.Workspace, dir, rel string, maxBytes int64) ([]byte, error) {
	base := dir
	for _, trusted := range []string{w.Home, filepath.Dir(w.Dir)} {
		if trusted != "" && strings.HasPrefix(dir, trusted+string(filepath.Separator)) {
			base = trusted
			break
		}
	}
	sub, err := filepath.Rel(base, filepath.Join(dir, filepath.FromSlash(rel)))
	if err != nil || sub == "." || strings.HasPrefix(sub, "..") {
		return nil, errNoSource
	}
	d, err := safefs.Open(base)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	return d.ReadFile(filepath.ToSlash(sub), maxBytes)
}

// escapeModule is the module cache's directory of "path@version": upper
// case letters, in the path and in the version, as "!" and the lower case
// one (the inverse of the URI policy's unescape). Each segment keeps the
// tree path rule.
func escapeModule(module string) (string, bool) {
	at := strings.LastIndexByte(module, '@')
	if at <= 0 || at == len(module)-1 {
		return "", false
	}
	mod, ver := module[:at], module[at+1:]
	// The cache's own download area is no module.
	if strings.HasPrefix(mod, "cache/") || workspace.CheckPath(mod, 512) != nil || strings.ContainsAny(ver, "/!") || ver == "." || ver == ".." {
		return "", false
	}
	return escapeCase(mod) + "@" + escapeCase(ver), true
}

// escapeCase spells each upper case letter as "!" and its lower case.
func escapeCase(s string) string {
	var b strings.Builder
	for _, c := range s {
		if c >= 'A' && c <= 'Z' {
			b.WriteByte('!')
			b.WriteRune(c + 'a' - 'A')
			continue
		}
		b.WriteRune(c)
	}
	return b.String()
}

// read answers OP_READ: lines of a tree file or of an external module's
// file. It needs no server, and starts none.
func (r *Runner) read(w *pool.Workspace, req *daemonv1.QueryRequest) *daemonv1.QueryResponse {
	rel, module := req.GetPath(), req.GetModule()
	if rel == "" {
		return fail(daemonv1.Status_STATUS_INVALID_REQUEST, "path is required")
	}
	if req.GetEndLine() < req.GetStartLine() {
		return fail(daemonv1.Status_STATUS_INVALID_REQUEST, "end_line is before start_line")
	}
	cd := r.newCoder(w, 0)
	if module == "" {
		if _, st := r.readDocument(w, rel); st != nil {
			return st
		}
	}
	src, err := cd.file(module, rel)
	switch {
	case errors.Is(err, errSourceTooLarge):
		return fail(daemonv1.Status_STATUS_INVALID_REQUEST, fmt.Sprintf("%s (%d bytes)", err, maxExternalFile))
	case err != nil:
		return fail(daemonv1.Status_STATUS_NOT_FOUND, "no such file in this revision or module")
	}
	if n := uint32(len(src.lines)); req.GetStartLine() >= n && !(n == 0 && req.GetStartLine() == 0) {
		return fail(daemonv1.Status_STATUS_POSITION_OUT_OF_RANGE, "start_line is past the end of the file")
	}
	code := cd.cutLines(src, uint64(req.GetStartLine()), uint64(req.GetEndLine()), maxReadLines)
	resp := &daemonv1.QueryResponse{
		Status: daemonv1.Status_STATUS_OK,
		Result: &daemonv1.QueryResponse_Read{Read: &daemonv1.Read{Path: rel, Module: module, Code: code, LineCount: uint32(len(src.lines))}},
		Evidence: &daemonv1.Evidence{
			State:            daemonv1.EvidenceState_EVIDENCE_STATE_CURRENT,
			Server:           &daemonv1.ServerInfo{},
			DocumentSha256:   src.sha,
			QueryFingerprint: queryFingerprint(req),
			Warnings:         cd.warnings(),
		},
	}
	return resp
}
