package devstack

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestAwaitBuildSeed: the wait ends when the seed's stamp appears, fails at
// once when the daemon has warned that it made none, and fails at its bound
// when neither happens.
func TestAwaitBuildSeed(t *testing.T) {
	newDaemon := func(t *testing.T) *Daemon {
		dir := t.TempDir()
		d := &Daemon{Root: filepath.Join(dir, "root"), LogFile: filepath.Join(dir, "daemon.log")}
		if err := os.MkdirAll(filepath.Join(d.Root, "gobuild-seed"), 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	ctx := context.Background()

	t.Run("made", func(t *testing.T) {
		d := newDaemon(t)
		go func() {
			time.Sleep(300 * time.Millisecond)
			_ = os.WriteFile(filepath.Join(d.Root, "gobuild-seed", "stamp"), []byte("x"), 0o600)
		}()
		if err := d.AwaitBuildSeed(ctx, time.Minute); err != nil {
			t.Fatalf("seed made: %v", err)
		}
	})
	t.Run("not made", func(t *testing.T) {
		d := newDaemon(t)
		line := `level=WARN msg="go build cache seed not made: each workspace's first load builds the standard library itself" err="go list std: exit status 1"` + "\n"
		if err := os.WriteFile(d.LogFile, []byte(line), 0o644); err != nil {
			t.Fatal(err)
		}
		// Not the bound's error: the warning ended the wait.
		err := d.AwaitBuildSeed(ctx, time.Minute)
		if err == nil || !strings.Contains(err.Error(), "made no build seed") || !strings.Contains(err.Error(), "exit status 1") {
			t.Fatalf("seed failed: %v", err)
		}
	})
	t.Run("bounded", func(t *testing.T) {
		d := newDaemon(t)
		if err := d.AwaitBuildSeed(ctx, 200*time.Millisecond); err == nil || !strings.Contains(err.Error(), "not made within") {
			t.Fatalf("no seed and no warning: %v", err)
		}
	})
}
