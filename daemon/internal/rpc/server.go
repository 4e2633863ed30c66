// Package rpc is the daemon's gRPC face (proto lsp.daemon.v1): it checks
// the protocol version, validates every key, and hands work to the pool and
// the query runner. It is the only place where daemon failures become gRPC
// statuses.
package rpc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"slices"
	"sync"
	"time"

	"github.com/hanzoai/lsp/daemon/internal/deps"
	"github.com/hanzoai/lsp/daemon/internal/jsonrpc"
	"github.com/hanzoai/lsp/daemon/internal/pool"
	"github.com/hanzoai/lsp/daemon/internal/query"
	"github.com/hanzoai/lsp/daemon/internal/runtime"
	"github.com/hanzoai/lsp/daemon/internal/workspace"
	daemonv1 "github.com/hanzoai/lsp/proto/lspdaemon/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Version is the daemon's build version, reported by Hello.
var Version = "dev"

// Server implements daemonv1.DaemonServer.
type Server struct {
	daemonv1.UnimplementedDaemonServer
	Pool   *pool.Pool
	Runner *query.Runner
	Jailed bool
	Log    *slog.Logger
	// Deps runs the dependency phase after a push prepared a tree and
	// before its servers start; nil skips it.
	Deps *deps.Fetcher
	// DeferGrace bounds how long the servers a focused prepare deferred
	// wait for the first answer from the workspace before they start
	// anyway (0: defaultDeferGrace).
	DeferGrace time.Duration
	// MaxPrepares bounds the Prepare calls handled at once (0:
	// DefaultMaxPrepares), a quarter of them (at least one) for one
	// tenant; the others wait, holding only their stream, before their
	// header is received.
	MaxPrepares int

	prepares     *slots // made once
	preparesOnce sync.Once
}

// DefaultMaxPrepares is MaxPrepares's default. Each proxy replica bounds
// its own prepares (the proxy's LSP_MAX_PREPARES, 8), but replicas scale
// out and the daemon answers them all: a prepare holds its decoded
// manifest (up to 100,000 entries with their paths, a few hundred MB at
// the worst), the chunks received ahead of its writes and a stream, so
// their number is bounded where the memory is.
const DefaultMaxPrepares = 16

// defaultDeferGrace is DeferGrace's default: a caller that prepared with
// a focus asks about it at once, and one that does not ask gets the
// other servers started a moment later.
const defaultDeferGrace = 2 * time.Second

var prepareIDRE = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// ServerOptions are the options of every gRPC server a daemon serves on:
// messages up to daemonv1.MaxPushMessageBytes (a push's manifest).
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.MaxRecvMsgSize(daemonv1.MaxPushMessageBytes)}
}

// Register adds s to a gRPC server.
func (s *Server) Register(g *grpc.Server) { daemonv1.RegisterDaemonServer(g, s) }

// Hello checks the protocol version.
func (s *Server) Hello(_ context.Context, req *daemonv1.HelloRequest) (*daemonv1.HelloResponse, error) {
	want := uint32(daemonv1.ProtocolVersion_PROTOCOL_VERSION_CURRENT)
	if req.GetProtocolVersion() != want {
		return nil, status.Errorf(codes.FailedPrecondition, "protocol version %d is not supported: this daemon speaks %d", req.GetProtocolVersion(), want)
	}
	return &daemonv1.HelloResponse{ProtocolVersion: want, DaemonVersion: Version, Jailed: s.Jailed}, nil
}

