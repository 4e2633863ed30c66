package lsp

import "encoding/json"

// DocumentURI is a file URI as the server sees it.
type DocumentURI string

// Position is zero-based; Character counts UTF-16 code units (the only
// position encoding the client offers).
type Position struct {
	Line      uint32 `json:"line"`
	Character uint32 `json:"character"`
}

// Range is half-open, [Start, End).
type Range struct {
	Start Position `json:"start"`
	End   Position `json:"end"`
}

// Location is a range in a document.
type Location struct {
	URI   DocumentURI `json:"uri"`
	Range Range       `json:"range"`
}

// LocationLink is the wire form servers use when the client declares
// linkSupport; methods fold it into a Location on its target selection range.
type LocationLink struct {
	OriginSelectionRange *Range      `json:"originSelectionRange,omitempty"`
	TargetURI            DocumentURI `json:"targetUri"`
	TargetRange          Range       `json:"targetRange"`
	TargetSelectionRange Range       `json:"targetSelectionRange"`
}

// MarkupContent is the wire form of documentation.
type MarkupContent struct {
	Kind  string `json:"kind"`
	Value string `json:"value"`
}

// Hover is a normalised hover: whatever shape the server used, Markdown is
// markdown.
type Hover struct {
	Markdown string
	Range    *Range
	// Truncated is set when Markdown was cut at Limits.MaxMarkdownBytes.
	Truncated bool
}

// DiagnosticSeverity as in the LSP (1 error … 4 hint; 0 unset).
type DiagnosticSeverity int

// String returns "error", "warning", "information", "hint", or "" when unset
// or unknown.
func (s DiagnosticSeverity) String() string {
	switch s {
	case 1:
		return "error"
	case 2:
		return "warning"
	case 3:
		return "information"
	case 4:
		return "hint"
	}
	return ""
}

// Diagnostic is a normalised diagnostic. Code is the server's string or
// number code as text.
type Diagnostic struct {
	Range    Range
	Severity DiagnosticSeverity
	Code     string
	Source   string
	Message  string
}

// DiagnosticsMode says where a diagnostics answer came from.
type DiagnosticsMode string

const (
	// DiagnosticsPull: the server answered textDocument/diagnostic.
	DiagnosticsPull DiagnosticsMode = "pull"
	// DiagnosticsPublish: the answer is the last textDocument/publishDiagnostics.
	DiagnosticsPublish DiagnosticsMode = "publish"
)

// DiagnosticsResult is the answer of Client.Diagnostics.
type DiagnosticsResult struct {
	Items     []Diagnostic
	Truncated bool
	Dropped   int
	Mode      DiagnosticsMode
	// Settled is false when the publish fallback gave up waiting for the
	// server to publish for this document: the items are whatever was known
	// (possibly nothing) and the caller should call the answer partial.
	Settled bool
}

// SymbolKind as in the LSP (1 File … 26 TypeParameter).
type SymbolKind int

var symbolKindNames = [...]string{"", "file", "module", "namespace", "package", "class", "method",
	"property", "field", "constructor", "enum", "interface", "function", "variable", "constant",
	"string", "number", "boolean", "array", "object", "key", "null", "enum_member", "struct",
	"event", "operator", "type_parameter"}

// String returns the lower_snake name of the kind, or "" when unknown.
func (k SymbolKind) String() string {
	if k > 0 && int(k) < len(symbolKindNames) {
		return symbolKindNames[k]
	}
	return ""
}

// Symbol is a document or workspace symbol, flattened: a nested
// DocumentSymbol's parent name becomes Container.
type Symbol struct {
	Name           string
	Detail         string
	Kind           SymbolKind
	URI            DocumentURI
	Range          Range
	SelectionRange Range
	Container      string
}

// CompletionItemKind as in the LSP (1 Text … 25 TypeParameter).
type CompletionItemKind int

var completionKindNames = [...]string{"", "text", "method", "function", "constructor", "field",
	"variable", "class", "interface", "module", "property", "unit", "value", "enum", "keyword",
	"snippet", "color", "file", "reference", "folder", "enum_member", "constant", "struct",
	"event", "operator", "type_parameter"}

// String returns the lower_snake name of the kind, or "" when unknown.
func (k CompletionItemKind) String() string {
	if k > 0 && int(k) < len(completionKindNames) {
		return completionKindNames[k]
	}
	return ""
}

