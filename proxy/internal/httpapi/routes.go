package httpapi

import (
	"net/http"
	"strings"
	"time"

	daemonv1 "github.com/hanzoai/lsp/proto/lspdaemon/v1"
	"github.com/hanzoai/lsp/proxy/internal/apierr"
	"github.com/hanzoai/lsp/proxy/internal/forge"
	"github.com/hanzoai/lsp/proxy/internal/operation"
	"github.com/labstack/echo/v4"
)

// opRoute is one POST operation route: the fields its body may carry and
// how it becomes a daemon operation.
type opRoute struct {
	path   string
	name   string // the op name in ledger rows and metrics
	fields map[string]bool
	list   bool // takes limit and cursor
	build  func(b *body, r *operation.Request) error
	render func(out map[string]any, ans *daemonv1.QueryResponse)
}

var (
	commonFields = []string{"repo", "rev"}
	// prepareFields are POST /prepare's body (and the MCP prepare tool's):
	// path, optional, is the file the caller will ask about first.
	prepareFields  = fields(commonFields, []string{"path"})
	positionFields = []string{"repo", "rev", "path", "line", "character", "symbol", "text"}
	pageFields     = []string{"limit", "cursor"}
	// codeFields belong to the routes whose answers are locations.
	codeFields = []string{"context_lines"}
)

func fields(groups ...[]string) map[string]bool {
	var all []string
	for _, g := range groups {
		all = append(all, g...)
	}
	return fieldSet(all...)
}