// Query answers one operation, or NEEDS_TREE.
func (s *Server) Query(ctx context.Context, req *daemonv1.QueryRequest) (*daemonv1.QueryResponse, error) {
	start := time.Now()
	k, err := workspace.ParseKey(req.GetWorkspace())
	if err != nil {
		return &daemonv1.QueryResponse{Status: daemonv1.Status_STATUS_INVALID_REQUEST, Message: err.Error()}, nil
	}
	if p := req.GetPath(); p != "" {
		if err := workspace.CheckPath(p, 1024); err != nil {
			return &daemonv1.QueryResponse{Status: daemonv1.Status_STATUS_INVALID_REQUEST, Message: "bad path: " + err.Error()}, nil
		}
	}
	// Before the workspace is looked at: a query no server may be asked
	// must not cost a prepare first (NEEDS_TREE, then refused). It goes
	// as-is to every server asked and into the answer's fingerprint.
	if len(req.GetQuery()) > daemonv1.MaxQueryBytes {
		return &daemonv1.QueryResponse{Status: daemonv1.Status_STATUS_INVALID_REQUEST, Message: fmt.Sprintf("query is longer than %d bytes", daemonv1.MaxQueryBytes)}, nil
	}
	w, release, ok := s.Pool.Acquire(k)
	if !ok {
		w, release, ok = s.awaitInFlight(ctx, k)
	}
	if !ok {
		return &daemonv1.QueryResponse{Status: daemonv1.Status_STATUS_NEEDS_TREE}, nil
	}
	defer release()
	var times jsonrpc.WireTimes
	resp := s.Runner.Run(jsonrpc.WithWireTimer(ctx, &times), w, req)
	w.MarkAnswered()
	resp.Timing = &daemonv1.QueryTiming{HandlerNanos: uint64(time.Since(start)), ServerNanos: uint64(times.Wire.Load()), WakeupNanos: uint64(times.Wakeup.Load())}
	return resp, nil
}

// awaitInFlight waits, for at most half of the query's remaining time,
// for a write of k in flight (another proxy's push, with its dependency
// phase) to end, and acquires what it published. Answering "needs tree"
// meanwhile would make that proxy hold the price and fetch the same tree
// only to find it prepared. Past half the time the query answers "needs
// tree" after all, so the proxy's own push, which waits for the write in
// Prepare under its longer deadline, still has time. Without a deadline it
// does not wait.
func (s *Server) awaitInFlight(ctx context.Context, k workspace.Key) (*pool.Workspace, func(), bool) {
	dl, ok := ctx.Deadline()
	if !ok {
		return nil, nil, false
	}
	wctx, cancel := context.WithTimeout(ctx, time.Until(dl)/2)
	defer cancel()
	for s.Pool.WaitInFlight(wctx, k) {
		if w, release, ok := s.Pool.Acquire(k); ok {
			return w, release, true
		}
	}
	return nil, nil, false
}

// Prepare receives a streamed tree, once one of MaxPrepares slots is free
// for its tenant. The tenant is known before the header (the manifest) is
// received from the stream's metadata (daemonv1.TenantHeader), which must
// then name the header's; a stream without it (an older proxy) counts
// against the total alone.
func (s *Server) Prepare(stream grpc.ClientStreamingServer[daemonv1.PrepareRequest, daemonv1.PrepareResponse]) error {
	s.preparesOnce.Do(func() {
		n := s.MaxPrepares
		if n <= 0 {
			n = DefaultMaxPrepares
		}
		s.prepares = newSlots(n)
	})
	ctx := stream.Context()
	var tenant string
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get(daemonv1.TenantHeader); len(v) == 1 && workspace.ValidTenantKey(v[0]) {
			tenant = v[0]
		}
	}
	release, err := s.prepares.acquire(ctx, tenant)
	if err != nil {
		return status.FromContextError(err).Err()
	}
	defer release()
	return s.prepare(stream, tenant)
}

