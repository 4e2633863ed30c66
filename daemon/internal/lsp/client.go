package lsp

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hanzoai/lsp/daemon/internal/jsonrpc"
)

// Tool names: the fixed vocabulary the daemon exposes. A tool is available
// only when the server negotiated the matching capability.
const (
	ToolHover            = "hover"
	ToolDefinition       = "definition"
	ToolDeclaration      = "declaration"
	ToolTypeDefinition   = "type_definition"
	ToolImplementation   = "implementation"
	ToolReferences       = "references"
	ToolDocumentSymbols  = "document_symbols"
	ToolWorkspaceSymbols = "workspace_symbols"
	ToolDiagnostics      = "diagnostics"
	ToolSignatureHelp    = "signature_help"
	ToolCallHierarchy    = "call_hierarchy"
	ToolTypeHierarchy    = "type_hierarchy"
	ToolCompletion       = "completion"
)

// AllTools lists the vocabulary in its canonical order.
var AllTools = []string{ToolHover, ToolDefinition, ToolDeclaration, ToolTypeDefinition,
	ToolImplementation, ToolReferences, ToolDocumentSymbols, ToolWorkspaceSymbols, ToolDiagnostics,
	ToolSignatureHelp, ToolCallHierarchy, ToolTypeHierarchy, ToolCompletion}

// toolSources ties each tool to its static capability and to the method a
// server names when it registers the capability dynamically.
var toolSources = []struct {
	tool, method string
	static       func(*ServerCapabilities) Provider
}{
	{ToolHover, "textDocument/hover", func(c *ServerCapabilities) Provider { return c.HoverProvider }},
	{ToolDefinition, "textDocument/definition", func(c *ServerCapabilities) Provider { return c.DefinitionProvider }},
	{ToolDeclaration, "textDocument/declaration", func(c *ServerCapabilities) Provider { return c.DeclarationProvider }},
	{ToolTypeDefinition, "textDocument/typeDefinition", func(c *ServerCapabilities) Provider { return c.TypeDefinitionProvider }},
	{ToolImplementation, "textDocument/implementation", func(c *ServerCapabilities) Provider { return c.ImplementationProvider }},
	{ToolReferences, "textDocument/references", func(c *ServerCapabilities) Provider { return c.ReferencesProvider }},
	{ToolDocumentSymbols, "textDocument/documentSymbol", func(c *ServerCapabilities) Provider { return c.DocumentSymbolProvider }},
	{ToolWorkspaceSymbols, "workspace/symbol", func(c *ServerCapabilities) Provider { return c.WorkspaceSymbolProvider }},
	// Diagnostics is always available: a server without diagnosticProvider
	// still publishes, and the client declares publishDiagnostics support.
	{ToolDiagnostics, "textDocument/diagnostic", func(*ServerCapabilities) Provider { return Provider{Enabled: true} }},
	{ToolSignatureHelp, "textDocument/signatureHelp", func(c *ServerCapabilities) Provider { return c.SignatureHelpProvider }},
	{ToolCallHierarchy, "textDocument/prepareCallHierarchy", func(c *ServerCapabilities) Provider { return c.CallHierarchyProvider }},
	{ToolTypeHierarchy, "textDocument/prepareTypeHierarchy", func(c *ServerCapabilities) Provider { return c.TypeHierarchyProvider }},
	{ToolCompletion, "textDocument/completion", func(c *ServerCapabilities) Provider { return c.CompletionProvider }},
}

// ErrCapabilityUnavailable is returned, without asking the server, by a
// method whose capability the server did not negotiate.
var ErrCapabilityUnavailable = errors.New("lsp: capability not negotiated")

// Limits bound what the client keeps from a server. Zero fields take the
// defaults shown.
type Limits struct {
	MaxItems             int // per list answer (locations, symbols, completions, calls …): 10000
	MaxMarkdownBytes     int // hover markdown: 1 MiB
	MaxTextBytes         int // one label, detail, message or documentation string: 64 KiB
	MaxDiagnosticsPerURI int // published diagnostics kept per document: 1000
	MaxDiagnosticURIs    int // documents with published diagnostics kept: 2000
	MaxDiagnosticBytes   int // published diagnostics kept for all documents, by estimated size (publishedSize): 16 MiB
	// MaxDocumentDiagnosticBytes is one document's share of
	// MaxDiagnosticBytes (a quarter, and never more than it): a file the
	// server finds thousands of long problems in is cut to its share
	// rather than push every other document's diagnostics out.
	MaxDocumentDiagnosticBytes int
	MaxLogMessages             int           // window/logMessage ring: 256
	MaxOpenDocuments           int           // documents kept open; the least recently used is closed: 256
	MaxRegistrations           int           // dynamic registrations tracked: 256
	MaxProgressTokens          int           // concurrent $/progress tokens tracked: 256
	DiagnosticsWait            time.Duration // publish fallback wait: 10s
	// DiagnosticsQuiet is how long a server must have been silent on a
	// document (no publication, no work-done progress) before its last
	// publication counts as settled: servers publish in passes (gopls a
	// type-check pass, then its analyzers a diagnosticsDelay later;
	// typescript-language-server syntax, semantic, then suggestion
	// diagnostics), each under the same version. 1.5s, and at most half of
	// the wait.
	DiagnosticsQuiet time.Duration
}

func (l Limits) withDefaults() Limits {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&l.MaxItems, 10000)
	def(&l.MaxMarkdownBytes, 1<<20)
	def(&l.MaxTextBytes, 64<<10)
	def(&l.MaxDiagnosticsPerURI, 1000)
	def(&l.MaxDiagnosticURIs, 2000)
	def(&l.MaxDiagnosticBytes, 16<<20)
	def(&l.MaxDocumentDiagnosticBytes, l.MaxDiagnosticBytes/4)
	l.MaxDocumentDiagnosticBytes = min(l.MaxDocumentDiagnosticBytes, l.MaxDiagnosticBytes)
	def(&l.MaxLogMessages, 256)
	def(&l.MaxOpenDocuments, 256)
	def(&l.MaxRegistrations, 256)
	def(&l.MaxProgressTokens, 256)
	if l.DiagnosticsWait <= 0 {
		l.DiagnosticsWait = 10 * time.Second
	}
	if l.DiagnosticsQuiet <= 0 {
		l.DiagnosticsQuiet = 1500 * time.Millisecond
	}
	return l
}

// Options configure a Client.
type Options struct {
	// Root is the absolute path of the workspace root; it becomes rootUri
	// and the single workspace folder.
	Root string
	// ClientName and ClientVersion go into clientInfo.
	ClientName    string
	ClientVersion string
	// InitializationOptions is sent verbatim; it must be JSON when set.
	InitializationOptions json.RawMessage
	// Settings answers workspace/configuration: the value at each requested
	// section path ("a.b"), the whole object for an empty section, null
	// when absent or when Settings is unset.
	Settings json.RawMessage
	// Folders are more workspace folders below Root, each with its own
	// settings: a request scoped (scopeUri) to a folder, or to a file in
	// it, is answered from the innermost folder's Settings instead.
	Folders []Folder
	// RequestTimeout bounds every request, on top of the caller's context;
	// zero means only the context bounds it.
	RequestTimeout time.Duration
	// MaxFrameSize bounds one frame from the server (jsonrpc default if 0).
	MaxFrameSize int
	Limits       Limits
	Logger       *slog.Logger
	// LoadSigns say which of the server's words mean it could not load
	// the project; window/showMessage errors always do.
	LoadSigns LoadSigns
}

