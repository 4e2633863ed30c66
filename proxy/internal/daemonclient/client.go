// Package daemonclient is the proxy's side of the daemon protocol: one gRPC
// connection per daemon shard, the protocol-version check, health checks, the
// choice of shard for a workspace by rendezvous hashing over the live
// shards, mutual TLS to host:port daemons, the request id carried as gRPC
// metadata, and the streamed tree push.
//
// Shards: every shard is asked Hello every health interval (and at once when
// the pool starts). A shard whose Hello fails, or whose transport fails a
// call, is marked down until a Hello succeeds again. Pick ranks the shards
// by rendezvous (highest random weight) hashing of (address, tenant key,
// repo, commit) and takes the best live one, so a dead shard's keys move to
// their next-ranked shard and come back when it recovers, while every other
// key stays where it is. With no live shard Pick still answers (the
// best-ranked shard), so the call fails with the shard's own error.
//
// Each proxy replica has its own view of shard health; two replicas may
// briefly disagree about a shard and send a key to two shards. That costs a
// second tree on disk, never money: see HIP.md (the ledger's re-prepare
// grace and the unique prepare id).
package daemonclient

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	daemonv1 "github.com/hanzoai/lsp/proto/lspdaemon/v1"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// ChunkSize is the size of one data message of a tree push: large enough
// that per-message overhead vanishes, and the most the daemon accepts
// (it receives a few ahead of its writes).
const ChunkSize = daemonv1.MaxPushChunkBytes

// DefaultHealthInterval is the time between two Hello checks of a shard.
const DefaultHealthInterval = 2 * time.Second

// Shard is one daemon.
type Shard struct {
	Addr   string
	conn   *grpc.ClientConn
	client daemonv1.DaemonClient
	pool   *Pool

	up      atomic.Bool
	checked atomic.Bool // a Hello has succeeded on this shard at least once

	mu      sync.Mutex
	lastErr error // why the shard is down
}

// Options configure a Pool.
type Options struct {
	// TLS is the client side of mutual TLS (a client certificate and the
	// CA that signed the daemons' certificates); it is required for
	// host:port daemons and unused for unix sockets.
	TLS *tls.Config
	// HealthInterval is the time between Hello checks of each shard;
	// zero means DefaultHealthInterval.
	HealthInterval time.Duration
	// Registry, when not nil, receives the lsp_proxy_daemon_up gauge.
	Registry prometheus.Registerer
	// Log receives shard transitions; nil discards.
	Log *slog.Logger
}

// Pool holds every shard.
type Pool struct {
	shards   []*Shard
	log      *slog.Logger
	interval time.Duration
	gauge    *prometheus.GaugeVec

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// Dial connects to each address with default options and no TLS.
func Dial(addrs []string, log *slog.Logger) (*Pool, error) {
	return New(addrs, Options{Log: log})
}

// New connects to each address ("unix:///path.sock", or "host:port" with
// mutual TLS) and starts the health checks; Close stops them. Connections
// are lazy: a shard that is down does not stop the proxy.
func New(addrs []string, o Options) (*Pool, error) {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.HealthInterval <= 0 {
		o.HealthInterval = DefaultHealthInterval
	}
	p := &Pool{log: o.Log, interval: o.HealthInterval}
	seen := map[string]bool{}
	for _, a := range addrs {
		if seen[a] {
			p.Close()
			return nil, fmt.Errorf("daemon %q is listed twice", a)
		}
		seen[a] = true
		creds, err := transport(a, o.TLS)
		if err != nil {
			p.Close()
			return nil, err
		}
		conn, err := grpc.NewClient(a,
			grpc.WithTransportCredentials(creds),
			// The daemons are the proxy's own network: an HTTPS_PROXY
			// set for the egress to the forge must not carry the trees.
			grpc.WithNoProxy(),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(16<<20)),
			grpc.WithChainUnaryInterceptor(unaryRequestID),
			grpc.WithChainStreamInterceptor(streamRequestID),
			// A shard that comes back is noticed within seconds, not
			// after gRPC's default two-minute backoff.
			grpc.WithConnectParams(grpc.ConnectParams{
				Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 3 * time.Second},
				MinConnectTimeout: 5 * time.Second,
			}),
		)
		if err != nil {
			p.Close()
			return nil, fmt.Errorf("daemon %q: %w", a, err)
		}
		s := &Shard{Addr: a, conn: conn, client: daemonv1.NewDaemonClient(conn), pool: p}
		s.up.Store(true) // until a check says otherwise
		p.shards = append(p.shards, s)
	}
	if len(p.shards) == 0 {
		return nil, errors.New("no daemon configured")
	}
	p.gauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "lsp_proxy_daemon_up", Help: "Whether this proxy sees a daemon shard as live (1) or down (0).",
	}, []string{"shard"})
	if o.Registry != nil {
		if err := o.Registry.Register(p.gauge); err != nil {
			p.Close()
			return nil, fmt.Errorf("daemon metrics: %w", err)
		}
	}
	for _, s := range p.shards {
		p.gauge.WithLabelValues(s.Addr).Set(1)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	for _, s := range p.shards {
		p.wg.Add(1)
		go p.watch(ctx, s)
	}
	return p, nil
}

