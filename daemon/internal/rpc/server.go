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

	"github.com/hanzoai/lsp/daemon/internal/pool"
	"github.com/hanzoai/lsp/daemon/internal/query"
	"github.com/hanzoai/lsp/daemon/internal/workspace"
	daemonv1 "github.com/hanzoai/lsp/proto/lspdaemon/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
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
}

var prepareIDRE = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

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
	k, err := workspace.ParseKey(req.GetWorkspace())
	if err != nil {
		return &daemonv1.QueryResponse{Status: daemonv1.Status_STATUS_INVALID_REQUEST, Message: err.Error()}, nil
	}
	if p := req.GetPath(); p != "" {
		if err := workspace.CheckPath(p, 1024); err != nil {
			return &daemonv1.QueryResponse{Status: daemonv1.Status_STATUS_INVALID_REQUEST, Message: "bad path: " + err.Error()}, nil
		}
	}
	w, release, ok := s.Pool.Acquire(k)
	if !ok {
		return &daemonv1.QueryResponse{Status: daemonv1.Status_STATUS_NEEDS_TREE}, nil
	}
	defer release()
	return s.Runner.Run(ctx, w, req), nil
}

// Prepare receives a streamed tree.
func (s *Server) Prepare(stream grpc.ClientStreamingServer[daemonv1.PrepareRequest, daemonv1.PrepareResponse]) error {
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
	if !prepareIDRE.MatchString(hdr.GetPrepareId()) {
		return status.Error(codes.InvalidArgument, "prepare: prepare_id is not a UUID")
	}
	ctx := stream.Context()
	prepared, id, err := s.Pool.Prepare(ctx, k, hdr.GetPrepareId(), hdr.GetFiles(), &streamReader{stream: stream})
	if err != nil {
		if errors.Is(err, workspace.ErrInvalid) {
			return status.Error(codes.InvalidArgument, err.Error())
		}
		s.Log.Error("prepare", "workspace", k.String(), "err", err)
		return status.Error(codes.Internal, "prepare failed")
	}
	resp := &daemonv1.PrepareResponse{Prepared: prepared, PrepareId: id}
	w, release, ok := s.Pool.Acquire(k)
	if ok {
		defer release()
		var infos []pool.LanguageInfo
		if prepared {
			infos, resp.Warnings = w.Warm(ctx, hdr.GetFiles())
		} else {
			infos = w.Languages()
		}
		resp.Languages = languages(infos)
	}
	s.Log.Info("prepare", "workspace", k.String(), "prepared", prepared, "files", len(hdr.GetFiles()))
	return stream.SendAndClose(resp)
}

// Capabilities reports whether a workspace is warm and what its servers
// negotiated. It never prepares.
func (s *Server) Capabilities(_ context.Context, req *daemonv1.CapabilitiesRequest) (*daemonv1.CapabilitiesResponse, error) {
	k, err := workspace.ParseKey(req.GetWorkspace())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	w, release, ok := s.Pool.Acquire(k)
	if !ok {
		return &daemonv1.CapabilitiesResponse{Languages: languages(s.Pool.Negotiated())}, nil
	}
	defer release()
	infos := w.Languages()
	if len(infos) == 0 {
		infos = s.Pool.Negotiated()
	}
	return &daemonv1.CapabilitiesResponse{Warm: true, PrepareId: w.PrepareID, Languages: languages(infos)}, nil
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
		})
	}
	return out
}

// streamReader reads the data messages of a prepare stream as one byte
// stream.
type streamReader struct {
	stream grpc.ClientStreamingServer[daemonv1.PrepareRequest, daemonv1.PrepareResponse]
	buf    []byte
}

func (r *streamReader) Read(p []byte) (int, error) {
	for len(r.buf) == 0 {
		msg, err := r.stream.Recv()
		if err == io.EOF {
			return 0, io.EOF
		}
		if err != nil {
			return 0, fmt.Errorf("prepare stream: %w", err)
		}
		if msg.GetHeader() != nil {
			return 0, fmt.Errorf("%w: a second header in the stream", workspace.ErrInvalid)
		}
		r.buf = msg.GetData()
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}