func (s *Server) prepare(stream grpc.ClientStreamingServer[daemonv1.PrepareRequest, daemonv1.PrepareResponse], tenant string) error {
	first, err := stream.Recv()
	if err != nil {
		return status.Error(codes.InvalidArgument, "prepare: no header")
	}
	hdr := first.GetHeader()
	if hdr == nil {
		return status.Error(codes.InvalidArgument, "prepare: the first message must be the header")
	}
	k, err := workspace.ParseKey(hdr.GetWorkspace())
	if err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	if tenant != "" && tenant != k.TenantKey {
		return status.Error(codes.InvalidArgument, "prepare: the stream's tenant is not its header's")
	}
	if !prepareIDRE.MatchString(hdr.GetPrepareId()) {
		return status.Error(codes.InvalidArgument, "prepare: prepare_id is not a UUID")
	}
	if err := checkTreeWarnings(hdr.GetTreeWarnings()); err != nil {
		return status.Error(codes.InvalidArgument, "prepare: "+err.Error())
	}
	if f := hdr.GetFocusPath(); f != "" {
		if err := daemonv1.CheckTreePath(f); err != nil {
			return status.Error(codes.InvalidArgument, "prepare: focus_path: "+err.Error())
		}
	}
	ctx := stream.Context()
	body := &streamReader{stream: stream, left: manifestBytes(hdr.GetFiles()), follow: hdr.GetDigestsFollow()}
	// Messages are received ahead of the writes (a few chunks), so the
	// proxy keeps sending while a file is written and hashed.
	stop := body.prefetch(prefetchMessages)
	defer stop()
	if body.left == 0 {
		// No data will be read, so no Read can report what follows the
		// header: check here that nothing does.
		if err := body.end(); err != nil {
			return prepareError(err)
		}
	}
	// Servers start offline, so what they may resolve must be beside the
	// tree before they start: no server that reads dependencies, on a
	// query from this proxy or another, starts before they are in place.
	// The phase runs to its own deadline (LSP_DEPS_TIMEOUT) even when the
	// push's stream ends under it, as the prepare itself does: a tree is
	// published only with a phase that ran, never one a caller cut short.
	// It runs before the tree is published, unless the focus's server
	// reads no dependencies: then behind it (late), and the prepare
	// answers without waiting for it.
	focusSpec, _ := s.Pool.SpecFor(hdr.GetFocusPath())
	late := focusSpec != nil && focusSpec.NoDependencies && slices.ContainsFunc(hdr.GetFiles(), func(f *daemonv1.FileEntry) bool { return f.GetPath() == hdr.GetFocusPath() })
	var warnings []string
	// Where a cold prepare's time goes, logged with it: receiving and
	// writing the verified tree, the dependency phase, starting the
	// servers, their first load.
	start := time.Now()
	var received, depsDone, warmed time.Time
	// What the tree's normalisation and the dependency phase found is
	// kept with the tree, for every later prepare answer about it. The
	// warnings are taken out of the header first: a late phase's closure
	// outlives this prepare by minutes, and through hdr it would keep the
	// whole decoded manifest (up to 100,000 entries with their paths).
	treeWarnings := hdr.GetTreeWarnings()
	fetchDeps := func(ctx context.Context, ws runtime.Workspace) []string {
		began := time.Now()
		found := s.Deps.Fetch(ctx, ws)
		if late {
			// Behind the answer: nothing here is this call's.
			s.Log.Info("dependency phase after publication", "workspace", k.String(), "deps_nanos", time.Since(began).Nanoseconds(), "warnings", len(found))
		} else {
			received, warnings, depsDone = began, found, time.Now()
		}
		return append(slices.Clip(treeWarnings), found...)
	}
	var lateOpt *pool.Late
	if late {
		lateOpt = &pool.Late{Warnings: treeWarnings}
	}
	prepared, id, err := s.Pool.Prepare(ctx, k, hdr.GetPrepareId(), hdr.GetFiles(), body, fetchDeps, lateOpt)
	if late && prepared {
		received = time.Now()
		depsDone = received
	}
	if err != nil {
		if !errors.Is(err, workspace.ErrInvalid) && !errors.Is(err, pool.ErrTreeOverBudget) && !errors.Is(err, pool.ErrPoolClosed) {
			s.Log.Error("prepare", "workspace", k.String(), "err", err)
		}
		return prepareError(err)
	}
	resp := &daemonv1.PrepareResponse{Prepared: prepared, PrepareId: id}
	w, release, ok := s.Pool.Acquire(k)
	if ok {
		defer release()
		var infos []pool.LanguageInfo
		if prepared {
			resp.Warnings = append(warnings, w.CgoWarnings()...)
			_, warm, deferred := w.Warm(ctx, hdr.GetFiles(), hdr.GetFocusPath())
			resp.Warnings = append(resp.Warnings, warm...)
			warmed = time.Now()
			if len(deferred) > 0 {
				// After the focus's first answer (startDeferred), not
				// beside it: the caller's next question is about the focus.
				defer s.startDeferred(k, deferred)
			}
			// The answer says whether each server could load the project,
			// so it waits for their first load (bounded) — with a focus,
			// for its server's only, and says which it did not wait for.
			// A question that follows says itself whether the server had
			// checked the project by then (query's unchecked).
			if s.Runner != nil {
				notAwaited, undiagnosed := s.Runner.AwaitLoad(ctx, w, hdr.GetFocusPath(), hdr.GetQueryFollows())
				if hdr.GetQueryFollows() {
					undiagnosed = nil
				}
				for _, d := range deferred {
					notAwaited = append(notAwaited, d.ID)
				}
				for _, id := range notAwaited {
					resp.Warnings = append(resp.Warnings, fmt.Sprintf("%s's first load was not awaited (this prepare waited for the server of %s only): its load problems, if any, come with its answers", id, hdr.GetFocusPath()))
				}
				for _, id := range undiagnosed {
					resp.Warnings = append(resp.Warnings, fmt.Sprintf("%s was still loading or checking the project when this prepare answered: the problems it finds, if any, come with its answers", id))
				}
			}
		}
		if late && prepared && !w.DepsDone() {
			resp.Warnings = append(resp.Warnings, fmt.Sprintf("the dependency phase was still running when this prepare answered (the server of %s reads no dependencies, and the others start once it has ended): what it finds comes with later answers about this revision", hdr.GetFocusPath()))
		}
		infos = w.Languages()
		resp.Languages = languages(infos)
	}
	attrs := []any{"workspace", k.String(), "prepared", prepared, "files", len(hdr.GetFiles()), "late_deps", late}
	if prepared && !received.IsZero() && !warmed.IsZero() {
		attrs = append(attrs, "receive_nanos", received.Sub(start).Nanoseconds(), "deps_nanos", depsDone.Sub(received).Nanoseconds(),
			"publish_start_nanos", warmed.Sub(depsDone).Nanoseconds(), "load_nanos", time.Since(warmed).Nanoseconds())
	}
	s.Log.Info("prepare", attrs...)
	return stream.SendAndClose(resp)
}