// transport chooses the connection's security: a unix socket is guarded by
// its file mode; anything else needs mutual TLS.
func transport(addr string, cfg *tls.Config) (credentials.TransportCredentials, error) {
	if strings.HasPrefix(addr, "unix://") {
		return insecure.NewCredentials(), nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return nil, fmt.Errorf("daemon %q: want unix:///path.sock or host:port", addr)
	}
	if cfg == nil || len(cfg.Certificates) == 0 || cfg.RootCAs == nil {
		// Never send trees in the clear, nor to a daemon we cannot verify.
		return nil, fmt.Errorf("daemon %q: a host:port daemon needs mutual TLS (LSP_DAEMON_TLS_CERT, LSP_DAEMON_TLS_KEY, LSP_DAEMON_TLS_CA)", addr)
	}
	c := cfg.Clone()
	c.ServerName = host
	if c.MinVersion < tls.VersionTLS13 {
		c.MinVersion = tls.VersionTLS13
	}
	return credentials.NewTLS(c), nil
}

// Close stops the health checks and closes every connection.
func (p *Pool) Close() {
	if p.cancel != nil {
		p.cancel()
	}
	p.wg.Wait()
	for _, s := range p.shards {
		_ = s.conn.Close()
	}
}

// Shards lists the shards in configuration order.
func (p *Pool) Shards() []*Shard { return p.shards }

// Key names a workspace on the wire.
type Key struct{ TenantKey, Repo, Commit string }

func (k Key) proto() *daemonv1.WorkspaceKey {
	return &daemonv1.WorkspaceKey{TenantKey: k.TenantKey, Repo: k.Repo, Commit: k.Commit}
}

// weight is the rendezvous weight of shard addr for k.
func weight(addr string, k Key) uint64 {
	h := sha256.New()
	h.Write([]byte(addr))
	h.Write([]byte{0})
	h.Write([]byte(k.TenantKey))
	h.Write([]byte{0})
	h.Write([]byte(k.Repo))
	h.Write([]byte{0})
	h.Write([]byte(k.Commit))
	return binary.BigEndian.Uint64(h.Sum(nil))
}

// Pick returns the shard for k: the live shard of highest rendezvous
// weight. Every proxy replica with the same view of health picks the same
// shard, and losing or adding a shard moves only that shard's keys.
func (p *Pool) Pick(k Key) *Shard {
	var best, bestAny *Shard
	var bestW, bestAnyW uint64
	for _, s := range p.shards {
		w := weight(s.Addr, k)
		if bestAny == nil || w > bestAnyW {
			bestAny, bestAnyW = s, w
		}
		if s.up.Load() && (best == nil || w > bestW) {
			best, bestW = s, w
		}
	}
	if best == nil {
		return bestAny
	}
	return best
}