// LoadSigns recognise, in what a server says, that it could not load the
// project (a build-system or project error): each returns the problem's
// message and true. A language's signs live with its other knowledge
// (package readiness); the client itself knows only that a server that
// shows the user an error is telling it something is wrong.
type LoadSigns struct {
	// Diagnostic is asked about every published or pulled diagnostic.
	Diagnostic func(Diagnostic) (string, bool)
	// Expected, when set, asks the server itself how many diagnostics
	// of one kind it has for an open document, so that a published
	// answer is not taken for settled before it carries them (see
	// ExpectedDiagnostics).
	Expected *ExpectedDiagnostics
	// File is asked first about every published diagnostic: a problem it
	// recognises concerns only the document it is on (gopls's "No
	// packages found for open file", a file its build tags exclude) and
	// qualifies answers about that document, not the workspace
	// (Client.FileProblems).
	File func(Diagnostic) (string, bool)
	// Log is asked about every window/logMessage (type 1 error … 4 log).
	Log func(typ int, message string) (string, bool)
	// Progress is asked about every work-done progress begin (title and
	// message). A report it recognises is a problem, not work in flight:
	// it never counts as busy.
	Progress func(title, message string) (string, bool)
	// Indexing says whether a work-done progress of this title means the
	// server's answers are still incomplete while it is in flight
	// (clangd's background index: references and workspace symbols come
	// from it). An answer given meanwhile is partial (Client.Indexing).
	Indexing func(title string) bool
	// IndexInBackground says the Indexing progress is background work
	// after the load (clangd's index): the first-load wait (WaitQuiet)
	// and the diagnostics window do not wait for it, and only answers
	// that come from the index wait for it (query). Otherwise
	// (rust-analyzer's project loading) it is the load itself.
	IndexInBackground bool
	// Background says a work-done progress of this title is work after
	// the load that changes no answer (rust-analyzer's cache priming,
	// titled "Indexing": what it primes it computes on demand): it is
	// no work in flight for anything (the first-load wait, the
	// diagnostics window, Busy), and its end restarts no quiet.
	Background func(title string) bool
	// BackgroundAfterLoad says the server begins its Background work only
	// once its load is done (rust-analyzer primes its caches when it
	// becomes quiescent: no fetch, no crate graph, no file scan in
	// flight): such a begin, with no other work begun or ended since,
	// ends the first-load wait at once instead of after a quiet window.
	BackgroundAfterLoad bool
	// AnchorPublishes says the server publishes an open document's
	// diagnostics once it has parsed it, whatever it found (clangd: an
	// empty list for a clean file, once per open), and that what its load
	// found is on that publication (clangd's load problems are the
	// anchor's, pp_file_not_found): the first-load wait ends
	// diagnosisSettle after the anchor's (MarkAnchor) first publication,
	// not after a quiet window.
	AnchorPublishes bool
	// AnchorCounts, when set, ask the server how many diagnostics it has
	// for the anchor document once it is open, one kind each (for
	// typescript-language-server, tsserver's syntactic, semantic and
	// suggestion diagnostics, each computed synchronously): the server
	// republishes the union of its passes, so the anchor's first
	// publication carrying all of them is its last, and ends the
	// first-load wait diagnosisSettle later, not after a quiet window.
	// A count the server does not give leaves the quiet to decide.
	AnchorCounts []*ExpectedDiagnostics
	// Diagnosis, when set, says the server reports each diagnosis it runs
	// as work-done progress once asked to at initialize, and that the
	// report of its first diagnosis of the workspace carries what its load
	// found: the first-load wait (WaitQuiet) then ends with that report,
	// not after a quiet window. The reports are not work in flight for
	// anything else (a diagnostics request, Busy).
	Diagnosis *DiagnosisReports
	// IndexLog, when set, says the server indexes the workspace as soon
	// as it is initialized and reports the end in its log alone
	// (bash-language-server's background analysis). From the start until
	// a log line IndexLog accepts, the server counts as working under
	// IndexLog.Title exactly as if that were a work-done progress in
	// flight whose title Indexing accepts.
	IndexLog *IndexLog
}

// IndexLog describes an index whose end only the server's log reports.
type IndexLog struct {
	// Title names the work in answers given meanwhile.
	Title string
	// Done says a window/logMessage line reports the index finished
	// (however it finished: a failure is for Log to report).
	Done func(message string) bool
}

// logIndexKey is IndexLog's entry among the progress tokens: the keys of
// real tokens are their JSON text (a quoted string or a number), which a
// bare word can never be.
const logIndexKey = "log-index"

// DiagnosisReports describe a server's work-done progress reports of its
// own diagnoses (gopls's verboseWorkDoneProgress): each begins when a
// diagnosis starts and ends once what it found has been published.
type DiagnosisReports struct {
	// InitializationOptions ask the server for the reports; the server's
	// runtime merges them over the reviewed entry's.
	InitializationOptions json.RawMessage
	// Is says a progress title is one of the reports.
	Is func(title string) bool
	// Workspace says a report diagnoses the whole workspace: the first
	// load's, and each change's (gopls: an open's, which checks the
	// changed files first, then every package). One that ends while no
	// other is in flight has published what the workspace holds. One that
	// another began before it ended was cut short: gopls begins a change's
	// report before it replaces the snapshot, which cancels the diagnosis
	// of the old one. A document opened before the first load's report
	// ends therefore cuts it short, so such a server gets no anchor
	// document (Client.ReportsLoad).
	Workspace func(title string) bool
}

// InitializationOptions are what the signs need the server told at
// initialize (DiagnosisReports.InitializationOptions), nil for none.
func (s LoadSigns) InitializationOptions() json.RawMessage {
	if s.Diagnosis == nil {
		return nil
	}
	return s.Diagnosis.InitializationOptions
}

// diagnosisSettle is how long WaitQuiet still waits once the initial
// diagnosis report has ended: the server writes its end from a goroutine
// of its own after the publications, and a little margin costs nothing
// beside the quiet window it replaces.
const diagnosisSettle = 100 * time.Millisecond