var opRoutes = []opRoute{
	{
		path: "/hover", name: "hover", fields: fields(positionFields),
		build:  positionOp(daemonv1.Op_OP_HOVER),
		render: renderHover,
	},
	{
		path: "/locate", name: "locate", list: true,
		fields: fields(positionFields, []string{"relation", "include_declaration"}, codeFields, pageFields),
		build: func(b *body, r *operation.Request) error {
			rel, err := oneOf(b.Relation, "definition", "definition", "declaration", "type", "implementation", "reference")
			if err != nil {
				return apierr.BadRequest("relation must be definition, declaration, type, implementation or reference")
			}
			if b.IncludeDeclaration != nil && rel != "reference" {
				return apierr.BadRequest("include_declaration belongs to relation reference")
			}
			r.Op = map[string]daemonv1.Op{
				"definition":     daemonv1.Op_OP_DEFINITION,
				"declaration":    daemonv1.Op_OP_DECLARATION,
				"type":           daemonv1.Op_OP_TYPE_DEFINITION,
				"implementation": daemonv1.Op_OP_IMPLEMENTATION,
				"reference":      daemonv1.Op_OP_REFERENCES,
			}[rel]
			r.IncludeDeclaration = b.IncludeDeclaration != nil && *b.IncludeDeclaration
			if err := setCode(b, r); err != nil {
				return err
			}
			return setPosition(b, r)
		},
		render: renderLocations,
	},
	{
		path: "/symbols", name: "symbols", list: true,
		fields: fields(commonFields, []string{"path", "query", "language", "include_body"}, codeFields, pageFields),
		build: func(b *body, r *operation.Request) error {
			if err := setCode(b, r); err != nil {
				return err
			}
			r.IncludeBody = b.IncludeBody != nil && *b.IncludeBody
			switch {
			case b.Path != nil && b.Query != nil:
				return apierr.BadRequest("give path (document symbols) or query (workspace symbols), not both")
			case b.Language != nil && b.Query == nil:
				return apierr.BadRequest("language limits a workspace symbol query: give it with query")
			case b.Language != nil && !daemonv1.ValidLanguageID(*b.Language):
				return apierr.BadRequest("language must be an LSP language id such as go or python")
			case b.Path != nil:
				p, err := checkPath(b.Path)
				r.Op, r.Path = daemonv1.Op_OP_DOCUMENT_SYMBOLS, p
				return err
			case b.Query != nil:
				if len(*b.Query) > daemonv1.MaxQueryBytes {
					return apierr.BadRequest("query is longer than %d bytes", daemonv1.MaxQueryBytes)
				}
				r.Op, r.Query = daemonv1.Op_OP_WORKSPACE_SYMBOLS, *b.Query
				if b.Language != nil {
					r.Language = *b.Language
				}
				return nil
			}
			return apierr.BadRequest("path or query is required")
		},
		render: renderSymbols,
	},
	{
		path: "/diagnostics", name: "diagnostics", list: true,
		fields: fields(commonFields, []string{"path"}, pageFields),
		build: func(b *body, r *operation.Request) error {
			p, err := checkPath(b.Path)
			r.Op, r.Path = daemonv1.Op_OP_DIAGNOSTICS, p
			return err
		},
		render: renderDiagnostics,
	},
	{
		path: "/complete", name: "complete", list: true, fields: fields(positionFields, pageFields),
		build:  positionOp(daemonv1.Op_OP_COMPLETION),
		render: renderCompletions,
	},
	{
		path: "/signature", name: "signature", fields: fields(positionFields),
		build:  positionOp(daemonv1.Op_OP_SIGNATURE_HELP),
		render: renderSignatures,
	},
	{
		path: "/calls", name: "calls", list: true, fields: fields(positionFields, []string{"direction"}, codeFields, pageFields),
		build: func(b *body, r *operation.Request) error {
			if err := setCode(b, r); err != nil {
				return err
			}
			d, err := oneOf(b.Direction, "", "incoming", "outgoing")
			if err != nil || d == "" {
				return apierr.BadRequest("direction must be incoming or outgoing")
			}
			r.Op = map[string]daemonv1.Op{"incoming": daemonv1.Op_OP_INCOMING_CALLS, "outgoing": daemonv1.Op_OP_OUTGOING_CALLS}[d]
			return setPosition(b, r)
		},
		render: renderCalls,
	},
	{
		path: "/types", name: "types", list: true, fields: fields(positionFields, []string{"direction"}, codeFields, pageFields),
		build: func(b *body, r *operation.Request) error {
			if err := setCode(b, r); err != nil {
				return err
			}
			d, err := oneOf(b.Direction, "", "supertypes", "subtypes")
			if err != nil || d == "" {
				return apierr.BadRequest("direction must be supertypes or subtypes")
			}
			r.Op = map[string]daemonv1.Op{"supertypes": daemonv1.Op_OP_SUPERTYPES, "subtypes": daemonv1.Op_OP_SUBTYPES}[d]
			return setPosition(b, r)
		},
		render: renderTypes,
	},
	{
		path: "/read", name: "read", fields: fields(commonFields, []string{"path", "start_line", "end_line", "module", "prepare"}),
		build: func(b *body, r *operation.Request) error {
			p, err := checkPath(b.Path)
			if err != nil {
				return err
			}
			r.Op, r.Path = daemonv1.Op_OP_READ, p
			if b.Module != nil {
				m := *b.Module
				if m == "" || len(m) > 512 || !strings.Contains(m, "@") || strings.ContainsFunc(m, func(c rune) bool { return c <= ' ' || c == 0x7f || c == '\\' }) {
					return apierr.BadRequest("module must be a module as locations name it (std@go1.26.8, example.com/dep@v1.0.0, axios@1.7.0)")
				}
				r.Module = m
			}
			start, end := int64(0), int64(-1)
			if b.StartLine != nil {
				start = *b.StartLine
			}
			if b.EndLine != nil {
				end = *b.EndLine
			} else {
				end = start + defaultReadLines - 1
			}
			switch {
			case start < 0 || end < 0:
				return apierr.BadRequest("start_line and end_line must not be negative")
			case end < start:
				return apierr.BadRequest("end_line must not be before start_line")
			case start > 1<<31:
				return apierr.New(422, apierr.PositionOutOfRange, "start_line is past the end of the file")
			}
			r.StartLine, r.EndLine = uint32(start), uint32(min(end, 1<<31))
			r.WarmOnly = b.Prepare == nil || !*b.Prepare
			return nil
		},
		render: renderRead,
	},
}

// defaultReadLines is how many lines a read without end_line returns.
const defaultReadLines = 200

// setCode checks context_lines (0-50): present, the answer's locations
// carry their code.
func setCode(b *body, r *operation.Request) error {
	if b.ContextLines == nil {
		return nil
	}
	if *b.ContextLines < 0 || *b.ContextLines > 50 {
		return apierr.BadRequest("context_lines must be between 0 and 50")
	}
	n := uint32(*b.ContextLines)
	r.ContextLines = &n
	return nil
}