// startDeferred starts, in the background, the servers a focused prepare
// of k deferred, on k's workspace if it is still live: bounded like any
// server start, detached from the push that ends now. They start once the
// workspace has answered its first query (the caller's question about the
// focus, which would otherwise share two cores with their start: a
// focus's server with no load to await, basedpyright or bash, answered
// its first hover twice as slowly beside three starting node servers), or
// after DeferGrace without one. A question for one of their languages
// meanwhile starts its server itself (pool.Workspace.Server). The wait
// holds nothing: a Delete or an eviction meanwhile is not held up, and
// the starts then find no live workspace. After a late dependency phase
// they also wait for its end, which every server but the focus's needs.
func (s *Server) startDeferred(k workspace.Key, specs []*pool.Spec) {
	w, release, ok := s.Pool.Acquire(k)
	if !ok {
		return
	}
	answered, deps := w.Answered(), w.DepsEnded()
	release()
	grace := s.DeferGrace
	if grace <= 0 {
		grace = defaultDeferGrace
	}
	go func() {
		t := time.NewTimer(grace)
		select {
		case <-answered:
		case <-t.C:
		}
		t.Stop()
		// A late dependency phase (up to LSP_DEPS_TIMEOUT) is not part of
		// the starts' own bound below.
		<-deps
		w, release, ok := s.Pool.Acquire(k)
		if !ok {
			return
		}
		defer release()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if s.Runner != nil {
			s.Runner.StartDeferred(ctx, w, specs)
		} else {
			w.StartDeferred(ctx, specs)
		}
	}()
}

// Capabilities reports whether a workspace is warm and what its servers
// negotiated. It never prepares.
func (s *Server) Capabilities(_ context.Context, req *daemonv1.CapabilitiesRequest) (*daemonv1.CapabilitiesResponse, error) {
	k, err := workspace.ParseKey(req.GetWorkspace())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	// A cold answer comes from the static configuration only: what any
	// other workspace on this shard ran (its languages, server generations,
	// negotiated tools) is that tenant's, never part of this answer. In
	// flight is read before warm: a write that publishes between the two
	// reads then shows as warm, never as neither.
	inflight := s.Pool.InFlight(k)
	w, release, ok := s.Pool.Acquire(k)
	if !ok {
		return &daemonv1.CapabilitiesResponse{InFlight: inflight || s.Pool.InFlight(k), Languages: languages(s.Pool.Configured())}, nil
	}
	defer release()
	infos := w.Languages()
	if len(infos) == 0 {
		// Its servers are not running now (evicted under pressure): the
		// configuration, with what they reported here.
		infos = w.KnownLoadWarnings(s.Pool.Configured())
	}
	return &daemonv1.CapabilitiesResponse{Warm: true, PrepareId: w.PrepareID, InFlight: inflight, Languages: languages(infos),
		Warnings: append(w.PrepareWarnings(), w.CgoWarnings()...)}, nil
}