// ExpectedDiagnostics is a server's own word on how many diagnostics of
// one kind it computed for a document: a workspace/executeCommand the
// server answers synchronously once it has checked the document (for
// typescript-language-server, tsserver's suggestionDiagnosticsSync
// through typescript.tsserverRequest). Its publications come in passes
// under one version, the last kind last and only once the server is free
// of other requests; a quiet window alone can close before it.
type ExpectedDiagnostics struct {
	// Command must be among the server's executeCommandProvider commands.
	Command string
	// Arguments are the command's arguments for the document u.
	Arguments func(u DocumentURI) []any
	// Count reads the command's result: how many, and whether the
	// result was understood. It must be bounded (the result is the
	// server's).
	Count func(result json.RawMessage) (int, bool)
	// Publishes says the command publishes the document's diagnostics
	// before it answers (gopls's diagnose_files): once it has answered,
	// what it computed is in, and the quiet window runs from the last
	// publication only, not from the end of the command's own progress
	// (gopls still publishes a file no package holds apart, afterwards).
	// There is no count: Count only says whether the answer was
	// understood.
	Publishes bool
	// Match says whether a published diagnostic is of that kind (not
	// asked when Publishes).
	Match func(Diagnostic) bool
}

// Problem is one load problem a server reported.
type Problem struct {
	Message string
	// URI is the document a diagnostic was about; empty for messages.
	URI DocumentURI
}

// maxProblems bounds the load problems kept per client; further ones are
// only counted.
const maxProblems = 16

// Folder is one more workspace folder. Dir must be Root or below it.
type Folder struct {
	Dir      string
	Settings json.RawMessage
}

type folder struct {
	uri      DocumentURI
	name     string
	settings any
}

// Client is an initialized connection to one language server. It is safe
// for concurrent use.
type Client struct {
	conn     *jsonrpc.Conn
	opts     Options
	lim      Limits
	log      *slog.Logger
	rootURI  DocumentURI
	settings any
	// folders is the root folder first, then Options.Folders.
	folders []folder

	// Set by initialize, read-only afterwards.
	info      ServerInfo
	caps      ServerCapabilities
	capsCanon json.RawMessage

	docMu sync.Mutex // serialises didOpen/didClose so their order on the wire matches the bookkeeping

	mu            sync.Mutex
	registrations map[string]string // registration id → method
	fingerprint   string            // CapabilityFingerprint, cached; "" after a change
	tools         []string          // toolsLocked, cached (every query asks); nil after a change
	progress      map[string]struct{}
	indexing      map[string]string   // tokens in flight whose title LoadSigns.Indexing accepts → title
	progressEnd   time.Time           // when the last work-done progress ended
	background    map[string]struct{} // tokens in flight whose title LoadSigns.Background accepts
	// quiescent: Background work began (LoadSigns.BackgroundAfterLoad)
	// and no other work has begun or ended since.
	quiescent  bool
	anchor     DocumentURI // the document the first-load wait watches (MarkAnchor)
	anchorWant int         // the anchor's diagnostics the server counted (CountAnchor); -1 unknown
	anchorAt   time.Time   // when the anchor was marked
	// LoadSigns.Diagnosis reports: in flight (token → title; one over
	// MaxProgressTokens is not tracked, so its end ends nothing), when the
	// last ended, and whether one of the whole workspace has run to its
	// end (checked: the tree never changes, so once is for good).
	diagnosing   map[string]string
	diagnosisEnd time.Time
	checked      bool
	logs         []LogMessage
	problems     []Problem
	moreProblems int
	lastPub      time.Time // when anything was last published
	connected    time.Time
	diags        map[DocumentURI]*published
	pubSeq       uint64
	docs         map[DocumentURI]*document
	useClock     uint64
	changed      chan struct{} // closed and replaced whenever diagnostics or progress change

	// The entries of diags from the least recently published (oldestPub)
	// to the most (newestPub), and the sum of their sizes: eviction takes
	// the oldest in constant time, however many one publication evicts.
	oldestPub, newestPub *published
	diagBytes            int
}

// published is one document's last publication. Its diags are never
// changed once it is in Client.diags (readers copy them out after
// unlocking); a new publication replaces the whole entry.
type published struct {
	key     DocumentURI
	diags   List[Diagnostic]
	version *int32
	seq     uint64
	at      time.Time
	size    int // publishedSize, counted in Client.diagBytes
	// older and newer link the entries in publication order; c.mu.
	older, newer *published
}

type document struct {
	version int32
	openSeq uint64 // pubSeq when the document was opened
	lastUse uint64
}

// Connect starts a JSON-RPC connection over rwc, runs initialize and sends
// initialized. On failure rwc is closed. ctx bounds the handshake;
// Options.RequestTimeout applies to the requests after it.
func Connect(ctx context.Context, rwc io.ReadWriteCloser, opts Options) (*Client, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.ClientName == "" {
		opts.ClientName = "hanzo-lsp-daemon"
	}
	c := &Client{
		opts:          opts,
		lim:           opts.Limits.withDefaults(),
		log:           opts.Logger,
		rootURI:       FileURI(opts.Root),
		registrations: map[string]string{},
		progress:      map[string]struct{}{},
		indexing:      map[string]string{},
		background:    map[string]struct{}{},
		diagnosing:    map[string]string{},
		diags:         map[DocumentURI]*published{},
		docs:          map[DocumentURI]*document{},
		changed:       make(chan struct{}),
		connected:     time.Now(),
	}
	if il := opts.LoadSigns.IndexLog; il != nil {
		c.progress[logIndexKey] = struct{}{}
		c.indexing[logIndexKey] = il.Title
	}
	var err error
	if c.settings, err = decodeSettings(opts.Settings); err != nil {
		_ = rwc.Close()
		return nil, fmt.Errorf("initialize: settings: %w", err)
	}
	c.folders = []folder{{uri: c.rootURI, name: filepath.Base(opts.Root), settings: c.settings}}
	for _, f := range opts.Folders {
		u := FileURI(f.Dir)
		if u == c.rootURI {
			// The root's own settings.
			if c.folders[0].settings, err = decodeSettings(f.Settings); err != nil {
				_ = rwc.Close()
				return nil, fmt.Errorf("initialize: folder settings: %w", err)
			}
			continue
		}
		if !strings.HasPrefix(string(u), string(c.rootURI)+"/") {
			_ = rwc.Close()
			return nil, errors.New("initialize: a workspace folder is outside the root")
		}
		st, err := decodeSettings(f.Settings)
		if err != nil {
			_ = rwc.Close()
			return nil, fmt.Errorf("initialize: folder settings: %w", err)
		}
		c.folders = append(c.folders, folder{uri: u, name: filepath.Base(f.Dir), settings: st})
	}
	if len(opts.InitializationOptions) > 0 && !json.Valid(opts.InitializationOptions) {
		_ = rwc.Close()
		return nil, errors.New("initialize: initialization options are not JSON")
	}
	c.conn = jsonrpc.NewConn(rwc, jsonrpc.Options{MaxFrameSize: opts.MaxFrameSize, Handler: c.handle, Logger: opts.Logger})
	if err := c.initialize(ctx); err != nil {
		_ = c.conn.Close()
		return nil, fmt.Errorf("initialize: %w", err)
	}
	return c, nil
}

