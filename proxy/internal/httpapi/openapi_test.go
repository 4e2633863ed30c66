package httpapi

import (
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const apiPrefix = "/v1/lsp"

var httpMethods = map[string]bool{
	"get": true, "put": true, "post": true, "delete": true,
	"options": true, "head": true, "patch": true, "trace": true,
}

// docOperation is the part of an OpenAPI operation the drift test reads.
type docOperation struct {
	RequestBody *struct {
		Content map[string]struct {
			Schema struct {
				Ref                  string                     `json:"$ref"`
				Type                 string                     `json:"type"`
				AdditionalProperties *bool                      `json:"additionalProperties"`
				Properties           map[string]json.RawMessage `json:"properties"`
				Required             []string                   `json:"required"`
			} `json:"schema"`
		} `json:"content"`
	} `json:"requestBody"`
}

// serverBodies is the body field set of every POST route the server
// registers: the operation routes' own, and the common fields and path
// for /prepare.
func serverBodies() map[string]map[string]bool {
	out := map[string]map[string]bool{"POST " + apiPrefix + "/prepare": fields(commonFields, []string{"path"})}
	for _, rt := range opRoutes {
		out["POST "+apiPrefix+rt.path] = rt.fields
	}
	return out
}

var docParam = regexp.MustCompile(`\{([^}/]+)\}`)

// apiDrift compares an OpenAPI document with the server's routes and body
// fields and returns every difference; none means they agree.
func apiDrift(doc []byte, routes []string, bodies map[string]map[string]bool) ([]string, error) {
	var d struct {
		OpenAPI string                                `json:"openapi"`
		Paths   map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(doc, &d); err != nil {
		return nil, fmt.Errorf("parse OpenAPI document: %w", err)
	}
	if !strings.HasPrefix(d.OpenAPI, "3.1") {
		return nil, fmt.Errorf("OpenAPI version %q, want 3.1", d.OpenAPI)
	}
	var problems []string
	docRoutes := map[string]docOperation{}
	for path, item := range d.Paths {
		if !strings.HasPrefix(path, apiPrefix) {
			continue
		}
		// Echo writes path parameters as :name, OpenAPI as {name}.
		epath := docParam.ReplaceAllString(path, ":$1")
		for method, raw := range item {
			if !httpMethods[method] {
				continue
			}
			var op docOperation
			if err := json.Unmarshal(raw, &op); err != nil {
				return nil, fmt.Errorf("%s %s: %w", method, path, err)
			}
			docRoutes[strings.ToUpper(method)+" "+epath] = op
		}
	}
	served := map[string]bool{}
	for _, r := range routes {
		if _, path, _ := strings.Cut(r, " "); strings.HasPrefix(path, apiPrefix) {
			served[r] = true
		}
	}
	for _, r := range slices.Sorted(maps.Keys(served)) {
		if _, ok := docRoutes[r]; !ok {
			problems = append(problems, fmt.Sprintf("%s is served but not in the document", r))
		}
	}
	for _, r := range slices.Sorted(maps.Keys(docRoutes)) {
		if !served[r] {
			problems = append(problems, fmt.Sprintf("%s is in the document but not served", r))
		}
	}
	for _, r := range slices.Sorted(maps.Keys(docRoutes)) {
		op := docRoutes[r]
		fields, hasBody := bodies[r]
		if op.RequestBody == nil {
			if hasBody {
				problems = append(problems, fmt.Sprintf("%s takes a body the document does not describe", r))
			}
			continue
		}
		if !hasBody {
			problems = append(problems, fmt.Sprintf("%s: the document describes a body the server does not take", r))
			continue
		}
		media, ok := op.RequestBody.Content["application/json"]
		if !ok || len(op.RequestBody.Content) != 1 {
			problems = append(problems, fmt.Sprintf("%s: the body must be described as application/json only", r))
			continue
		}
		s := media.Schema
		if s.Ref != "" || s.Type != "object" || s.AdditionalProperties == nil || *s.AdditionalProperties {
			problems = append(problems, fmt.Sprintf("%s: the body schema must be an inline object with additionalProperties false", r))
			continue
		}
		for _, f := range slices.Sorted(maps.Keys(s.Properties)) {
			if !fields[f] {
				problems = append(problems, fmt.Sprintf("%s: the document allows field %q, the server refuses it", r, f))
			}
		}
		for _, f := range slices.Sorted(maps.Keys(fields)) {
			if _, ok := s.Properties[f]; !ok {
				problems = append(problems, fmt.Sprintf("%s: the server allows field %q, the document does not", r, f))
			}
		}
		for _, f := range s.Required {
			if _, ok := s.Properties[f]; !ok {
				problems = append(problems, fmt.Sprintf("%s: required field %q is not a property", r, f))
			}
		}
	}
	for _, r := range slices.Sorted(maps.Keys(bodies)) {
		if !served[r] {
			problems = append(problems, fmt.Sprintf("%s has a body field set but is not served", r))
		}
	}
	return problems, nil
}

// TestOpenAPIDrift: the committed document and the registered routes and
// bodies agree exactly.
func TestOpenAPIDrift(t *testing.T) {
	s := New(Deps{})
	problems, err := apiDrift(OpenAPI, s.Routes(), serverBodies())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
	if len(problems) == 0 && !strings.Contains(strings.Join(s.Routes(), "\n"), "POST "+apiPrefix+"/hover") {
		t.Error("the server registers no operation route: the comparison is vacuous")
	}
}

// TestOpenAPIDriftDetects: a route or a field added on one side only is a
// difference. Each case edits one side of a copy.
func TestOpenAPIDriftDetects(t *testing.T) {
	routes := New(Deps{}).Routes()
	var doc map[string]any
	if err := json.Unmarshal(OpenAPI, &doc); err != nil {
		t.Fatal(err)
	}
	copyDoc := func() map[string]any {
		var d map[string]any
		_ = json.Unmarshal(OpenAPI, &d)
		return d
	}
	hoverSchema := func(d map[string]any) map[string]any {
		op := d["paths"].(map[string]any)[apiPrefix+"/hover"].(map[string]any)["post"].(map[string]any)
		return op["requestBody"].(map[string]any)["content"].(map[string]any)["application/json"].(map[string]any)["schema"].(map[string]any)
	}
	cases := []struct {
		name   string
		doc    func(d map[string]any)
		routes func([]string) []string
		bodies func(map[string]map[string]bool)
		want   string
	}{
		{name: "route only in the document", want: "POST /v1/lsp/rename is in the document but not served",
			doc: func(d map[string]any) {
				d["paths"].(map[string]any)[apiPrefix+"/rename"] = map[string]any{"post": map[string]any{}}
			}},
		{name: "method only in the document", want: "GET /v1/lsp/hover is in the document but not served",
			doc: func(d map[string]any) {
				d["paths"].(map[string]any)[apiPrefix+"/hover"].(map[string]any)["get"] = map[string]any{}
			}},
		{name: "parameterised route only in the document", want: "DELETE /v1/lsp/workspaces/:id is in the document",
			doc: func(d map[string]any) {
				d["paths"].(map[string]any)[apiPrefix+"/workspaces/{id}"] = map[string]any{"delete": map[string]any{}, "parameters": []any{}}
			}},
		{name: "route only served", want: "POST /v1/lsp/rename is served but not in the document",
			routes: func(r []string) []string { return append(r, "POST /v1/lsp/rename") },
			bodies: func(b map[string]map[string]bool) { b["POST /v1/lsp/rename"] = fieldSet("repo") }},
		{name: "route dropped from the server", want: "POST /v1/lsp/hover is in the document but not served",
			routes: func(r []string) []string {
				return slices.DeleteFunc(slices.Clone(r), func(s string) bool { return s == "POST /v1/lsp/hover" })
			}},
		{name: "field only in the document", want: `POST /v1/lsp/hover: the document allows field "relation"`,
			doc: func(d map[string]any) {
				hoverSchema(d)["properties"].(map[string]any)["relation"] = map[string]any{"type": "string"}
			}},
		{name: "field only in the server", want: `POST /v1/lsp/hover: the server allows field "limit"`,
			bodies: func(b map[string]map[string]bool) {
				b["POST /v1/lsp/hover"] = fields(positionFields, []string{"limit"})
			}},
		{name: "prepare field only in the server", want: `POST /v1/lsp/prepare: the server allows field "line"`,
			bodies: func(b map[string]map[string]bool) {
				b["POST /v1/lsp/prepare"] = fieldSet("repo", "rev", "path", "line")
			}},
		{name: "field dropped from the document", want: `POST /v1/lsp/locate: the server allows field "include_declaration"`,
			doc: func(d map[string]any) {
				op := d["paths"].(map[string]any)[apiPrefix+"/locate"].(map[string]any)["post"].(map[string]any)
				props := op["requestBody"].(map[string]any)["content"].(map[string]any)["application/json"].(map[string]any)["schema"].(map[string]any)["properties"].(map[string]any)
				delete(props, "include_declaration")
			}},
		{name: "schema no longer strict", want: "additionalProperties false",
			doc: func(d map[string]any) { hoverSchema(d)["additionalProperties"] = true }},
		{name: "body dropped from the document", want: "POST /v1/lsp/hover takes a body the document does not describe",
			doc: func(d map[string]any) {
				delete(d["paths"].(map[string]any)[apiPrefix+"/hover"].(map[string]any)["post"].(map[string]any), "requestBody")
			}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := copyDoc()
			r := slices.Clone(routes)
			b := serverBodies()
			if c.doc != nil {
				c.doc(d)
			}
			if c.routes != nil {
				r = c.routes(r)
			}
			if c.bodies != nil {
				c.bodies(b)
			}
			raw, err := json.Marshal(d)
			if err != nil {
				t.Fatal(err)
			}
			problems, err := apiDrift(raw, r, b)
			if err != nil {
				t.Fatal(err)
			}
			found := false
			for _, p := range problems {
				found = found || strings.Contains(p, c.want)
			}
			if !found {
				t.Fatalf("drift not reported; want %q, got %q", c.want, problems)
			}
		})
	}
}
