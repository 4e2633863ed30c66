package rpc

import (
	"context"
	"log/slog"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// RequestIDHeader is the metadata key the proxy sends its request id in.
const RequestIDHeader = "x-request-id"

type requestIDKey struct{}

// RequestID is the proxy's request id of the call ctx belongs to, or "".
func RequestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey{}).(string)
	return id
}

// requestID reads the id from the call's metadata. It is only an id for
// logs: anything that is not short and plain is ignored.
func requestID(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	v := md.Get(RequestIDHeader)
	if len(v) != 1 || len(v[0]) == 0 || len(v[0]) > 64 {
		return ""
	}
	if strings.IndexFunc(v[0], func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.')
	}) >= 0 {
		return ""
	}
	return v[0]
}

// changes are the calls that change a workspace: logged at info, the rest
// at debug, failures at warn.
var changes = map[string]bool{
	"/lsp.daemon.v1.Daemon/Prepare":         true,
	"/lsp.daemon.v1.Daemon/DeleteWorkspace": true,
}

func logCall(log *slog.Logger, ctx context.Context, method, id string, start time.Time, err error) {
	level := slog.LevelDebug
	switch {
	case err != nil:
		level = slog.LevelWarn
	case changes[method]:
		level = slog.LevelInfo
	}
	if !log.Enabled(ctx, level) {
		// Every warm query passes here at debug level: skip boxing the
		// fields of a record nobody keeps.
		return
	}
	log.Log(ctx, level, "rpc", "method", method, "request_id", id, "code", status.Code(err).String(), "took", time.Since(start))
}

// UnaryRequestID puts the proxy's request id into each call's context and
// logs the call with it.
func UnaryRequestID(log *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		id := requestID(ctx)
		resp, err := handler(context.WithValue(ctx, requestIDKey{}, id), req)
		logCall(log, ctx, info.FullMethod, id, start, err)
		return resp, err
	}
}

// StreamRequestID does the same for streams (Prepare).
func StreamRequestID(log *slog.Logger) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		start := time.Now()
		id := requestID(ss.Context())
		err := handler(srv, &idStream{ServerStream: ss, ctx: context.WithValue(ss.Context(), requestIDKey{}, id)})
		logCall(log, ss.Context(), info.FullMethod, id, start, err)
		return err
	}
}

type idStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *idStream) Context() context.Context { return s.ctx }