// initialize is bounded by ctx alone: a server's start (a cold JVM, a first
// load) may legitimately take longer than one request.
func (c *Client) initialize(ctx context.Context) error {
	params := map[string]any{
		"processId":        nil,
		"clientInfo":       map[string]string{"name": c.opts.ClientName, "version": c.opts.ClientVersion},
		"rootUri":          c.rootURI,
		"workspaceFolders": c.workspaceFolders(),
		"capabilities":     clientCapabilities(),
		"trace":            "off",
	}
	if len(c.opts.InitializationOptions) > 0 {
		params["initializationOptions"] = c.opts.InitializationOptions
	}
	var res struct {
		Capabilities json.RawMessage `json:"capabilities"`
		ServerInfo   json.RawMessage `json:"serverInfo"`
	}
	if err := c.conn.Call(ctx, "initialize", params, &res); err != nil {
		return err
	}
	raw := bytes.TrimSpace(res.Capabilities)
	if len(raw) == 0 || raw[0] != '{' {
		return errors.New("server sent no capabilities object")
	}
	c.caps = parseCapabilities(raw)
	if enc := c.caps.PositionEncoding; enc != "" && enc != "utf-16" {
		return fmt.Errorf("server chose position encoding %q; only utf-16 was offered", clipName(enc))
	}
	canon, err := canonicalJSON(raw)
	if err != nil {
		return fmt.Errorf("capabilities: %w", err)
	}
	c.capsCanon = canon
	c.info = parseServerInfo(res.ServerInfo)
	return c.conn.Notify(ctx, "initialized", struct{}{})
}

// clientCapabilities declares what the daemon uses and nothing more.
// dynamicRegistration is declared for the tool features so that servers
// which only register them dynamically still become usable.
func clientCapabilities() map[string]any {
	symbolKinds := make([]int, 26)
	for i := range symbolKinds {
		symbolKinds[i] = i + 1
	}
	completionKinds := make([]int, 25)
	for i := range completionKinds {
		completionKinds[i] = i + 1
	}
	dyn := map[string]any{"dynamicRegistration": true}
	links := map[string]any{"dynamicRegistration": true, "linkSupport": true}
	return map[string]any{
		"general": map[string]any{"positionEncodings": []string{"utf-16"}},
		"workspace": map[string]any{
			"configuration":    true,
			"workspaceFolders": true,
			"symbol": map[string]any{
				"dynamicRegistration": true,
				"symbolKind":          map[string]any{"valueSet": symbolKinds},
			},
		},
		"window": map[string]any{"workDoneProgress": true},
		"textDocument": map[string]any{
			"synchronization": map[string]any{"dynamicRegistration": false, "didSave": false},
			"hover": map[string]any{
				"dynamicRegistration": true,
				"contentFormat":       []string{"markdown"},
			},
			"definition":     links,
			"declaration":    links,
			"typeDefinition": links,
			"implementation": links,
			"references":     dyn,
			"documentSymbol": map[string]any{
				"dynamicRegistration":               true,
				"hierarchicalDocumentSymbolSupport": true,
				"symbolKind":                        map[string]any{"valueSet": symbolKinds},
			},
			"diagnostic": map[string]any{"dynamicRegistration": true, "relatedDocumentSupport": false},
			"publishDiagnostics": map[string]any{
				"relatedInformation": false,
				"versionSupport":     true,
			},
			"completion": map[string]any{
				"dynamicRegistration": true,
				"completionItem": map[string]any{
					"snippetSupport":      false,
					"documentationFormat": []string{"markdown", "plaintext"},
					"deprecatedSupport":   true,
				},
				"completionItemKind": map[string]any{"valueSet": completionKinds},
				"contextSupport":     true,
			},
			"signatureHelp": map[string]any{
				"dynamicRegistration": true,
				"signatureInformation": map[string]any{
					"documentationFormat":    []string{"markdown", "plaintext"},
					"parameterInformation":   map[string]any{"labelOffsetSupport": true},
					"activeParameterSupport": true,
				},
			},
			"callHierarchy": dyn,
			"typeHierarchy": dyn,
		},
	}
}

// parseCapabilities reads each known provider on its own, so one odd field
// disables that capability instead of failing initialize.
func parseCapabilities(raw json.RawMessage) ServerCapabilities {
	caps := ServerCapabilities{Raw: raw}
	var fields map[string]json.RawMessage
	if json.Unmarshal(raw, &fields) != nil {
		return caps
	}
	_ = json.Unmarshal(fields["positionEncoding"], &caps.PositionEncoding)
	for name, p := range map[string]*Provider{
		"hoverProvider":           &caps.HoverProvider,
		"definitionProvider":      &caps.DefinitionProvider,
		"declarationProvider":     &caps.DeclarationProvider,
		"typeDefinitionProvider":  &caps.TypeDefinitionProvider,
		"implementationProvider":  &caps.ImplementationProvider,
		"referencesProvider":      &caps.ReferencesProvider,
		"documentSymbolProvider":  &caps.DocumentSymbolProvider,
		"workspaceSymbolProvider": &caps.WorkspaceSymbolProvider,
		"diagnosticProvider":      &caps.DiagnosticProvider,
		"completionProvider":      &caps.CompletionProvider,
		"signatureHelpProvider":   &caps.SignatureHelpProvider,
		"callHierarchyProvider":   &caps.CallHierarchyProvider,
		"typeHierarchyProvider":   &caps.TypeHierarchyProvider,
	} {
		if v, ok := fields[name]; ok {
			_ = p.UnmarshalJSON(bytes.TrimSpace(v))
		}
	}
	return caps
}

// parseServerInfo reads serverInfo. gopls puts a JSON document in version;
// its "Version" field is the version proper.
func parseServerInfo(raw json.RawMessage) ServerInfo {
	var w struct {
		Name    string `json:"name"`
		Version string `json:"version"`
	}
	if isNull(raw) || json.Unmarshal(raw, &w) != nil {
		return ServerInfo{}
	}
	version := strings.TrimSpace(w.Version)
	if strings.HasPrefix(version, "{") {
		var blob struct {
			Version string `json:"Version"`
		}
		if json.Unmarshal([]byte(version), &blob) == nil {
			version = blob.Version
		}
	}
	return ServerInfo{Name: clipName(w.Name), Version: clipName(version)}
}

// clipName keeps server-supplied names short and printable.
func clipName(s string) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return -1
		}
		return r
	}, s)
	s, _ = clipText(s, 128)
	return s
}

// canonicalJSON re-encodes raw with sorted object keys and no insignificant
// whitespace, keeping numbers as written.
func canonicalJSON(raw json.RawMessage) (json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return json.Marshal(v)
}

// Info is what the server said about itself.
func (c *Client) Info() ServerInfo { return c.info }

// Capabilities are the capabilities from the initialize answer.
func (c *Client) Capabilities() ServerCapabilities { return c.caps }

// Tools returns the negotiated tools in canonical order: static
// capabilities plus live dynamic registrations.
func (c *Client) Tools() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.toolsLocked()
}

func (c *Client) toolsLocked() []string {
	if c.tools != nil {
		return c.tools
	}
	registered := map[string]bool{}
	for _, m := range c.registrations {
		registered[m] = true
	}
	var tools []string
	for _, s := range toolSources {
		if s.static(&c.caps).Enabled || registered[s.method] {
			tools = append(tools, s.tool)
		}
	}
	// Clipped: a caller's append copies rather than writing into the
	// cache. An empty list is cached too.
	c.tools = slices.Clip(append(make([]string, 0, len(tools)), tools...))
	return c.tools
}

