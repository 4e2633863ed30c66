package httpapi

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"strings"

	"github.com/hanzoai/lsp/proxy/internal/apierr"
	"github.com/hanzoai/lsp/proxy/internal/operation"
)

// cursor is the signed state of a list page (CONTRACT §4): bound to the
// tenant, repo, commit, operation and its parameters, and the prepare and
// server generation that produced the first page. It is opaque to callers.
type cursor struct {
	Tenant     string `json:"t"`
	Query      string `json:"q"` // fingerprint of repo, op and parameters
	Commit     string `json:"c"`
	Offset     uint32 `json:"o"`
	Generation uint64 `json:"g"`
	Prepare    string `json:"p,omitempty"` // the workspace's prepare id
}

// queryFingerprint binds a cursor to the request that made it. The rev is
// left out on purpose: the commit it resolved to is bound instead.
func queryFingerprint(r *operation.Request) string {
	b, _ := json.Marshal([]any{r.Repo, r.OpName, int32(r.Op), r.Path, r.Line, r.Character, r.Query, r.IncludeDeclaration, r.Limit,
		r.Symbol, r.Text, r.ContextLines, r.IncludeBody})
	if r.Language != "" {
		// Only when set: cursors issued without a language stay valid.
		b = append(b, r.Language...)
	}
	sum := sha256.Sum256(b)
	return base64.RawURLEncoding.EncodeToString(sum[:12])
}

func (s *Server) sealCursor(tenant string, r *operation.Request, commit, prepareID string, offset uint32, gen uint64) string {
	payload, _ := json.Marshal(cursor{Tenant: tenant, Query: queryFingerprint(r), Commit: commit, Offset: offset, Generation: gen, Prepare: prepareID})
	p := base64.RawURLEncoding.EncodeToString(payload)
	return p + "." + s.sign(p)
}

func (s *Server) sign(p string) string {
	m := hmac.New(sha256.New, s.d.CursorSecret)
	m.Write([]byte(p))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// openCursor verifies a cursor's signature and binding. The commit is
// checked by the daemon's generation test and by comparing after resolve.
func (s *Server) openCursor(raw, tenant string, r *operation.Request) (cursor, error) {
	bad := apierr.BadRequest("the cursor is not valid for this request")
	if len(raw) > 1024 {
		return cursor{}, bad
	}
	p, sig, ok := strings.Cut(raw, ".")
	if !ok || !hmac.Equal([]byte(sig), []byte(s.sign(p))) {
		return cursor{}, bad
	}
	b, err := base64.RawURLEncoding.DecodeString(p)
	if err != nil {
		return cursor{}, bad
	}
	var c cursor
	if err := json.Unmarshal(b, &c); err != nil || c.Tenant != tenant || c.Query != queryFingerprint(r) {
		return cursor{}, bad
	}
	r.CursorCommit, r.CursorPrepareID = c.Commit, c.Prepare
	return c, nil
}