func positionOp(op daemonv1.Op) func(*body, *operation.Request) error {
	return func(b *body, r *operation.Request) error {
		r.Op = op
		return setPosition(b, r)
	}
}

// setPosition takes the position in one of its three forms: line and
// character; symbol (path optional: without it the workspace's symbols);
// line and text.
func setPosition(b *body, r *operation.Request) error {
	if b.Symbol != nil {
		if b.Line != nil || b.Character != nil || b.Text != nil {
			return apierr.BadRequest("give symbol alone, or line with character or text")
		}
		s := *b.Symbol
		if s == "" || len(s) > 256 || strings.ContainsFunc(s, func(c rune) bool { return c <= ' ' || c == 0x7f }) {
			return apierr.BadRequest("symbol must be a name or a container path such as Client.Do (at most 256 bytes, no spaces)")
		}
		r.Symbol = s
		if b.Path != nil {
			p, err := checkPath(b.Path)
			if err != nil {
				return err
			}
			r.Path = p
		}
		return nil
	}
	p, err := checkPath(b.Path)
	if err != nil {
		return err
	}
	r.Path = p
	if b.Text != nil {
		if b.Character != nil {
			return apierr.BadRequest("give text or character, not both")
		}
		t := *b.Text
		if t == "" || len(t) > 256 || strings.ContainsAny(t, "\r\n") {
			return apierr.BadRequest("text must be 1 to 256 bytes of one line")
		}
		if b.Line == nil {
			return apierr.BadRequest("text needs line")
		}
		zero := int64(0)
		l := *b
		l.Character = &zero
		if r.Line, _, err = checkPosition(&l); err != nil {
			return err
		}
		r.Text = t
		return nil
	}
	r.Line, r.Character, err = checkPosition(b)
	return err
}

// commonRequest checks repo and rev, shared by every route.
func commonRequest(b *body) (string, forge.Rev, error) {
	repo, err := checkRepo(b.Repo)
	if err != nil {
		return "", forge.Rev{}, err
	}
	rev := ""
	if b.Rev != nil {
		rev = *b.Rev
	}
	r, err := forge.ParseRev(rev)
	if err != nil {
		return "", forge.Rev{}, apierr.BadRequest("rev must be a full commit sha, a ref or a branch or tag name")
	}
	return repo, r, nil
}

// request checks a decoded body against the route and builds its
// operation: everything about a body that is 400, before the caller's org
// is looked at.
func (rt opRoute) request(b *body) (operation.Request, error) {
	req := operation.Request{OpName: rt.name}
	var err error
	if req.Repo, req.Rev, err = commonRequest(b); err != nil {
		return operation.Request{}, err
	}
	if err := rt.build(b, &req); err != nil {
		return operation.Request{}, err
	}
	if rt.list {
		if req.Limit, err = checkLimit(b.Limit); err != nil {
			return operation.Request{}, err
		}
	}
	return req, nil
}

// operation is the handler of one operation route.
func (s *Server) operation(rt opRoute) echo.HandlerFunc {
	return func(c echo.Context) error {
		start := time.Now()
		b, err := decodeBody(c, rt.fields)
		if err != nil {
			return err
		}
		req, err := rt.request(b)
		if err != nil {
			return err
		}
		caller, err := s.caller(c)
		if err != nil {
			return err
		}
		out, err := s.runOperation(c.Request().Context(), rt, b, req, caller, start)
		if err != nil {
			return err
		}
		return c.JSON(http.StatusOK, out)
	}
}

// prepare is POST /prepare. path (optional) is the file the caller asks
// about first: a prepare waits for its server's first load only.
func (s *Server) prepare(c echo.Context) error {
	start := time.Now()
	b, err := decodeBody(c, prepareFields)
	if err != nil {
		return err
	}
	repo, rev, err := commonRequest(b)
	if err != nil {
		return err
	}
	var focus string
	if b.Path != nil {
		if focus, err = checkPath(b.Path); err != nil {
			return err
		}
	}
	caller, err := s.caller(c)
	if err != nil {
		return err
	}
	if wantsEventStream(c.Request()) {
		return s.prepareStream(c, caller, repo, rev, focus, start)
	}
	out, _, err := s.runPrepare(c.Request().Context(), caller, repo, rev, focus, start)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, out)
}
