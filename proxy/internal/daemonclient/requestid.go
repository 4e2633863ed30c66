package daemonclient

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// RequestIDHeader is the gRPC metadata key that carries the proxy's request
// id to the daemon, which logs it with what it did for the request.
const RequestIDHeader = "x-request-id"

type requestIDKey struct{}

// WithRequestID returns ctx carrying id to every daemon call made with it.
// The id must already be sane (the HTTP layer checks callers' ids).
func WithRequestID(ctx context.Context, id string) context.Context {
	if id == "" {
		return ctx
	}
	return context.WithValue(ctx, requestIDKey{}, id)
}

func withMetadata(ctx context.Context) context.Context {
	if id, ok := ctx.Value(requestIDKey{}).(string); ok {
		return metadata.AppendToOutgoingContext(ctx, RequestIDHeader, id)
	}
	return ctx
}

func unaryRequestID(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	return invoker(withMetadata(ctx), method, req, reply, cc, opts...)
}

func streamRequestID(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return streamer(withMetadata(ctx), desc, cc, method, opts...)
}