// CompletionItem is a normalised completion item. InsertText falls back to
// the text edit's new text, then to the label.
type CompletionItem struct {
	Label         string
	Kind          CompletionItemKind
	Detail        string
	Documentation string // markdown
	InsertText    string
	SortText      string
	FilterText    string
}

// Completion is the answer of Client.Completion.
type Completion struct {
	Items []CompletionItem
	// Incomplete is the server's isIncomplete flag.
	Incomplete bool
	Truncated  bool
	Dropped    int
}

// ParameterInformation with its label resolved to text even when the
// server sent label offsets.
type ParameterInformation struct {
	Label         string
	Documentation string // markdown
}

// SignatureInformation is one signature of a SignatureHelp.
type SignatureInformation struct {
	Label           string
	Documentation   string // markdown
	Parameters      []ParameterInformation
	ActiveParameter *uint32
}

// SignatureHelp is a normalised signature help; nil means the server had
// none at that position.
type SignatureHelp struct {
	Signatures      []SignatureInformation
	ActiveSignature *uint32
	ActiveParameter *uint32
	Truncated       bool
}

// CallHierarchyItem is one function in a call hierarchy.
type CallHierarchyItem struct {
	Name           string
	Kind           SymbolKind
	Detail         string
	URI            DocumentURI
	Range          Range
	SelectionRange Range
}

// CallHierarchyCall is one caller (IncomingCalls) or callee (OutgoingCalls).
// FromRanges are the call sites: in Item for incoming calls, in the prepared
// function for outgoing calls.
type CallHierarchyCall struct {
	Item       CallHierarchyItem
	FromRanges []Range
}

// TypeHierarchyItem is one type in a type hierarchy.
type TypeHierarchyItem struct {
	Name           string
	Kind           SymbolKind
	Detail         string
	URI            DocumentURI
	Range          Range
	SelectionRange Range
}

// List is a bounded list answer.
type List[T any] struct {
	Items []T
	// Truncated: the server sent more than a bound lets the client keep
	// (Limits.MaxItems; for published diagnostics MaxDiagnosticsPerURI
	// and MaxDocumentDiagnosticBytes).
	Truncated bool
	// Dropped counts elements skipped for having an unexpected shape.
	Dropped int
}

// LogMessage is one window/logMessage or window/showMessage from the server.
type LogMessage struct {
	// Type is the LSP MessageType: 1 error, 2 warning, 3 info, 4 log, 5 debug.
	Type    int
	Message string
}

// ServerInfo is what the server said about itself.
type ServerInfo struct {
	Name string
	// Version is the server's version string; for gopls, whose version is a
	// JSON blob, its "Version" field.
	Version string
}

// Provider is a server capability that the protocol lets be a boolean or
// an options object: present and not false means enabled.
type Provider struct {
	Enabled bool
	Options json.RawMessage
}

// UnmarshalJSON accepts true, false, null or an object.
func (p *Provider) UnmarshalJSON(b []byte) error {
	switch string(b) {
	case "true":
		*p = Provider{Enabled: true}
	case "false", "null":
		*p = Provider{}
	default:
		if len(b) == 0 || b[0] != '{' {
			// An odd shape is not an error worth failing initialize for:
			// treat the capability as absent.
			*p = Provider{}
			return nil
		}
		*p = Provider{Enabled: true, Options: append(json.RawMessage(nil), b...)}
	}
	return nil
}

// ServerCapabilities is the part of the server's capabilities the client
// reads. Raw is the whole capabilities object as received.
type ServerCapabilities struct {
	PositionEncoding        string   `json:"positionEncoding"`
	HoverProvider           Provider `json:"hoverProvider"`
	DefinitionProvider      Provider `json:"definitionProvider"`
	DeclarationProvider     Provider `json:"declarationProvider"`
	TypeDefinitionProvider  Provider `json:"typeDefinitionProvider"`
	ImplementationProvider  Provider `json:"implementationProvider"`
	ReferencesProvider      Provider `json:"referencesProvider"`
	DocumentSymbolProvider  Provider `json:"documentSymbolProvider"`
	WorkspaceSymbolProvider Provider `json:"workspaceSymbolProvider"`
	DiagnosticProvider      Provider `json:"diagnosticProvider"`
	CompletionProvider      Provider `json:"completionProvider"`
	SignatureHelpProvider   Provider `json:"signatureHelpProvider"`
	CallHierarchyProvider   Provider `json:"callHierarchyProvider"`
	TypeHierarchyProvider   Provider `json:"typeHierarchyProvider"`

	Raw json.RawMessage `json:"-"`
}
