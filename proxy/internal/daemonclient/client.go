// Package daemonclient is the proxy's side of the daemon protocol: one gRPC
// connection per daemon shard, the protocol-version check on connect, the
// choice of shard for a workspace by rendezvous hashing, and the streamed
// tree push.
package daemonclient

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	daemonv1 "github.com/hanzoai/lsp/proto/lspdaemon/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// ChunkSize is the size of one data message of a tree push: large enough
// that per-message overhead vanishes, well below gRPC's 4 MiB default.
const ChunkSize = 1 << 20

// Shard is one daemon.
type Shard struct {
	Addr   string
	conn   *grpc.ClientConn
	client daemonv1.DaemonClient

	mu    sync.Mutex
	hello bool // the protocol version was checked on this connection
}

// Pool holds every shard.
type Pool struct {
	shards []*Shard
	log    *slog.Logger
}

// Dial connects to each address ("unix:///path.sock" or "host:port").
// Connections are lazy: a shard that is down does not stop the proxy.
func Dial(addrs []string, log *slog.Logger) (*Pool, error) {
	p := &Pool{log: log}
	for _, a := range addrs {
		target := a
		if !strings.HasPrefix(a, "unix://") {
			// TLS with client certificates is the deployed transport; it is
			// configured by the shards issue. Plain TCP is refused here
			// rather than silently sent in the clear.
			return nil, fmt.Errorf("daemon %q: only unix:// sockets are supported so far", a)
		}
		conn, err := grpc.NewClient(target,
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(16<<20)),
		)
		if err != nil {
			return nil, fmt.Errorf("daemon %q: %w", a, err)
		}
		p.shards = append(p.shards, &Shard{Addr: a, conn: conn, client: daemonv1.NewDaemonClient(conn)})
	}
	if len(p.shards) == 0 {
		return nil, errors.New("no daemon configured")
	}
	return p, nil
}

// Close closes every connection.
func (p *Pool) Close() {
	for _, s := range p.shards {
		_ = s.conn.Close()
	}
}

// Key names a workspace on the wire.
type Key struct{ TenantKey, Repo, Commit string }

func (k Key) proto() *daemonv1.WorkspaceKey {
	return &daemonv1.WorkspaceKey{TenantKey: k.TenantKey, Repo: k.Repo, Commit: k.Commit}
}

// Pick returns the shard for k by rendezvous (highest random weight)
// hashing: every proxy replica picks the same shard, and adding or losing a
// shard moves only that shard's share of keys.
func (p *Pool) Pick(k Key) *Shard {
	var best *Shard
	var bestW uint64
	for _, s := range p.shards {
		h := sha256.New()
		h.Write([]byte(s.Addr))
		h.Write([]byte{0})
		h.Write([]byte(k.TenantKey))
		h.Write([]byte{0})
		h.Write([]byte(k.Repo))
		h.Write([]byte{0})
		h.Write([]byte(k.Commit))
		w := binary.BigEndian.Uint64(h.Sum(nil))
		if best == nil || w > bestW {
			best, bestW = s, w
		}
	}
	return best
}

// Ping checks that at least one shard answers Hello with our protocol.
func (p *Pool) Ping(ctx context.Context) error {
	var errs []error
	for _, s := range p.shards {
		if err := s.checkHello(ctx); err != nil {
			errs = append(errs, err)
			continue
		}
		return nil
	}
	return errors.Join(errs...)
}

// ErrProtocol marks a daemon that speaks another protocol version.
var ErrProtocol = errors.New("daemon protocol mismatch")

func (s *Shard) checkHello(ctx context.Context) error {
	s.mu.Lock()
	done := s.hello
	s.mu.Unlock()
	if done {
		return nil
	}
	want := uint32(daemonv1.ProtocolVersion_PROTOCOL_VERSION_CURRENT)
	resp, err := s.client.Hello(ctx, &daemonv1.HelloRequest{ProtocolVersion: want})
	if err != nil {
		return fmt.Errorf("daemon %s: hello: %w", s.Addr, err)
	}
	if resp.GetProtocolVersion() != want {
		return fmt.Errorf("%w: daemon %s speaks %d, proxy speaks %d", ErrProtocol, s.Addr, resp.GetProtocolVersion(), want)
	}
	s.mu.Lock()
	s.hello = true
	s.mu.Unlock()
	return nil
}