// Has reports whether tool is negotiated.
func (c *Client) Has(tool string) bool {
	return slices.Contains(c.Tools(), tool)
}

// CapabilityFingerprint is the hex SHA-256 of a canonical encoding of the
// initialize capabilities, the live dynamic registrations and the tools. It
// changes exactly when what the server can do changes.
func (c *Client) CapabilityFingerprint() string {
	c.mu.Lock()
	if fp := c.fingerprint; fp != "" {
		c.mu.Unlock()
		return fp
	}
	methods := make([]string, 0, len(c.registrations))
	for _, m := range c.registrations {
		methods = append(methods, m)
	}
	tools := c.toolsLocked()
	c.mu.Unlock()
	slices.Sort(methods)
	b, _ := json.Marshal(struct {
		Capabilities     json.RawMessage `json:"capabilities"`
		PositionEncoding string          `json:"positionEncoding"`
		Registrations    []string        `json:"registrations"`
		Tools            []string        `json:"tools"`
	}{c.capsCanon, "utf-16", methods, tools})
	sum := sha256.Sum256(b)
	fp := hex.EncodeToString(sum[:])
	c.mu.Lock()
	if len(c.registrations) == len(methods) {
		// Cache it unless a registration changed meanwhile (answers on
		// every request carry it; it changes only with registrations).
		c.fingerprint = fp
	}
	c.mu.Unlock()
	return fp
}

// Busy reports whether the server has work-done progress in flight (for
// gopls: loading the workspace).
func (c *Client) Busy() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.progress) > 0
}

// Indexing reports a work-done progress in flight that the language's
// signs say leaves answers incomplete (LoadSigns.Indexing), by its title.
func (c *Client) Indexing() (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, t := range c.indexing {
		return t, true
	}
	return "", false
}

// IndexInBackground reports LoadSigns.IndexInBackground.
func (c *Client) IndexInBackground() bool { return c.opts.LoadSigns.IndexInBackground }

// foregroundLocked is how many work-done progresses in flight are the
// server's load or other work, not its background index.
func (c *Client) foregroundLocked() int {
	if c.opts.LoadSigns.IndexInBackground {
		return len(c.progress) - len(c.indexing)
	}
	return len(c.progress)
}

// WaitIndexed waits until no indexing progress (Indexing) is in flight,
// at most max.
func (c *Client) WaitIndexed(ctx context.Context, max time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, max)
	defer cancel()
	for {
		c.mu.Lock()
		busy := len(c.indexing) > 0
		ch := c.changed
		c.mu.Unlock()
		if !busy {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-c.conn.Done():
			return c.conn.Err()
		}
	}
}

// WaitIdle waits until no work-done progress is in flight.
func (c *Client) WaitIdle(ctx context.Context) error {
	for {
		c.mu.Lock()
		idle := len(c.progress) == 0
		ch := c.changed
		c.mu.Unlock()
		if idle {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-c.conn.Done():
			return c.conn.Err()
		}
	}
}

// Logs returns the retained window/logMessage and window/showMessage
// messages, oldest first.
func (c *Client) Logs() []LogMessage {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.logs)
}

// Done is closed when the connection to the server has stopped.
func (c *Client) Done() <-chan struct{} { return c.conn.Done() }

// Err says why the connection stopped (nil while it runs).
func (c *Client) Err() error { return c.conn.Err() }

// Close drops the connection without the shutdown handshake.
func (c *Client) Close() error { return c.conn.Close() }

// Shutdown sends shutdown and then exit. The server is expected to exit;
// stopping the process is the caller's job.
func (c *Client) Shutdown(ctx context.Context) error {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	err := c.conn.Call(ctx, "shutdown", nil, nil)
	if nerr := c.conn.Notify(ctx, "exit", nil); err == nil {
		err = nerr
	}
	if err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	return nil
}

// bound applies the request timeout on top of ctx.
func (c *Client) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if c.opts.RequestTimeout > 0 {
		return context.WithTimeout(ctx, c.opts.RequestTimeout)
	}
	return context.WithCancel(ctx)
}

// signal wakes everyone waiting on a state change; c.mu must be held.
func (c *Client) signal() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// handle answers the server. It runs on the connection's reader goroutine:
// it only touches in-memory state, never waits.
func (c *Client) handle(_ context.Context, req *jsonrpc.Request) (any, error) {
	switch req.Method {
	case "workspace/configuration":
		return c.configuration(req.Params), nil
	case "window/workDoneProgress/create":
		return nil, nil
	case "workspace/diagnostic/refresh", "workspace/semanticTokens/refresh", "workspace/inlayHint/refresh",
		"workspace/codeLens/refresh", "workspace/inlineValue/refresh", "workspace/foldingRange/refresh":
		// Nothing is cached between queries: each pulls afresh. A server
		// that asks anyway (basedpyright asks for diagnostics whatever the
		// client's refreshSupport) gets success, not an error it may not
		// handle (basedpyright 1.40.1 exits on it).
		return nil, nil
	case "client/registerCapability":
		c.register(req.Params)
		return nil, nil
	case "client/unregisterCapability":
		c.unregister(req.Params)
		return nil, nil
	case "window/showMessageRequest", "window/showMessage", "window/logMessage":
		c.logMessage(req.Method, req.Params)
		return nil, nil
	case "workspace/workspaceFolders":
		return c.workspaceFolders(), nil
	case "$/progress":
		c.onProgress(req.Params)
		return nil, nil
	case "textDocument/publishDiagnostics":
		c.onPublish(req.Params)
		return nil, nil
	}
	if req.IsNotification() {
		return nil, nil
	}
	return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: "method not supported: " + clipName(req.Method)}
}

func (c *Client) configuration(params json.RawMessage) []any {
	var p struct {
		Items json.RawMessage `json:"items"`
	}
	_ = json.Unmarshal(params, &p)
	var out []any
	_, _ = eachElement(p.Items, 1024, func(e json.RawMessage) bool {
		var item struct {
			ScopeURI DocumentURI `json:"scopeUri"`
			Section  string      `json:"section"`
		}
		_ = json.Unmarshal(e, &item)
		out = append(out, lookupSection(c.scopeSettings(item.ScopeURI), item.Section))
		return true
	})
	if out == nil {
		out = []any{}
	}
	return out
}

func decodeSettings(raw json.RawMessage) (any, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	var v any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return v, nil
}

func (c *Client) workspaceFolders() []map[string]any {
	out := make([]map[string]any, len(c.folders))
	for i, f := range c.folders {
		out[i] = map[string]any{"uri": f.uri, "name": f.name}
	}
	return out
}

// scopeSettings are the settings of the innermost folder holding scope
// (no scope: the root's).
func (c *Client) scopeSettings(scope DocumentURI) any {
	best := c.folders[0]
	for _, f := range c.folders[1:] {
		if (scope == f.uri || strings.HasPrefix(string(scope), string(f.uri)+"/")) && len(f.uri) > len(best.uri) {
			best = f
		}
	}
	return best.settings
}