// Ping checks that at least one shard answers Hello with our protocol, now.
func (p *Pool) Ping(ctx context.Context) error {
	var errs []error
	for _, s := range p.shards {
		if err := s.check(ctx); err != nil {
			errs = append(errs, err)
			continue
		}
		return nil
	}
	return errors.Join(errs...)
}

// ErrProtocol marks a daemon that speaks another protocol version.
var ErrProtocol = errors.New("daemon protocol mismatch")

// Up reports whether the pool sees the shard as live.
func (s *Shard) Up() bool { return s.up.Load() }

// hello asks the daemon for its protocol version.
func (s *Shard) hello(ctx context.Context) error {
	want := uint32(daemonv1.ProtocolVersion_PROTOCOL_VERSION_CURRENT)
	resp, err := s.client.Hello(ctx, &daemonv1.HelloRequest{ProtocolVersion: want})
	if err != nil {
		if status.Code(err) == codes.FailedPrecondition {
			// The daemon refused our version and said which it speaks.
			return fmt.Errorf("%w: daemon %s refused protocol version %d: %s", ErrProtocol, s.Addr, want, status.Convert(err).Message())
		}
		return fmt.Errorf("daemon %s: hello: %w", s.Addr, err)
	}
	if resp.GetProtocolVersion() != want {
		return fmt.Errorf("%w: daemon %s speaks protocol version %d, this proxy speaks %d", ErrProtocol, s.Addr, resp.GetProtocolVersion(), want)
	}
	return nil
}

// check runs one Hello and records the shard's health.
func (s *Shard) check(ctx context.Context) error {
	err := s.hello(ctx)
	if err != nil {
		s.markDown(err)
		return err
	}
	s.checked.Store(true)
	s.markUp()
	return nil
}

// ready makes sure a Hello has succeeded on this shard before its first
// call, and reports a protocol mismatch found by the health checks.
func (s *Shard) ready(ctx context.Context) error {
	if !s.up.Load() {
		s.mu.Lock()
		err := s.lastErr
		s.mu.Unlock()
		if errors.Is(err, ErrProtocol) {
			return err
		}
	}
	if s.checked.Load() {
		return nil
	}
	return s.check(ctx)
}

// failed marks the shard down when a call failed in its transport.
func (s *Shard) failed(err error) error {
	if err != nil && status.Code(err) == codes.Unavailable {
		s.markDown(err)
	}
	return err
}

// ErrUnanswered marks a query the daemon had — a transport carried it —
// that ended without an answer: at its deadline, or its caller's cancel.
// One that never left (no connection yet, or the shard's first Hello
// failed) is not marked.
var ErrUnanswered = errors.New("the daemon had the query but did not answer it")

// Query runs one operation.
func (s *Shard) Query(ctx context.Context, req *daemonv1.QueryRequest) (*daemonv1.QueryResponse, error) {
	if err := s.ready(ctx); err != nil {
		return nil, err
	}
	// The peer is known once the call was given a transport.
	var p peer.Peer
	resp, err := s.client.Query(ctx, req, grpc.Peer(&p))
	if err != nil && p.Addr != nil {
		switch status.Code(err) {
		case codes.DeadlineExceeded, codes.Canceled:
			err = fmt.Errorf("%w: %w", ErrUnanswered, err)
		}
	}
	return resp, s.failed(err)
}

// Capabilities asks what a workspace would use and whether it is warm.
func (s *Shard) Capabilities(ctx context.Context, k Key) (*daemonv1.CapabilitiesResponse, error) {
	if err := s.ready(ctx); err != nil {
		return nil, err
	}
	resp, err := s.client.Capabilities(ctx, &daemonv1.CapabilitiesRequest{Workspace: k.proto()})
	return resp, s.failed(err)
}

// Delete removes a workspace.
func (s *Shard) Delete(ctx context.Context, k Key) (bool, error) {
	if err := s.ready(ctx); err != nil {
		return false, err
	}
	resp, err := s.client.DeleteWorkspace(ctx, &daemonv1.DeleteWorkspaceRequest{Workspace: k.proto()})
	return resp.GetDeleted(), s.failed(err)
}

