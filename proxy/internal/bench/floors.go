package bench

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/golang-jwt/jwt/v5"
	daemonv1 "github.com/hanzoai/lsp/proto/lspdaemon/v1"
	"github.com/jackc/pgx/v5"
	"github.com/labstack/echo/v4"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// floors are the pieces of the warm path measured alone, in the same run as
// the path itself (BASELINES.md, "the floor of our own path"), so the stage
// budget compares each stage with what its piece costs on this machine now.
type floors struct {
	echoRT  time.Duration            // echo v4 POST round trip, loopback keep-alive
	rs256   time.Duration            // one RS256 verification (golang-jwt v5)
	hmac    time.Duration            // the access cache's key: HMAC-SHA256 of the credential
	grpcRT  time.Duration            // gRPC unary round trip to the daemon's own socket (Hello)
	ledger  time.Duration            // one row per transaction on the stack's Postgres
	decodes map[string]time.Duration // per op: decode gopls's reply and encode it again
}

// floorSampler runs each piece once per call of sample, between the
// latency loop's calls, so that the floors meet the same load as the path
// they are compared with (measured after the loop instead, on a busy
// machine, they came out of a quieter minute).
type floorSampler struct {
	pieces  []floorPiece
	closers []func()
	samples map[string][]time.Duration
}

type floorPiece struct {
	name string
	call func() error
}

// newFloorSampler sets every piece up (an echo server, an RSA key and
// token, a gRPC connection to the daemon, a Postgres connection and table)
// and warms each.
func newFloorSampler(ctx context.Context, daemonSock, databaseURL string) (_ *floorSampler, err error) {
	fs := &floorSampler{samples: map[string][]time.Duration{}}
	defer func() {
		if err != nil {
			fs.close()
		}
	}()
	echoCall, closeEcho, err := echoPiece(ctx)
	if err != nil {
		return nil, fmt.Errorf("echo floor: %w", err)
	}
	fs.closers = append(fs.closers, closeEcho)
	rs, err := rs256Piece()
	if err != nil {
		return nil, fmt.Errorf("jwt floor: %w", err)
	}
	grpcCall, closeGRPC, err := grpcPiece(ctx, daemonSock)
	if err != nil {
		return nil, fmt.Errorf("grpc floor: %w", err)
	}
	fs.closers = append(fs.closers, closeGRPC)
	ledgerCall, closeLedger, err := ledgerPiece(ctx, databaseURL)
	if err != nil {
		return nil, fmt.Errorf("ledger floor: %w", err)
	}
	fs.closers = append(fs.closers, closeLedger)
	fs.pieces = []floorPiece{
		{"echo", echoCall}, {"rs256", rs},
		{"hmac", func() error {
			m := hmac.New(sha256.New, []byte("bench-tenant-key-secret"))
			m.Write([]byte("bench-forge-credential-0123456789abcdef"))
			_ = m.Sum(nil)
			return nil
		}},
		{"grpc", grpcCall}, {"ledger", ledgerCall},
	}
	for i := 0; i < 50; i++ {
		for _, p := range fs.pieces {
			if err := p.call(); err != nil {
				return nil, fmt.Errorf("%s floor: %w", p.name, err)
			}
		}
	}
	return fs, nil
}

// sample runs each piece once and keeps its time.
func (fs *floorSampler) sample() {
	for _, p := range fs.pieces {
		t := time.Now()
		if p.call() == nil {
			fs.samples[p.name] = append(fs.samples[p.name], time.Since(t))
		}
	}
}

func (fs *floorSampler) close() {
	for i := len(fs.closers) - 1; i >= 0; i-- {
		fs.closers[i]()
	}
}

// floors are the p50s sampled so far; raw holds one direct gopls reply per
// tool, for the decode floor.
func (fs *floorSampler) floors(n int, raw map[string]json.RawMessage) *floors {
	p50 := func(name string) time.Duration {
		if len(fs.samples[name]) == 0 {
			return 0
		}
		return pct(fs.samples[name], .5)
	}
	f := &floors{echoRT: p50("echo"), rs256: p50("rs256"), hmac: p50("hmac"), grpcRT: p50("grpc"), ledger: p50("ledger"), decodes: map[string]time.Duration{}}
	for name, r := range raw {
		f.decodes[name] = timeIt(n, func() error {
			var v any
			if err := json.Unmarshal(r, &v); err != nil {
				return err
			}
			_, err := json.Marshal(v)
			return err
		})
	}
	return f
}

// timeIt is the p50 of n runs of fn.
func timeIt(n int, fn func() error) time.Duration {
	ds := make([]time.Duration, 0, n)
	for i := 0; i < n; i++ {
		t := time.Now()
		if fn() != nil {
			continue
		}
		ds = append(ds, time.Since(t))
	}
	if len(ds) == 0 {
		return 0
	}
	return pct(ds, .5)
}

// echoPiece is an echo v4 POST round trip on loopback with keep-alive, a
// small JSON body read and a small JSON answer: the HTTP part of the path
// with nothing behind it.
func echoPiece(ctx context.Context) (func() error, func(), error) {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.POST("/x", func(c echo.Context) error {
		var m map[string]any
		if err := json.NewDecoder(c.Request().Body).Decode(&m); err != nil {
			return err
		}
		return c.JSON(http.StatusOK, m)
	})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	srv := &http.Server{Handler: e, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8, DisableCompression: true}}
	body, _ := json.Marshal(hoverBody)
	url := "http://" + l.Addr().String() + "/x"
	call := func() error {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.Body.Close()
	}
	return call, func() { client.CloseIdleConnections(); _ = srv.Close() }, nil
}

// rs256Piece is one RS256 verification with golang-jwt v5 (the proxy
// reuses a verification of the same token bytes, so its JWT stage is
// usually below this).
func rs256Piece() (func() error, error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	tok, err := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.MapClaims{"sub": "bench", "exp": time.Now().Add(time.Hour).Unix()}).SignedString(key)
	if err != nil {
		return nil, err
	}
	p := jwt.NewParser(jwt.WithValidMethods([]string{"RS256"}), jwt.WithExpirationRequired())
	return func() error {
		_, err := p.Parse(tok, func(*jwt.Token) (any, error) { return &key.PublicKey, nil })
		return err
	}, nil
}

// grpcPiece is one unary call to the stack's own daemon over its unix
// socket: Hello, which does nothing but answer.
func grpcPiece(ctx context.Context, sock string) (func() error, func(), error) {
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, nil, err
	}
	c := daemonv1.NewDaemonClient(conn)
	return func() error {
		_, err := c.Hello(ctx, &daemonv1.HelloRequest{ProtocolVersion: uint32(daemonv1.ProtocolVersion_PROTOCOL_VERSION_CURRENT)})
		return err
	}, func() { _ = conn.Close() }, nil
}

// ledgerPiece is one small row per transaction (an INSERT, committed) on
// the stack's Postgres, with the stack's durability settings.
func ledgerPiece(ctx context.Context, url string) (func() error, func(), error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, nil, err
	}
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS bench_floor (id bigserial PRIMARY KEY, org text NOT NULL, at timestamptz NOT NULL DEFAULT now())`); err != nil {
		conn.Close(context.WithoutCancel(ctx))
		return nil, nil, err
	}
	return func() error {
			_, err := conn.Exec(ctx, `INSERT INTO bench_floor (org) VALUES ($1)`, "bench")
			return err
		}, func() {
			bg := context.WithoutCancel(ctx)
			_, _ = conn.Exec(bg, `DROP TABLE bench_floor`)
			conn.Close(bg)
		}, nil
}