func lookupSection(settings any, section string) any {
	if section == "" {
		return settings
	}
	v := settings
	for _, key := range strings.Split(section, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		if v, ok = m[key]; !ok {
			return nil
		}
	}
	return v
}

// maxRegistrationID bounds a dynamic registration's id.
const maxRegistrationID = 256

func (c *Client) register(params json.RawMessage) {
	var p struct {
		Registrations json.RawMessage `json:"registrations"`
	}
	_ = json.Unmarshal(params, &p)
	c.mu.Lock()
	defer c.mu.Unlock()
	_, _ = eachElement(p.Registrations, c.lim.MaxRegistrations, func(e json.RawMessage) bool {
		var r struct {
			ID     string `json:"id"`
			Method string `json:"method"`
		}
		if json.Unmarshal(e, &r) != nil || r.ID == "" || r.Method == "" {
			return true
		}
		if len(r.ID) > maxRegistrationID {
			// Kept as a map key for the server's life: bounded, as a
			// progress token is (256 ids of a frame each held gigabytes).
			c.log.Warn("lsp: a dynamic registration's id is too long; ignoring", "method", clipName(r.Method), "bytes", len(r.ID))
			return true
		}
		if _, ok := c.registrations[r.ID]; !ok && len(c.registrations) >= c.lim.MaxRegistrations {
			c.log.Warn("lsp: too many dynamic registrations; ignoring", "method", clipName(r.Method))
			return false
		}
		c.registrations[r.ID] = clipName(r.Method)
		c.fingerprint, c.tools = "", nil
		return true
	})
}

func (c *Client) unregister(params json.RawMessage) {
	// The protocol's field really is spelled "unregisterations".
	var p struct {
		Unregisterations json.RawMessage `json:"unregisterations"`
	}
	_ = json.Unmarshal(params, &p)
	c.mu.Lock()
	defer c.mu.Unlock()
	_, _ = eachElement(p.Unregisterations, c.lim.MaxRegistrations, func(e json.RawMessage) bool {
		var r struct {
			ID string `json:"id"`
		}
		if json.Unmarshal(e, &r) == nil {
			delete(c.registrations, r.ID)
			c.fingerprint, c.tools = "", nil
		}
		return true
	})
}

func (c *Client) logMessage(method string, params json.RawMessage) {
	var p struct {
		Type    int    `json:"type"`
		Message string `json:"message"`
	}
	if json.Unmarshal(params, &p) != nil {
		return
	}
	msg, _ := clipText(p.Message, 4<<10)
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.logs) >= c.lim.MaxLogMessages {
		n := copy(c.logs, c.logs[1:])
		c.logs = c.logs[:n]
	}
	c.logs = append(c.logs, LogMessage{Type: p.Type, Message: msg})
	if problem, ok := c.logProblem(method, p.Type, msg); ok {
		c.addProblemLocked(Problem{Message: problem})
	}
	if il := c.opts.LoadSigns.IndexLog; il != nil && method == "window/logMessage" {
		if _, ok := c.indexing[logIndexKey]; ok && il.Done(msg) {
			c.endProgressLocked(logIndexKey)
			c.signal()
		}
	}
}

// logProblem says whether a window message reports a load problem: a
// shown error always does (LSP MessageType 1), a log line when the
// language's signs say so.
func (c *Client) logProblem(method string, typ int, msg string) (string, bool) {
	if c.opts.LoadSigns.Log != nil {
		if m, ok := c.opts.LoadSigns.Log(typ, msg); ok {
			return m, true
		}
	}
	if (method == "window/showMessage" || method == "window/showMessageRequest") && typ == 1 {
		return strings.TrimSpace(msg), strings.TrimSpace(msg) != ""
	}
	return "", false
}

// addProblemLocked keeps p unless a problem with its message is known;
// c.mu must be held.
func (c *Client) addProblemLocked(p Problem) {
	p.Message, _ = clipText(p.Message, 1<<10)
	for _, q := range c.problems {
		if q.Message == p.Message {
			return
		}
	}
	if len(c.problems) >= maxProblems {
		c.moreProblems++
		return
	}
	c.problems = append(c.problems, p)
	c.signal()
}

// diagnosticProblemsLocked records the load problems among diagnostics;
// c.mu must be held.
func (c *Client) diagnosticProblemsLocked(u DocumentURI, items []Diagnostic) {
	if c.opts.LoadSigns.Diagnostic == nil {
		return
	}
	for _, d := range items {
		if file := c.opts.LoadSigns.File; file != nil {
			if _, ok := file(d); ok {
				continue
			}
		}
		if m, ok := c.opts.LoadSigns.Diagnostic(d); ok {
			c.addProblemLocked(Problem{Message: m, URI: u})
		}
	}
}

// FileProblems returns the problems the server's latest diagnostics for u
// say concern u alone (LoadSigns.File), at most maxProblems: that the
// server did not load the document, and why.
func (c *Client) FileProblems(u DocumentURI) []string {
	if c.opts.LoadSigns.File == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.diags[canonicalURI(u)]
	if !ok {
		return nil
	}
	var out []string
	for _, d := range e.diags.Items {
		if m, ok := c.opts.LoadSigns.File(d); ok && !slices.Contains(out, m) && len(out) < maxProblems {
			m, _ = clipText(m, 1<<10)
			out = append(out, m)
		}
	}
	return out
}

// LoadProblems returns the load problems the server reported, oldest
// first, and how many more there were beyond the bound. They stay for the
// server's life: a tree never changes under its commit, so what failed to
// load keeps failing.
func (c *Client) LoadProblems() ([]Problem, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.problems), c.moreProblems
}

// WaitQuiet waits until the server has had no work-done progress in flight
// and has published nothing for quiet (counted from the connection, the
// last publication and the last progress end): its first load is done and
// its first diagnostics are out. A server whose diagnosis of the whole
// workspace (LoadSigns.Diagnosis) has run to its end needs only
// diagnosisSettle of that quiet; until then, what a diagnosis publishes
// does not extend the quiet, which counts from the load's end alone: a
// large workspace's diagnosis (seconds of type checking on aws-sdk-go) is
// not waited for beyond quiet, and the caller can tell (Diagnosed).
func (c *Client) WaitQuiet(ctx context.Context, quiet time.Duration) error {
	return c.waitQuiet(ctx, quiet, false)
}

// WaitLoaded is WaitQuiet for a caller whose question follows at once (an
// implicit prepare): a server whose diagnosis reports follow its load
// (LoadSigns.Diagnosis) is done once its load's work-done progress has
// ended with nothing else in flight, without the diagnosis of the whole
// workspace after it — which the question's own open cuts short anyway,
// and whose absence its answer states (Diagnosed). Any other server is
// waited for as WaitQuiet waits.
func (c *Client) WaitLoaded(ctx context.Context, quiet time.Duration) error {
	return c.waitQuiet(ctx, quiet, c.opts.LoadSigns.Diagnosis != nil)
}

