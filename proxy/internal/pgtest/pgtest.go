// Package pgtest gives tests a real, fresh, migrated Postgres database each, cheaply.
//
// One server serves a whole test binary: TEST_DATABASE_URL if set (a superuser-ish URL whose database
// is used only to create others), otherwise a throwaway pgcluster started on first use. The schema is
// migrated once into a template database named after the migrations' fingerprint; each test then gets
// `CREATE DATABASE … TEMPLATE` of it, which takes milliseconds. Test binaries sharing one server
// (TEST_DATABASE_URL) build the template under an advisory lock, and their databases are dropped when
// the test ends.
//
// A package using it calls Main (or Run) from TestMain so that the cluster is stopped and its
// directory removed at the end; without it the cluster still dies with the test binary (parent-death
// signal) and a later run removes the leftover directory.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hanzoai/lsp/migrations"
	"github.com/hanzoai/lsp/proxy/internal/ledger"
	"github.com/hanzoai/lsp/proxy/internal/pgcluster"
	"github.com/hanzoai/lsp/proxy/internal/spawnthread"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"
)

// templateLockKey serialises template creation among test binaries sharing a server.
const templateLockKey int64 = 0x6c73705f746d706c // "lsp_tmpl"

const dirPrefix = "lsp-pgtest-"

type server struct {
	cluster  *pgcluster.Cluster // nil with TEST_DATABASE_URL
	dir      string
	adminURL string
	template string
}

var (
	once    sync.Once
	srv     *server
	srvErr  error
	seq     atomic.Int64
	started atomic.Bool
)

// Main runs the tests, stops the cluster and exits: call it from TestMain.
func Main(m *testing.M) { os.Exit(Run(m)) }

