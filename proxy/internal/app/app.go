// Package app wires the proxy from its configuration and runs it until the
// context ends: verifier, forge, ledger, daemon pool, operation service and
// HTTP API. cmd/lsp-proxy is a thin main around Run; tests and `lspctl dev`
// run it in-process.
package app

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/hanzoai/lsp/proxy/internal/auth"
	"github.com/hanzoai/lsp/proxy/internal/config"
	"github.com/hanzoai/lsp/proxy/internal/daemonclient"
	"github.com/hanzoai/lsp/proxy/internal/forge"
	"github.com/hanzoai/lsp/proxy/internal/httpapi"
	"github.com/hanzoai/lsp/proxy/internal/ledger"
	"github.com/hanzoai/lsp/proxy/internal/listener"
	"github.com/hanzoai/lsp/proxy/internal/operation"
	"github.com/hanzoai/lsp/proxy/internal/ratelimit"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Run serves until ctx ends, then shuts down gracefully: the listener
// closes, in-flight requests (and the prepares they charge) finish within
// cfg.ShutdownGrace. ready, when not nil, receives the bound address.
func Run(ctx context.Context, cfg *config.Config, log *slog.Logger, ready func(addr string)) error {
	return RunWith(ctx, cfg, log, ready, Options{})
}

// Options are seams for the bench, never configuration: an operator cannot
// reach them.
type Options struct {
	// WrapLedger, when set, wraps the ledger the operation path writes to
	// (the bench compares the real ledger with a no-op one).
	WrapLedger func(operation.Ledger) operation.Ledger
}