func (c *Client) waitQuiet(ctx context.Context, quiet time.Duration, loadOnly bool) error {
	for {
		c.mu.Lock()
		since := c.connected
		marks := []time.Time{c.progressEnd, c.diagnosisEnd}
		if diagnosing := c.opts.LoadSigns.Diagnosis != nil && !c.checked && len(c.diagnosing) > 0; !diagnosing {
			marks = append(marks, c.lastPub)
		}
		for _, t := range marks {
			if t.After(since) {
				since = t
			}
		}
		if c.diagnosedLocked() {
			quiet = min(quiet, diagnosisSettle)
		}
		rest := quiet - time.Since(since)
		// A server that publishes its anchor once parsed (clangd) is not
		// quiet while the anchor it was given waits to be parsed: no
		// progress covers the parse, which can take longer than the quiet
		// on a loaded machine (CI, 2026-12-07: the wait ended with main.c's
		// missing header unpublished). At most anchorHold: a publication
		// this client cannot keep (past its diagnostics bounds) must not
		// cost every prepare the caller's whole bound.
		if c.anchorPendingLocked() {
			rest = max(rest, anchorHold-time.Since(c.anchorAt))
		}
		busy := c.foregroundLocked() > 0
		loaded := (loadOnly && !c.progressEnd.IsZero()) || c.quiescent
		ch := c.changed
		c.mu.Unlock()
		if (rest <= 0 || loaded) && !busy {
			return nil
		}
		// While work is in flight only its end (a change) can end the
		// wait, whatever the quiet.
		// (A timer nobody references is collected, fired or not.)
		var timeout <-chan time.Time
		if !busy {
			timeout = time.After(rest)
		}
		select {
		case <-ch:
		case <-timeout:
		case <-ctx.Done():
			return ctx.Err()
		case <-c.conn.Done():
			return c.conn.Err()
		}
	}
}

// MarkAnchor names the document opened for the first load (query's
// anchor): with LoadSigns.AnchorPublishes, its first publication ends the
// first-load wait.
func (c *Client) MarkAnchor(uri DocumentURI) {
	c.mu.Lock()
	if u := canonicalURI(uri); u != c.anchor {
		c.anchor, c.anchorWant, c.anchorAt = u, -1, time.Now()
	}
	c.signal()
	c.mu.Unlock()
}

// CountAnchor asks the server, in the background, how many diagnostics
// it has for the anchor it has just been given open
// (LoadSigns.AnchorCounts); what it says is what the first-load wait
// waits to see published. The questions are bounded by the diagnostics
// wait, and the server answers them once it has loaded the project.
func (c *Client) CountAnchor(uri DocumentURI) {
	counts := c.opts.LoadSigns.AnchorCounts
	if len(counts) == 0 {
		return
	}
	u := canonicalURI(uri)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), c.lim.DiagnosticsWait)
		defer cancel()
		total := 0
		for _, e := range counts {
			if !c.offersCommand(e.Command) {
				return
			}
			raw, err := c.request(ctx, "", "workspace/executeCommand", map[string]any{"command": e.Command, "arguments": e.Arguments(u)})
			n, ok := 0, false
			if err == nil {
				n, ok = e.Count(raw)
			}
			if !ok || n < 0 {
				c.log.Debug("lsp: the server did not count the anchor's diagnostics; the quiet window decides", "command", e.Command, "err", err)
				return
			}
			total += n
		}
		c.mu.Lock()
		if c.anchor == u {
			c.anchorWant = total
		}
		c.signal()
		c.mu.Unlock()
	}()
}

// anchorPublishedLocked: the server publishes its anchor's diagnostics
// once parsed (LoadSigns.AnchorPublishes) and has, for the anchor as
// open, or has published for it as many as it counted (CountAnchor);
// c.mu must be held.
func (c *Client) anchorPublishedLocked() bool {
	signs := c.opts.LoadSigns
	if c.anchor == "" || !signs.AnchorPublishes && (len(signs.AnchorCounts) == 0 || c.anchorWant < 0) {
		return false
	}
	p, doc := c.diags[c.anchor], c.docs[c.anchor]
	if p == nil || doc == nil || !publishedForLocked(p, doc) {
		return false
	}
	return signs.AnchorPublishes || p.diags.Truncated || len(p.diags.Items) >= c.anchorWant
}

// anchorHold bounds how long WaitQuiet waits for an anchor's publication
// (LoadSigns.AnchorPublishes) after the anchor was marked: clangd parses a
// file in well under a second here (fmt's, 0.5–0.9 s), several on a loaded
// machine. A variable for tests.
var anchorHold = 10 * time.Second

// anchorPendingLocked: the server publishes its anchor once parsed
// (LoadSigns.AnchorPublishes), has it open, and has not yet published it
// for as open; c.mu must be held.
func (c *Client) anchorPendingLocked() bool {
	return c.opts.LoadSigns.AnchorPublishes && c.anchor != "" && c.docs[c.anchor] != nil && !c.anchorPublishedLocked()
}

// ReportsLoad reports that the server's diagnosis reports say when its
// first load is done (LoadSigns.Diagnosis): it needs no anchor document,
// and one opened before that would cut the report short.
func (c *Client) ReportsLoad() bool { return c.opts.LoadSigns.Diagnosis != nil }

// Diagnosed reports that the server has published what its first load
// found: a diagnosis of the whole workspace has run to its end
// (LoadSigns.Diagnosis.Workspace), or its anchor has been published
// (LoadSigns.AnchorPublishes) with every diagnostic the server counted
// for it (LoadSigns.AnchorCounts). It is what ends WaitQuiet early.
func (c *Client) Diagnosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.diagnosedLocked()
}

func (c *Client) diagnosedLocked() bool {
	return (c.opts.LoadSigns.Diagnosis != nil && c.checked) || c.anchorPublishedLocked()
}

// diagnosingWorkspaceLocked: a report of the whole workspace is in
// flight (LoadSigns.Diagnosis.Workspace); c.mu must be held.
func (c *Client) diagnosingWorkspaceLocked() bool {
	for _, title := range c.diagnosing {
		if c.opts.LoadSigns.Diagnosis.Workspace(title) {
			return true
		}
	}
	return false
}