// DeleteWorkspace removes a workspace now.
func (s *Server) DeleteWorkspace(ctx context.Context, req *daemonv1.DeleteWorkspaceRequest) (*daemonv1.DeleteWorkspaceResponse, error) {
	k, err := workspace.ParseKey(req.GetWorkspace())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	deleted, err := s.Pool.Delete(ctx, k)
	if err != nil {
		s.Log.Error("delete workspace", "workspace", k.String(), "err", err)
		return nil, status.Error(codes.Internal, "delete failed")
	}
	return &daemonv1.DeleteWorkspaceResponse{Deleted: deleted}, nil
}

func languages(infos []pool.LanguageInfo) []*daemonv1.LanguageTools {
	out := make([]*daemonv1.LanguageTools, 0, len(infos))
	for _, i := range infos {
		out = append(out, &daemonv1.LanguageTools{
			Language:              i.Language,
			Server:                &daemonv1.ServerInfo{Id: i.Server.ID, Version: i.Server.Version, Generation: i.Server.Generation},
			Tools:                 i.Tools,
			CapabilityFingerprint: i.Fingerprint,
			Warnings:              i.Warnings,
		})
	}
	return out
}

func prepareError(err error) error {
	if errors.Is(err, workspace.ErrInvalid) {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	if errors.Is(err, pool.ErrTreeOverBudget) {
		return status.Error(codes.ResourceExhausted, pool.ErrTreeOverBudget.Error())
	}
	if errors.Is(err, pool.ErrPoolClosed) {
		return status.Error(codes.Unavailable, pool.ErrPoolClosed.Error())
	}
	return status.Error(codes.Internal, "prepare failed")
}

// checkTreeWarnings refuses tree warnings over their bounds
// (daemonv1.MaxTreeWarnings): they are kept with the tree. (protobuf has
// refused a string that is not UTF-8 already.)
func checkTreeWarnings(w []string) error {
	if len(w) > daemonv1.MaxTreeWarnings {
		return fmt.Errorf("%d tree warnings, more than %d", len(w), daemonv1.MaxTreeWarnings)
	}
	for _, t := range w {
		if len(t) > daemonv1.MaxTreeWarningBytes {
			return fmt.Errorf("a tree warning over %d bytes", daemonv1.MaxTreeWarningBytes)
		}
	}
	return nil
}

// manifestBytes is the number of data bytes the manifest announces. The
// pool refuses oversized manifests before reading, so saturating is enough.
func manifestBytes(files []*daemonv1.FileEntry) int64 {
	var total uint64
	for _, f := range files {
		total += min(f.GetSize(), 1<<62)
		if total > 1<<62 {
			return 1 << 62
		}
	}
	return int64(total)
}

// streamReader reads the data messages of a prepare stream as one byte
// stream of exactly the manifest's length. The store publishes a tree as
// soon as it has read the manifest's bytes and only asks whether one more
// byte follows, so whatever breaks the protocol at the end — more bytes, a
// second header, a broken stream — is found before the last byte is handed
// over and returned with it, where the store cannot miss it.
// prefetchMessages bounds the data messages received ahead of the
// tree's writes. gRPC receives messages of up to
// daemonv1.MaxPushMessageBytes (64 MiB, for a header's manifest), so the
// size of each is bounded here, not by the proxy's chunking: a data
// message over daemonv1.MaxPushChunkBytes (1 MiB) is refused before it is
// queued (recv), and the prefetcher stops after any other message (a
// trailer, which nothing valid follows, or a second header, which is
// refused), so at most n+2 chunks wait in memory (n queued, one the
// prefetcher holds until there is room, one in the reader's hands) and at
// most one larger message.
const prefetchMessages = 8

type received struct {
	msg *daemonv1.PrepareRequest
	err error
}

// prefetch receives the stream's data messages on a goroutine of its own,
// at most n ahead of next. It stops after an error or a message that is
// not data, and closes the channel: next then receives what follows
// itself. The returned stop ends it; Recv then returns once the handler
// has returned and the stream is done.
func (r *streamReader) prefetch(n int) (stop func()) {
	ch, done := make(chan received, n), make(chan struct{})
	go func() {
		defer close(ch)
		for {
			msg, err := r.recv()
			select {
			case ch <- received{msg, err}:
			case <-done:
				return
			}
			if _, data := msg.GetPart().(*daemonv1.PrepareRequest_Data); err != nil || !data {
				return
			}
		}
	}()
	r.ahead = ch
	return func() { close(done) }
}

// recv receives the stream's next message, refusing a data message over
// daemonv1.MaxPushChunkBytes before anyone holds it (prefetchMessages).
func (r *streamReader) recv() (*daemonv1.PrepareRequest, error) {
	msg, err := r.stream.Recv()
	if n := len(msg.GetData()); err == nil && n > daemonv1.MaxPushChunkBytes {
		return nil, fmt.Errorf("%w: a data message of %d bytes, more than %d", workspace.ErrInvalid, n, daemonv1.MaxPushChunkBytes)
	}
	return msg, err
}

type streamReader struct {
	// ahead, when set, delivers the stream's messages (prefetch);
	// recvErr is the first error received.
	ahead   chan received
	recvErr error
	stream  grpc.ClientStreamingServer[daemonv1.PrepareRequest, daemonv1.PrepareResponse]
	buf     []byte
	left    int64 // manifest bytes not yet handed over
	err     error // sticky
	// follow: the header's digests_follow; then one trailer must come
	// after the manifest's bytes and end the stream.
	follow  bool
	trailer []string
	trailed bool
}

// DigestsFollow implements workspace.DigestTrailer.
func (r *streamReader) DigestsFollow() bool { return r.follow }

// Digests implements workspace.DigestTrailer: the trailer's digests, once
// the stream has ended after it.
func (r *streamReader) Digests() ([]string, error) {
	if r.err != nil {
		return nil, r.err
	}
	if !r.trailed {
		return nil, fmt.Errorf("%w: the stream ended without its trailer", workspace.ErrInvalid)
	}
	return r.trailer, nil
}

func (r *streamReader) Read(p []byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	for len(r.buf) == 0 {
		if r.left == 0 {
			return 0, io.EOF
		}
		data, err := r.next()
		if err == io.EOF {
			return 0, io.EOF
		}
		if err != nil {
			r.err = err
			return 0, err
		}
		if int64(len(data)) > r.left {
			r.err = fmt.Errorf("%w: more bytes than the manifest declares", workspace.ErrInvalid)
			return 0, r.err
		}
		r.buf = data
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	r.left -= int64(n)
	if r.left == 0 {
		if err := r.end(); err != nil {
			r.err = err
			return n, err
		}
	}
	return n, nil
}

// next returns the bytes of the next data message, io.EOF at the end of the
// stream.
func (r *streamReader) next() ([]byte, error) {
	if r.recvErr != nil {
		return nil, r.recvErr
	}
	rcv, ok := received{}, false
	if r.ahead != nil {
		if rcv, ok = <-r.ahead; !ok {
			// The prefetcher stopped after a message that is not data:
			// what follows it is received here.
			r.ahead = nil
		}
	}
	if !ok {
		rcv.msg, rcv.err = r.recv()
	}
	msg, err := rcv.msg, rcv.err
	if err != nil {
		// The prefetcher stops after an error: it stays the answer.
		r.recvErr = err
	}
	if err == io.EOF {
		return nil, io.EOF
	}
	if errors.Is(err, workspace.ErrInvalid) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("prepare stream: %w", err)
	}
	if msg.GetHeader() != nil {
		return nil, fmt.Errorf("%w: a second header in the stream", workspace.ErrInvalid)
	}
	if t := msg.GetTrailer(); t != nil {
		switch {
		case !r.follow:
			return nil, fmt.Errorf("%w: a trailer in a stream whose header carries the digests", workspace.ErrInvalid)
		case r.trailed:
			return nil, fmt.Errorf("%w: a second trailer in the stream", workspace.ErrInvalid)
		case r.left > 0:
			return nil, fmt.Errorf("%w: the trailer came before the manifest's last byte", workspace.ErrInvalid)
		}
		r.trailer, r.trailed = t.GetSha256(), true
		return nil, nil
	}
	if r.trailed && len(msg.GetData()) > 0 {
		return nil, fmt.Errorf("%w: bytes after the trailer", workspace.ErrInvalid)
	}
	return msg.GetData(), nil
}

// end checks that the stream ends after the manifest's bytes; empty data
// messages carry nothing and are let through.
func (r *streamReader) end() error {
	for {
		data, err := r.next()
		if err == io.EOF {
			if r.follow && !r.trailed {
				return fmt.Errorf("%w: the stream ended without its trailer", workspace.ErrInvalid)
			}
			return nil
		}
		if err != nil {
			return err
		}
		if len(data) > 0 {
			return fmt.Errorf("%w: more bytes than the manifest declares", workspace.ErrInvalid)
		}
	}
}