// RunWith is Run with seams.
func RunWith(ctx context.Context, cfg *config.Config, log *slog.Logger, ready func(addr string), opts Options) error {
	if cfg.DevMode {
		log.Warn("LSP_DEV=1: development mode (audience not required, tenant key secret optional, plain-http forge and JWKS allowed)")
	}
	verifier, err := auth.NewVerifier(ctx, auth.Config{
		KeysFile:       cfg.JWTKeys,
		JWKSURL:        cfg.JWKSURL,
		HMACSecretFile: cfg.JWTHMACFile,
		Issuer:         cfg.JWTIssuer,
		Audience:       cfg.JWTAudience,
		Algs:           cfg.JWTAlgs,
		MaxTTL:         cfg.JWTMaxTTL,
		DevMode:        cfg.DevMode,
		LoginClaim:     cfg.ForgeSudoClaim,
	}, &http.Client{Timeout: 10 * time.Second}, log)
	if err != nil {
		return fmt.Errorf("identity: %w", err)
	}
	defer verifier.Close()

	led, err := ledger.Open(ctx, cfg.DatabaseURL, log)
	if err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	defer led.Close()
	sweepCtx, stopSweep := context.WithCancel(ctx)
	swept := make(chan struct{})
	go sweepHolds(sweepCtx, led, holdSweepInterval, log, swept)
	defer func() { stopSweep(); <-swept }() // runs before led.Close
	kept := make(chan struct{})
	go keepUsage(sweepCtx, led, cfg.UsageRetention, usageInterval, log, kept)
	defer func() { stopSweep(); <-kept }()
	marked := make(chan struct{})
	go markIDs(sweepCtx, led, ledger.MarkInterval, log, marked)
	defer func() { stopSweep(); <-marked }()

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	dopts, err := DaemonOptions(cfg, log)
	if err != nil {
		return fmt.Errorf("daemons: %w", err)
	}
	dopts.Registry = reg
	pool, err := daemonclient.New(cfg.Daemons, dopts)
	if err != nil {
		return fmt.Errorf("daemons: %w", err)
	}
	defer pool.Close()

	sudo, err := sudoToken(cfg)
	if err != nil {
		return fmt.Errorf("forge: %w", err)
	}
	secret := []byte(cfg.TenantKeySecret)
	cacheSecret := make([]byte, 32)
	_, _ = rand.Read(cacheSecret) // access-cache keys never leave this process
	fg := newForge(cfg, cacheSecret, log)
	defer forge.ReleaseHeld()

	var opLedger operation.Ledger = led
	if opts.WrapLedger != nil {
		opLedger = opts.WrapLedger(led)
	}
	opCfg := operation.Config{
		PrepareCents:      cfg.PrepareCents,
		PrepareGrace:      cfg.PrepareGrace,
		PrepareTimeout:    cfg.PrepareTimeout,
		RequestTimeout:    cfg.RequestTimeout,
		Limits:            treeLimits(cfg),
		Owners:            cfg.ForgeOwners,
		MaxPrepares:       cfg.MaxPrepares,
		MaxPreparesPerOrg: cfg.MaxPreparesPerOrg,
	}
	ops := operation.New(fg, opLedger, pool, opCfg, log, reg)
	settled := make(chan struct{})
	// A hold is settled once no push of its can still be running.
	go settleHolds(sweepCtx, ops, led, cfg.HoldSettleInterval, opCfg.PushStarted()+cfg.PrepareTimeout, log, settled)
	defer func() { stopSweep(); <-settled }() // runs before pool.Close: it asks the daemons
	api := httpapi.New(httpapi.Deps{
		Verifier:        verifier,
		Ops:             ops,
		TenantKeySecret: secret,
		CursorSecret:    derive(secret, "cursor"),
		ForgeAuth:       cfg.ForgeAuth,
		RequestTimeout:  cfg.RequestTimeout,
		PrepareTimeout:  cfg.PrepareTimeout,
		Ready:           []httpapi.Pinger{led, pool},
		Registry:        reg,
		Log:             log,
		Money:           led,
		LedgerSettle:    cfg.LedgerSettle,
		// A retry may take over an Idempotency-Key only once a dead attempt's hold is gone.
		IdempotencyLease:    opCfg.HoldTTL(),
		IdempotencyMaxBytes: cfg.IdempotencyMaxBytes,
		ForgeSudoToken:      sudo,
		ForgeJWTAudience:    cfg.ForgeJWTAudience,
		RateLimit:           ratelimit.New(cfg.RateLimit, cfg.RateBurst),
		MaxInFlightPerOrg:   cfg.MaxInFlightPerOrg,
		Issuer:              cfg.JWTIssuer,
		MCPAllowedOrigins:   cfg.MCPAllowedOrigins,
		PublicURL:           cfg.PublicURL,
		MetricsApart:        cfg.MetricsListen != "",
		MCP: httpapi.MCPLimits{
			PerPrincipal: cfg.MCPSessionsPerPrincipal, PerOrg: cfg.MCPSessionsPerOrg, Total: cfg.MCPSessions,
			Rate: cfg.MCPSessionRate, Burst: cfg.MCPSessionBurst, Idle: cfg.MCPSessionIdle,
		},
	})

	lc := listenerConfig(cfg)
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	srv := listener.Server(api.Handler(), lc)
	errc := make(chan error, 2)
	var msrv *http.Server
	if cfg.MetricsListen != "" {
		mln, err := net.Listen("tcp", cfg.MetricsListen)
		if err != nil {
			ln.Close()
			return fmt.Errorf("metrics listen: %w", err)
		}
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		msrv = listener.Server(mux, lc)
		log.Info("metrics listening", "addr", mln.Addr().String())
		go func() { errc <- msrv.Serve(listener.Limit(mln, lc)) }()
	}
	log.Info("proxy listening", "addr", ln.Addr().String(), "daemons", len(cfg.Daemons), "forge_kind", cfg.ForgeKind)
	if ready != nil {
		ready(ln.Addr().String())
	}
	go func() { errc <- srv.Serve(listener.Limit(ln, lc)) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	log.Info("proxy shutting down", "grace", cfg.ShutdownGrace)
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownGrace)
	defer cancel()
	if msrv != nil {
		_ = msrv.Close()
	}
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("shutdown: %w", err)
	}
	// Prepares run detached from their clients: one whose client left is
	// still pushing. Wait for it to be captured (or released) before the
	// ledger and the daemon connections close.
	if err := ops.Wait(sctx); err != nil {
		log.Warn("shutdown: prepares still running when the grace ended; their holds expire or are captured by the next answer", "err", err)
	}
	return nil
}

// listenerConfig is the connection bounds of cfg; 0 there means no bound.
func listenerConfig(cfg *config.Config) listener.Config {
	off := func(n int) int {
		if n == 0 {
			return -1
		}
		return n
	}
	return listener.Config{
		MaxConnsPerAddr: off(cfg.MaxConnsPerAddr),
		MaxConns:        off(cfg.MaxConns),
		HeaderRead:      cfg.HeaderReadTimeout,
		BodyRead:        cfg.BodyReadTimeout,
		Write:           cfg.WriteTimeout,
		Idle:            cfg.IdleTimeout,
	}
}

// forgeHTTPClient never follows redirects: a credential must not travel to
// wherever a forge (or an attacker in its path) points.
func forgeHTTPClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 64
	return &http.Client{
		Transport: t,
		Timeout:   30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}

// derive makes a purpose-bound key from the tenant-key secret, so cursors
// verify on every replica; with no secret, a random per-process key.
func derive(secret []byte, purpose string) []byte {
	if len(secret) == 0 {
		b := make([]byte, 32)
		_, _ = rand.Read(b)
		return b
	}
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("lsp-proxy/" + purpose))
	return m.Sum(nil)
}