func (c *Client) onProgress(params json.RawMessage) {
	var p struct {
		Token json.RawMessage `json:"token"`
		Value struct {
			Kind    string `json:"kind"`
			Title   string `json:"title"`
			Message string `json:"message"`
		} `json:"value"`
	}
	if json.Unmarshal(params, &p) != nil || isNull(p.Token) {
		return
	}
	key := string(bytes.TrimSpace(p.Token))
	if len(key) > 256 {
		return
	}
	title, _ := clipText(p.Value.Title, 256)
	if p.Value.Kind == "begin" || p.Value.Kind == "end" {
		// When each piece of the server's work began and ended, for reading
		// where a prepare's first load went.
		c.log.Debug("work-done progress", "kind", p.Value.Kind, "token", key, "title", title)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch p.Value.Kind {
	case "begin":
		if sign := c.opts.LoadSigns.Progress; sign != nil {
			long, _ := clipText(p.Value.Title, 1<<10)
			msg, _ := clipText(p.Value.Message, 4<<10)
			if problem, ok := sign(long, msg); ok {
				// A report that stays open to show a failure (gopls's
				// "Error loading workspace") is no work in flight.
				c.addProblemLocked(Problem{Message: problem})
				return
			}
		}
		if d := c.opts.LoadSigns.Diagnosis; d != nil {
			if d.Is(title) {
				if len(c.diagnosing) >= c.lim.MaxProgressTokens {
					return
				}
				c.diagnosing[key] = title
				break
			}
		}
		if bg := c.opts.LoadSigns.Background; bg != nil && bg(title) {
			c.quiescent = c.opts.LoadSigns.BackgroundAfterLoad
			// One over the bound is not tracked: its end then ends
			// nothing.
			if len(c.background) < c.lim.MaxProgressTokens {
				c.background[key] = struct{}{}
			}
			break // a waiter may now be done (quiescent)
		}
		c.quiescent = false
		if len(c.progress) >= c.lim.MaxProgressTokens {
			return
		}
		c.progress[key] = struct{}{}
		if sign := c.opts.LoadSigns.Indexing; sign != nil {
			if sign(title) {
				c.indexing[key] = title
			}
		}
	case "end":
		if title, ok := c.diagnosing[key]; ok {
			delete(c.diagnosing, key)
			c.diagnosisEnd = time.Now()
			if ws := c.opts.LoadSigns.Diagnosis.Workspace; ws(title) && !c.diagnosingWorkspaceLocked() {
				c.checked = true
			}
			break
		}
		if _, ok := c.background[key]; ok {
			delete(c.background, key)
			return
		}
		if _, ok := c.progress[key]; !ok {
			// Never begun (or its begin was over the bound): no work this
			// client tracks ended. Counted, an end sent before the load
			// began ended the load's wait, and an empty answer could then
			// be marked current.
			return
		}
		c.endProgressLocked(key)
	default:
		return
	}
	c.signal()
}

// endProgressLocked ends the work-done progress of key; c.mu must be held.
func (c *Client) endProgressLocked(key string) {
	_, indexing := c.indexing[key]
	c.quiescent = false
	delete(c.progress, key)
	delete(c.indexing, key)
	if !indexing || !c.opts.LoadSigns.IndexInBackground {
		c.progressEnd = time.Now()
	}
}

func (c *Client) onPublish(params json.RawMessage) {
	var p struct {
		URI         DocumentURI     `json:"uri"`
		Version     *int32          `json:"version"`
		Diagnostics json.RawMessage `json:"diagnostics"`
	}
	if json.Unmarshal(params, &p) != nil || p.URI == "" || len(p.URI) > 8<<10 {
		return
	}
	list, err := decodeDiagnostics(p.Diagnostics, c.lim.MaxDiagnosticsPerURI, c.lim)
	if err != nil {
		return
	}
	key := canonicalURI(p.URI)
	kept, size, fits := fitDiagnostics(key, list, c.lim.MaxDocumentDiagnosticBytes)
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.diags[key]; ok {
		// Replaced: its bytes are free for the new list.
		c.forgetPublishedLocked(old)
	}
	c.pubSeq++
	c.lastPub = time.Now()
	if fits {
		// Forget the documents published to least recently until the
		// new list fits both bounds.
		for c.oldestPub != nil && (len(c.diags) >= c.lim.MaxDiagnosticURIs || c.diagBytes+size > c.lim.MaxDiagnosticBytes) {
			c.forgetPublishedLocked(c.oldestPub)
		}
		c.addPublishedLocked(&published{key: key, diags: kept, version: p.Version, seq: c.pubSeq, at: c.lastPub, size: size})
	} else {
		// Not even an empty list for this document fits (a long URI
		// under a tiny share): nothing is kept, and an answer for it
		// waits and is not settled rather than be stale.
		c.log.Warn("lsp: published diagnostics exceed the byte bound; not kept", "uri", clipName(string(key)))
	}
	// Load problems are read from everything decoded, kept or not.
	c.diagnosticProblemsLocked(key, list.Items)
	c.signal()
}

// addPublishedLocked adds e, for a document not in c.diags, as the most
// recently published; c.mu must be held.
func (c *Client) addPublishedLocked(e *published) {
	e.older, e.newer = c.newestPub, nil
	if c.newestPub != nil {
		c.newestPub.newer = e
	} else {
		c.oldestPub = e
	}
	c.newestPub = e
	c.diags[e.key] = e
	c.diagBytes += e.size
}

// forgetPublishedLocked removes e from the published diagnostics; c.mu
// must be held. With addPublishedLocked it is the only writer of c.diags,
// so diagBytes and the publication order stay exact.
func (c *Client) forgetPublishedLocked(e *published) {
	if e.older != nil {
		e.older.newer = e.newer
	} else {
		c.oldestPub = e.newer
	}
	if e.newer != nil {
		e.newer.older = e.older
	} else {
		c.newestPub = e.older
	}
	e.older, e.newer = nil, nil
	delete(c.diags, e.key)
	c.diagBytes -= e.size
}

// Estimated sizes of what a publication keeps beyond its strings, for
// Limits.MaxDiagnosticBytes (the counts alone let a server have the
// daemon hold 2000 documents of 1000 diagnostics of 64 KiB messages): a
// Diagnostic's fixed part (its struct, 72 bytes on 64-bit, with slack for
// the slice's spare capacity) and a document's (its published record, 120
// bytes, its version and its map entry).
const (
	diagnosticOverhead = 96
	publishedOverhead  = 192
)

// diagnosticSize estimates the bytes d holds: its strings and its fixed
// part. The client keeps nothing else of a diagnostic (it declares no
// relatedInformation support, and the decoder drops that, tags and data).
func diagnosticSize(d Diagnostic) int {
	return diagnosticOverhead + len(d.Message) + len(d.Source) + len(d.Code)
}

// publishedSize estimates the bytes a publication of l for key holds.
func publishedSize(key DocumentURI, l List[Diagnostic]) int {
	n := publishedOverhead + len(key)
	for _, d := range l.Items {
		n += diagnosticSize(d)
	}
	return n
}

// fitDiagnostics cuts l for key to the longest prefix whose publishedSize
// is within max, and says it is Truncated when it cut anything, as the
// count bound does: an answer from it is not the server's whole list.
// fits is false when not even an empty list fits.
func fitDiagnostics(key DocumentURI, l List[Diagnostic], max int) (kept List[Diagnostic], size int, fits bool) {
	size = publishedOverhead + len(key)
	if size > max {
		return List[Diagnostic]{}, 0, false
	}
	for i, d := range l.Items {
		n := diagnosticSize(d)
		if size+n > max {
			// A copy, so the cut items' strings are not kept alive by
			// the decoded slice's backing array.
			l.Items, l.Truncated = slices.Clone(l.Items[:i]), true
			break
		}
		size += n
	}
	return l, size, true
}