// File is one file of a pushed tree. A file of a streamed push
// (PushStream) has only Path, Size and Executable: its bytes come from the
// push's source and its digest is computed as they are sent.
type File struct {
	Path       string
	Data       []byte
	Size       int64
	SHA256     string
	Executable bool
}

// Push streams a tree: the header with the manifest, then the files' bytes
// in manifest order, in ChunkSize messages. A daemon that already holds the
// workspace may answer before the stream ends; that is not an error.
func (s *Shard) Push(ctx context.Context, k Key, prepareID string, files []File) (*daemonv1.PrepareResponse, error) {
	for i := range files {
		files[i].Size = int64(len(files[i].Data))
	}
	return s.push(ctx, k, prepareID, files, PushMeta{}, false, func(_ context.Context, fn func(int, []byte) error) error {
		for i, f := range files {
			if err := fn(i, f.Data); err != nil {
				return err
			}
		}
		return nil
	})
}

// SourceError is a streamed push's source failing (the forge's tree could
// not be read): the push was abandoned before its trailer, so the daemon
// published nothing from it.
type SourceError struct{ Err error }

func (e *SourceError) Error() string { return "push source: " + e.Err.Error() }
func (e *SourceError) Unwrap() error { return e.Err }

// PushStream streams a tree whose bytes source hands over, file by file in
// manifest order (forge.Tree.Stream), while it is still reading them: the
// header carries the manifest without digests (digests_follow), each
// file's SHA-256 is computed as its bytes are sent, and the trailer
// carries them; the daemon checks every file against it before it uses or
// publishes the tree. A source that fails, or hands over a file of another
// size than its manifest entry, abandons the stream (the daemon then
// discards what it received) and returns a *SourceError. meta travels in
// the header.
func (s *Shard) PushStream(ctx context.Context, k Key, prepareID string, files []File, meta PushMeta, source func(ctx context.Context, fn func(i int, data []byte) error) error) (*daemonv1.PrepareResponse, error) {
	return s.push(ctx, k, prepareID, files, meta, true, source)
}

// PushMeta is what a push's header says beside its manifest.
type PushMeta struct {
	// TreeWarnings (forge.Tree.Warnings): the daemon keeps them with the
	// tree it publishes.
	TreeWarnings []string
	// Focus is the file the caller asks about first (PrepareHeader
	// focus_path): the answer waits for its server's first load only.
	Focus string
	// QueryFollows: the caller's question follows at once (an implicit
	// prepare; PrepareHeader query_follows).
	QueryFollows bool
}

