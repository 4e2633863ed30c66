// Package daemontest is what the proxy's tests share about the fake
// daemons they put behind it for fault injection (the real daemon answers
// in the end-to-end suites).
package daemontest

import (
	"errors"
	"io"

	daemonv1 "github.com/hanzoai/lsp/proto/lspdaemon/v1"
	"google.golang.org/grpc"
)

// ReceivePush reads a Prepare stream to its end, as a daemon that accepts
// every push does, and returns the prepare id its header named.
func ReceivePush(st grpc.ClientStreamingServer[daemonv1.PrepareRequest, daemonv1.PrepareResponse]) (string, error) {
	var id string
	for {
		m, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return id, nil
		}
		if err != nil {
			return "", err
		}
		if h := m.GetHeader(); h != nil {
			id = h.GetPrepareId()
		}
	}
}