// Query runs one operation.
func (s *Shard) Query(ctx context.Context, req *daemonv1.QueryRequest) (*daemonv1.QueryResponse, error) {
	if err := s.checkHello(ctx); err != nil {
		return nil, err
	}
	return s.client.Query(ctx, req)
}

// Capabilities asks what a workspace would use and whether it is warm.
func (s *Shard) Capabilities(ctx context.Context, k Key) (*daemonv1.CapabilitiesResponse, error) {
	if err := s.checkHello(ctx); err != nil {
		return nil, err
	}
	return s.client.Capabilities(ctx, &daemonv1.CapabilitiesRequest{Workspace: k.proto()})
}

// Delete removes a workspace.
func (s *Shard) Delete(ctx context.Context, k Key) (bool, error) {
	if err := s.checkHello(ctx); err != nil {
		return false, err
	}
	resp, err := s.client.DeleteWorkspace(ctx, &daemonv1.DeleteWorkspaceRequest{Workspace: k.proto()})
	return resp.GetDeleted(), err
}

// File is one file of a pushed tree.
type File struct {
	Path       string
	Data       []byte
	SHA256     string
	Executable bool
}

// Push streams a tree: the header with the manifest, then the files' bytes
// in manifest order, in ChunkSize messages. A daemon that already holds the
// workspace may answer before the stream ends; that is not an error.
func (s *Shard) Push(ctx context.Context, k Key, prepareID string, files []File) (*daemonv1.PrepareResponse, error) {
	if err := s.checkHello(ctx); err != nil {
		return nil, err
	}
	stream, err := s.client.Prepare(ctx)
	if err != nil {
		return nil, fmt.Errorf("prepare: %w", err)
	}
	hdr := &daemonv1.PrepareHeader{Workspace: k.proto(), PrepareId: prepareID, Files: make([]*daemonv1.FileEntry, len(files))}
	for i, f := range files {
		hdr.Files[i] = &daemonv1.FileEntry{Path: f.Path, Size: uint64(len(f.Data)), Sha256: f.SHA256, Executable: f.Executable}
	}
	if err := stream.Send(&daemonv1.PrepareRequest{Part: &daemonv1.PrepareRequest_Header{Header: hdr}}); err != nil {
		return closeAndRecv(stream, err)
	}
	// Concatenate small files into full chunks; send large files' bytes
	// straight from their slices without copying.
	chunk := make([]byte, 0, ChunkSize)
	send := func(b []byte) error {
		return stream.Send(&daemonv1.PrepareRequest{Part: &daemonv1.PrepareRequest_Data{Data: b}})
	}
	for _, f := range files {
		data := f.Data
		for len(data) > 0 {
			if len(chunk) == 0 && len(data) >= ChunkSize {
				if err := send(data[:ChunkSize]); err != nil {
					return closeAndRecv(stream, err)
				}
				data = data[ChunkSize:]
				continue
			}
			n := min(ChunkSize-len(chunk), len(data))
			chunk = append(chunk, data[:n]...)
			data = data[n:]
			if len(chunk) == ChunkSize {
				if err := send(chunk); err != nil {
					return closeAndRecv(stream, err)
				}
				chunk = make([]byte, 0, ChunkSize)
			}
		}
	}
	if len(chunk) > 0 {
		if err := send(chunk); err != nil {
			return closeAndRecv(stream, err)
		}
	}
	return stream.CloseAndRecv()
}

// closeAndRecv turns a Send error into the daemon's real answer: gRPC
// reports io.EOF from Send when the server has already replied.
func closeAndRecv(stream grpc.ClientStreamingClient[daemonv1.PrepareRequest, daemonv1.PrepareResponse], sendErr error) (*daemonv1.PrepareResponse, error) {
	resp, err := stream.CloseAndRecv()
	if err != nil {
		return nil, fmt.Errorf("prepare: %w", err)
	}
	_ = sendErr
	return resp, nil
}
