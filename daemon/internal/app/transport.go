package app

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"strings"

	"github.com/hanzoai/lsp/daemon/internal/config"
	"github.com/hanzoai/lsp/daemon/internal/rpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// serverOptions are the gRPC server's transport and interceptors: mutual
// TLS on a host:port listener (the proxy must present a certificate signed
// by LSP_DAEMON_TLS_CLIENT_CA; TLS 1.3 only), and the proxy's request id in
// every call's context and log line.
func serverOptions(env *config.Env, log *slog.Logger) ([]grpc.ServerOption, error) {
	opts := []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(rpc.UnaryRequestID(log)),
		grpc.ChainStreamInterceptor(rpc.StreamRequestID(log)),
		// Calls run on long-lived workers rather than a fresh goroutine
		// each: a fresh goroutine's stack grows (copied, 2 → 16 KiB) through
		// every query's JSON decoding, a tenth of the daemon's CPU per
		// warm query in profiles. When all are busy grpc starts a goroutine.
		grpc.NumStreamWorkers(uint32(4 * runtime.GOMAXPROCS(0))),
	}
	if strings.HasPrefix(env.Listen, "unix://") {
		return opts, nil
	}
	cfg, err := serverTLS(env.TLSCert, env.TLSKey, env.TLSClientCA)
	if err != nil {
		return nil, err
	}
	return append(opts, grpc.Creds(credentials.NewTLS(cfg))), nil
}

func serverTLS(certFile, keyFile, clientCAFile string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("LSP_DAEMON_TLS_CERT/KEY: %w", err)
	}
	pem, err := os.ReadFile(clientCAFile)
	if err != nil {
		return nil, fmt.Errorf("LSP_DAEMON_TLS_CLIENT_CA: %w", err)
	}
	cas := x509.NewCertPool()
	if !cas.AppendCertsFromPEM(pem) {
		return nil, errors.New("LSP_DAEMON_TLS_CLIENT_CA: no certificate in the file")
	}
	return &tls.Config{
		Certificates: []tls.Certificate{cert},
		ClientCAs:    cas,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS13,
	}, nil
}