// MainLeakChecked is Main that also fails the binary when goroutines
// outlive its tests (the permanent spawn thread aside), checked after the
// cluster is gone.
func MainLeakChecked(m *testing.M) {
	code := Run(m)
	if code == 0 {
		if err := goleak.Find(goleak.IgnoreTopFunction(spawnthread.Goroutine)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

// Run runs the tests and stops the cluster, returning m.Run's code (for TestMains that check more,
// e.g. goroutine leaks, after the cluster is gone).
func Run(m *testing.M) int {
	code := m.Run()
	if err := Shutdown(); err != nil {
		fmt.Fprintln(os.Stderr, "pgtest:", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// Shutdown stops the cluster started by this package, if any, and removes its directory.
func Shutdown() error {
	if !started.Load() || srv == nil || srv.cluster == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := srv.cluster.Stop(ctx)
	if rmErr := os.RemoveAll(srv.dir); err == nil {
		err = rmErr
	}
	return err
}

func get(t testing.TB) *server {
	t.Helper()
	once.Do(func() {
		started.Store(true)
		srv, srvErr = setup(context.Background())
	})
	if srvErr != nil {
		t.Fatalf("pgtest: %v", srvErr)
	}
	return srv
}

// NewDatabase returns the URL of a fresh database holding the migrated schema and no rows.
func NewDatabase(t testing.TB) string {
	t.Helper()
	s := get(t)
	return s.create(t, s.template)
}

// NewEmptyDatabase returns the URL of a fresh database without the schema (to test migrations).
func NewEmptyDatabase(t testing.TB) string {
	t.Helper()
	s := get(t)
	return s.create(t, "template0")
}

// Cluster returns the local test cluster, or nil when tests run against TEST_DATABASE_URL (tests that
// need to restart the server or log in as other roles skip then).
func Cluster(t testing.TB) *pgcluster.Cluster {
	t.Helper()
	return get(t).cluster
}

// AdminURL is the URL of the server's maintenance database (for tests that create roles and the like).
func AdminURL(t testing.TB) string {
	t.Helper()
	return get(t).adminURL
}

func (s *server) create(t testing.TB, template string) string {
	t.Helper()
	ctx := context.Background()
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	name := fmt.Sprintf("lsp_test_%d_%d_%s", os.Getpid(), seq.Add(1), hex.EncodeToString(rnd[:]))
	if err := adminExec(ctx, s.adminURL,
		"CREATE DATABASE "+pgx.Identifier{name}.Sanitize()+" TEMPLATE "+pgx.Identifier{template}.Sanitize()); err != nil {
		t.Fatalf("pgtest: create database: %v", err)
	}
	if s.cluster == nil {
		// A shared server keeps what we leave: drop it, ending any session a test forgot to close.
		t.Cleanup(func() {
			if err := adminExec(context.Background(), s.adminURL,
				"DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
				t.Errorf("pgtest: drop database: %v", err)
			}
		})
	}
	u, err := withDatabase(s.adminURL, name)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return u
}

func setup(ctx context.Context) (*server, error) {
	fp, err := migrations.Fingerprint()
	if err != nil {
		return nil, err
	}
	s := &server{template: "lsp_template_" + fp[:16]}
	if u := os.Getenv("TEST_DATABASE_URL"); u != "" {
		s.adminURL = u
	} else {
		sweepStale()
		// Not t.TempDir: as root the cluster runs as postgres, which must be able to reach the directory.
		dir, err := os.MkdirTemp("", dirPrefix+strconv.Itoa(os.Getpid())+"-")
		if err != nil {
			return nil, err
		}
		c, err := pgcluster.Start(ctx, dir, slog.New(slog.DiscardHandler))
		if err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		s.cluster, s.dir, s.adminURL = c, dir, c.URL("postgres")
	}
	if err := s.ensureTemplate(ctx); err != nil {
		if s.cluster != nil {
			_ = s.cluster.Stop(ctx)
			os.RemoveAll(s.dir)
		}
		return nil, fmt.Errorf("template database: %w", err)
	}
	return s, nil
}

func (s *server) ensureTemplate(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, s.adminURL)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", templateLockKey); err != nil {
		return err
	}
	var isTemplate bool
	err = conn.QueryRow(ctx, "SELECT datistemplate FROM pg_database WHERE datname = $1", s.template).Scan(&isTemplate)
	switch {
	case err == nil && isTemplate:
		return nil
	case err == nil:
		// Left half-built by a binary that died: rebuild.
		if _, err := conn.Exec(ctx, "DROP DATABASE "+pgx.Identifier{s.template}.Sanitize()+" WITH (FORCE)"); err != nil {
			return err
		}
	case !errors.Is(err, pgx.ErrNoRows):
		return err
	}
	ident := pgx.Identifier{s.template}.Sanitize()
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+ident+" TEMPLATE template0"); err != nil {
		return err
	}
	u, err := withDatabase(s.adminURL, s.template)
	if err != nil {
		return err
	}
	pool, err := pgxpool.New(ctx, u)
	if err != nil {
		return err
	}
	err = ledger.Migrate(ctx, pool, nil)
	pool.Close()
	if err != nil {
		return err
	}
	// Marked a template only once complete; refusing connections keeps CREATE DATABASE … TEMPLATE
	// from failing on a stray session.
	_, err = conn.Exec(ctx, "ALTER DATABASE "+ident+" WITH IS_TEMPLATE true ALLOW_CONNECTIONS false")
	return err
}

func adminExec(ctx context.Context, adminURL, sql string) error {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql)
	return err
}

// withDatabase returns connString pointing at database name instead.
func withDatabase(connString, name string) (string, error) {
	if strings.HasPrefix(connString, "postgres://") || strings.HasPrefix(connString, "postgresql://") {
		u, err := url.Parse(connString)
		if err != nil {
			return "", fmt.Errorf("parse database URL: %w", err)
		}
		u.Path, u.RawPath = "/"+name, ""
		return u.String(), nil
	}
	// Keyword/value form: a later keyword overrides an earlier one.
	return connString + " dbname='" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(name) + "'", nil
}

// sweepStale removes cluster directories of earlier test binaries that died without Shutdown.
func sweepStale() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), dirPrefix+"*"))
	for _, d := range dirs {
		rest := strings.TrimPrefix(filepath.Base(d), dirPrefix)
		pid, err := strconv.Atoi(strings.SplitN(rest, "-", 2)[0])
		if err != nil || pid == os.Getpid() {
			continue
		}
		if !gone(pid) {
			continue
		}
		// The owner is gone and its postmaster got the parent-death signal; skip it while it is
		// still shutting down.
		if b, err := os.ReadFile(filepath.Join(d, "data", "postmaster.pid")); err == nil {
			if pm, err := strconv.Atoi(strings.SplitN(string(b), "\n", 2)[0]); err == nil && !gone(pm) {
				continue
			}
		}
		os.RemoveAll(d)
	}
}

func gone(pid int) bool { return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) }
