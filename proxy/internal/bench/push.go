package bench

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/hanzoai/lsp/proxy/internal/daemonclient"
)

// pushFigures is the tree push over gRPC on a unix socket: the daemon
// receives, checks every file's SHA-256, writes and publishes the tree.
type pushFigures struct {
	files int
	bytes int64
	took  time.Duration
}

func runPush(ctx context.Context, sock string) (*pushFigures, error) {
	pool, err := daemonclient.Dial([]string{"unix://" + sock}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	const files, size = 200, 512 << 10 // 100 MiB
	tree := make([]daemonclient.File, files)
	var total int64
	for i := range tree {
		data := make([]byte, size)
		_, _ = rand.Read(data)
		sum := sha256.Sum256(data)
		tree[i] = daemonclient.File{Path: fmt.Sprintf("pkg%02d/file%03d.bin", i/20, i), Data: data, SHA256: hex.EncodeToString(sum[:])}
		total += size
	}
	random := func(n int) string {
		b := make([]byte, n)
		_, _ = rand.Read(b)
		return hex.EncodeToString(b)
	}
	f := &pushFigures{files: files, bytes: total}
	// Best of three fresh workspaces: the figure is the path's capacity.
	for i := 0; i < 3; i++ {
		k := daemonclient.Key{TenantKey: random(32), Repo: "pushbench", Commit: random(20)}
		id := random(4) + "-" + random(2) + "-4" + random(2)[1:] + "-8" + random(2)[1:] + "-" + random(6)
		shard := pool.Pick(k)
		start := time.Now()
		resp, err := shard.Push(ctx, k, id, tree)
		took := time.Since(start)
		if err != nil {
			return nil, fmt.Errorf("push: %w", err)
		}
		if !resp.GetPrepared() {
			return nil, fmt.Errorf("push: the daemon did not prepare a fresh workspace")
		}
		if f.took == 0 || took < f.took {
			f.took = took
		}
		if _, err := shard.Delete(ctx, k); err != nil {
			return nil, err
		}
	}
	return f, nil
}

func printPush(w io.Writer, f *pushFigures) {
	mbs := float64(f.bytes) / 1e6 / f.took.Seconds()
	verdict := "met"
	if mbs < 200 {
		verdict = "MISSED"
	}
	fmt.Fprintf(w, "\nTree push over gRPC, unix socket: %d files, %d MiB in %s, %.0f MB/s (verified and published by the daemon; target ≥ 200 MB/s) %s\n",
		f.files, f.bytes>>20, f.took.Round(time.Millisecond), mbs, verdict)
}