func (s *Shard) push(ctx context.Context, k Key, prepareID string, files []File, meta PushMeta, follow bool, source func(ctx context.Context, fn func(i int, data []byte) error) error) (*daemonv1.PrepareResponse, error) {
	if err := s.ready(ctx); err != nil {
		return nil, err
	}
	hdr := &daemonv1.PrepareHeader{Workspace: k.proto(), PrepareId: prepareID, Files: make([]*daemonv1.FileEntry, len(files)), DigestsFollow: follow,
		TreeWarnings: meta.TreeWarnings, FocusPath: meta.Focus, QueryFollows: meta.QueryFollows}
	for i, f := range files {
		hdr.Files[i] = &daemonv1.FileEntry{Path: f.Path, Size: uint64(f.Size), Executable: f.Executable}
		if !follow {
			hdr.Files[i].Sha256 = f.SHA256
		}
	}
	head := &daemonv1.PrepareRequest{Part: &daemonv1.PrepareRequest_Header{Header: hdr}}
	if err := pushFits(head, follow, len(files)); err != nil {
		return nil, err
	}
	// The stream's own context: cancelling it abandons the push, so a
	// failed source can never be taken for a whole tree.
	sctx, abandon := context.WithCancel(ctx)
	defer abandon()
	// The tenant goes ahead of the header: the daemon gives each tenant
	// its share of the prepares it handles at once before it receives a
	// manifest.
	sctx = metadata.AppendToOutgoingContext(sctx, daemonv1.TenantHeader, k.TenantKey)
	stream, err := s.client.Prepare(sctx)
	if err != nil {
		return nil, fmt.Errorf("prepare: %w", s.failed(err))
	}
	if err := stream.Send(head); err != nil {
		return s.closeAndRecv(stream, err)
	}
	// Concatenate small files into full chunks; send large files' bytes
	// straight from their slices without copying.
	chunk := make([]byte, 0, ChunkSize)
	send := func(b []byte) error {
		return stream.Send(&daemonv1.PrepareRequest{Part: &daemonv1.PrepareRequest_Data{Data: b}})
	}
	var sums []string
	if follow {
		sums = make([]string, len(files))
	}
	// sendErr: the daemon stopped reading (it may have answered already).
	var sendErr error
	next := 0
	srcErr := source(sctx, func(i int, data []byte) error {
		if i != next || int64(len(data)) != files[i].Size {
			return fmt.Errorf("file %d of %d (%q): got %d bytes in position %d, want %d", i, len(files), files[i].Path, len(data), next, files[i].Size)
		}
		next++
		if follow {
			sum := sha256.Sum256(data)
			sums[i] = hex.EncodeToString(sum[:])
		}
		for len(data) > 0 {
			if len(chunk) == 0 && len(data) >= ChunkSize {
				if err := send(data[:ChunkSize]); err != nil {
					sendErr = err
					return err
				}
				data = data[ChunkSize:]
				continue
			}
			n := min(ChunkSize-len(chunk), len(data))
			chunk = append(chunk, data[:n]...)
			data = data[n:]
			if len(chunk) == ChunkSize {
				if err := send(chunk); err != nil {
					sendErr = err
					return err
				}
				chunk = make([]byte, 0, ChunkSize)
			}
		}
		return nil
	})
	if sendErr != nil {
		return s.closeAndRecv(stream, sendErr)
	}
	if srcErr == nil && next != len(files) {
		srcErr = fmt.Errorf("the source handed over %d of %d files", next, len(files))
	}
	if srcErr != nil {
		abandon()
		return nil, &SourceError{Err: srcErr}
	}
	if len(chunk) > 0 {
		if err := send(chunk); err != nil {
			return s.closeAndRecv(stream, err)
		}
	}
	if follow {
		if err := stream.Send(&daemonv1.PrepareRequest{Part: &daemonv1.PrepareRequest_Trailer{Trailer: &daemonv1.PrepareTrailer{Sha256: sums}}}); err != nil {
			return s.closeAndRecv(stream, err)
		}
	}
	resp, err := stream.CloseAndRecv()
	return resp, s.failed(err)
}

// pushFits refuses a push whose header, or trailer (a digest per file),
// is over the largest message a daemon receives, before anything is sent:
// ResourceExhausted, as the daemon would answer, so the tree is too large
// on any retry (413), and the message says which bound.
func pushFits(head *daemonv1.PrepareRequest, follow bool, files int) error {
	if n := proto.Size(head); n > daemonv1.MaxPushMessageBytes {
		return status.Errorf(codes.ResourceExhausted, "the tree's file list takes %d MiB, more than the %d MiB a push carries", n>>20, daemonv1.MaxPushMessageBytes>>20)
	}
	if follow {
		// A hex digest with its tag and length.
		if n := files * (2 + sha256.Size*2); n > daemonv1.MaxPushMessageBytes {
			return status.Errorf(codes.ResourceExhausted, "the tree's %d files' digests take %d MiB, more than the %d MiB a push carries", files, n>>20, daemonv1.MaxPushMessageBytes>>20)
		}
	}
	return nil
}

// closeAndRecv turns a Send error into the daemon's real answer: gRPC
// reports io.EOF from Send when the server has already replied.
func (s *Shard) closeAndRecv(stream grpc.ClientStreamingClient[daemonv1.PrepareRequest, daemonv1.PrepareResponse], sendErr error) (*daemonv1.PrepareResponse, error) {
	resp, err := stream.CloseAndRecv()
	if err != nil {
		return nil, fmt.Errorf("prepare: %w", s.failed(err))
	}
	_ = sendErr
	return resp, nil
}
