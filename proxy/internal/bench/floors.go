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

// measureFloors measures each piece n times (p50s). raw holds one direct
// gopls reply per tool, for the decode floor.
func measureFloors(ctx context.Context, n int, daemonSock, databaseURL string, raw map[string]json.RawMessage) (*floors, error) {
	f := &floors{decodes: map[string]time.Duration{}}
	var err error
	if f.echoRT, err = echoFloor(ctx, n); err != nil {
		return nil, fmt.Errorf("echo floor: %w", err)
	}
	if f.rs256, err = rs256Floor(n); err != nil {
		return nil, fmt.Errorf("jwt floor: %w", err)
	}
	f.hmac = timeIt(n, func() error {
		m := hmac.New(sha256.New, []byte("bench-tenant-key-secret"))
		m.Write([]byte("bench-forge-credential-0123456789abcdef"))
		_ = m.Sum(nil)
		return nil
	})
	if f.grpcRT, err = grpcFloor(ctx, n, daemonSock); err != nil {
		return nil, fmt.Errorf("grpc floor: %w", err)
	}
	if f.ledger, err = ledgerFloor(ctx, n, databaseURL); err != nil {
		return nil, fmt.Errorf("ledger floor: %w", err)
	}
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
	return f, nil
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

// echoFloor is an echo v4 POST round trip on loopback with keep-alive, a
// small JSON body read and a small JSON answer: the HTTP part of the path
// with nothing behind it.
func echoFloor(ctx context.Context, n int) (time.Duration, error) {
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
		return 0, err
	}
	srv := &http.Server{Handler: e, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	defer srv.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8, DisableCompression: true}}
	defer client.CloseIdleConnections()
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
	for i := 0; i < 50; i++ {
		if err := call(); err != nil {
			return 0, err
		}
	}
	return timeIt(n, call), nil
}

// rs256Floor is one RS256 verification with golang-jwt v5 (the proxy
// reuses a verification of the same token bytes, so its JWT stage is
// usually below this).
func rs256Floor(n int) (time.Duration, error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return 0, err
	}
	tok, err := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.MapClaims{"sub": "bench", "exp": time.Now().Add(time.Hour).Unix()}).SignedString(key)
	if err != nil {
		return 0, err
	}
	p := jwt.NewParser(jwt.WithValidMethods([]string{"RS256"}), jwt.WithExpirationRequired())
	return timeIt(n, func() error {
		_, err := p.Parse(tok, func(*jwt.Token) (any, error) { return &key.PublicKey, nil })
		return err
	}), nil
}

// grpcFloor is one unary call to the stack's own daemon over its unix
// socket: Hello, which does nothing but answer.
func grpcFloor(ctx context.Context, n int, sock string) (time.Duration, error) {
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	c := daemonv1.NewDaemonClient(conn)
	call := func() error {
		_, err := c.Hello(ctx, &daemonv1.HelloRequest{ProtocolVersion: uint32(daemonv1.ProtocolVersion_PROTOCOL_VERSION_CURRENT)})
		return err
	}
	for i := 0; i < 50; i++ {
		if err := call(); err != nil {
			return 0, err
		}
	}
	return timeIt(n, call), nil
}

// ledgerFloor is one small row per transaction (an INSERT, committed) on
// the stack's Postgres, with the stack's durability settings.
func ledgerFloor(ctx context.Context, n int, url string) (time.Duration, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS bench_floor (id bigserial PRIMARY KEY, org text NOT NULL, at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return 0, err
	}
	defer conn.Exec(context.WithoutCancel(ctx), `DROP TABLE bench_floor`)
	call := func() error {
		_, err := conn.Exec(ctx, `INSERT INTO bench_floor (org) VALUES ($1)`, "bench")
		return err
	}
	for i := 0; i < 50; i++ {
		if err := call(); err != nil {
			return 0, err
		}
	}
	return timeIt(n, call), nil
}
