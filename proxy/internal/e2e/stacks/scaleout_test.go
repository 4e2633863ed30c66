package stacks

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hanzoai/lsp/proxy/internal/auth"
	"github.com/hanzoai/lsp/proxy/internal/daemonclient"
	"github.com/hanzoai/lsp/proxy/internal/devforge"
	"github.com/hanzoai/lsp/proxy/internal/devstack"
)

// TestScaleOut runs three daemon shards behind two proxy replicas sharing
// one Postgres and one forge: placement is balanced, a warm key stays on
// its shard whichever replica serves it, a killed shard's keys fail over,
// and while the replicas disagree about that shard's health the customer
// is still charged once per revision.
func TestScaleOut(t *testing.T) {
	dir, err := os.MkdirTemp(tmp, "scaleout-")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var daemons []*devstack.Daemon
	var addrs []string
	for i := 0; i < 3; i++ {
		sock := filepath.Join(dir, fmt.Sprintf("d%d.sock", i))
		d, err := devstack.StartDaemon(ctx, devstack.DaemonOptions{
			Bin: daemonBin, Dir: filepath.Join(dir, fmt.Sprintf("d%d", i)), Listen: "unix://" + sock,
			Servers: devstack.Options{Gopls: gopls},
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(d.Stop)
		daemons, addrs = append(daemons, d), append(addrs, "unix://"+sock)
	}
	// Replica A watches shard health closely; replica B hardly at all, so
	// after a kill the two disagree until B trips over the dead shard.
	s := startStack(t, devstack.Options{Daemons: addrs, ProxyEnv: map[string]string{"LSP_DAEMON_HEALTH_INTERVAL": "100ms"}})
	b, err := s.StartReplica(ctx, map[string]string{"LSP_DAEMON_HEALTH_INTERVAL": "1h"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Stop)
	replicas := []string{s.ProxyURL, b.URL}

	// Balanced placement: the proxies' rendezvous choice over many keys.
	ring, err := daemonclient.New(addrs, daemonclient.Options{HealthInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer ring.Close()
	org := "scaled"
	tenantKey := auth.TenantKey([]byte(tenantSecret), org)
	share := map[string]int{}
	for i := 0; i < 3000; i++ {
		share[ring.Pick(daemonclient.Key{TenantKey: tenantKey, Repo: fmt.Sprintf("r%d", i), Commit: fmt.Sprintf("%040x", i)}).Addr]++
	}
	for _, a := range addrs {
		if n := share[a]; n < 800 || n > 1200 {
			t.Fatalf("placement is unbalanced: %v", share)
		}
	}
	t.Logf("placement of 3000 keys over 3 shards: %v", share)

	// One repository per shard.
	if err := s.Ledger.Credit(ctx, org, 100, "e2e"); err != nil {
		t.Fatal(err)
	}
	s.Forge.Grant("forge-"+org, org+"/*")
	jwt, err := s.Token("alice@"+org, org, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	type key struct {
		repo, commit string
		home         int
	}
	var keys []key
	taken := map[int]bool{}
	for i := 0; len(keys) < 3 && i < 64; i++ {
		repo := fmt.Sprintf("repo%d", i)
		files := map[string]string{}
		for k, v := range devstack.SampleRepo {
			files[k] = v
		}
		files["README.md"] = "# " + repo + "\n"
		commit, err := devforge.CreateRepo(s.ForgeRoot, org, repo, files, "sample")
		if err != nil {
			t.Fatal(err)
		}
		addr := ring.Pick(daemonclient.Key{TenantKey: tenantKey, Repo: repo, Commit: commit}).Addr
		for h, a := range addrs {
			if a == addr && !taken[h] {
				taken[h] = true
				keys = append(keys, key{repo, commit, h})
			}
		}
	}
	if len(keys) != 3 {
		t.Fatalf("could not find a repository for each shard")
	}
	hover := func(replica int, k key) answer {
		t.Helper()
		a := doAt(t, replicas[replica], "POST", "/hover", hoverBody(k.repo), "Authorization", "Bearer "+jwt, "X-Forge-Token", "forge-"+org)
		return a
	}
	tree := func(shard int, k key) bool {
		_, err := os.Stat(filepath.Join(daemons[shard].Root, "trees", tenantKey, k.repo, k.commit))
		return err == nil
	}

	// Each key prepares once, on its own shard, whichever replica asks.
	for i, k := range keys {
		first := hover(i%2, k)
		second := hover((i+1)%2, k)
		if first.status != 200 || second.status != 200 || first.body["prepared"] != true || second.body["prepared"] != false {
			t.Fatalf("%s: first %d %v, second %d %v", k.repo, first.status, first.body["prepared"], second.status, second.body["prepared"])
		}
		for h := range daemons {
			if tree(h, k) != (h == k.home) {
				t.Fatalf("%s: tree on shard %d = %v; want only on shard %d", k.repo, h, tree(h, k), k.home)
			}
		}
	}

	// Kill the first key's shard. A notices; B does not yet.
	dead := keys[0]
	daemons[dead.home].Kill()
	eventually(t, "replica A marks the killed shard down", func() bool {
		v, ok := metric(t, s, `lsp_proxy_daemon_up{shard="`+addrs[dead.home]+`"}`)
		return ok && v == 0
	})
	// A fails over: the key is prepared again on the next shard, free.
	if a := hover(0, dead); a.status != 200 {
		t.Fatalf("failover hover through A: %d %s", a.status, a.raw)
	}
	// B still routes to the dead shard until it finds out; whatever it
	// answers meanwhile, it must end up on the same live shard as A, warm.
	var last answer
	var during []int
	for i := 0; i < 5; i++ {
		last = hover(1, dead)
		during = append(during, last.status)
		if last.status == 200 {
			break
		}
		if last.status != 503 {
			t.Fatalf("B during disagreement: %d %s; want 200 or 503", last.status, last.raw)
		}
	}
	if last.status != 200 || last.body["prepared"] != false {
		t.Fatalf("B after finding the shard dead: %d %s; want a warm answer", last.status, last.raw)
	}
	t.Logf("replica B's answers while it disagreed about the dead shard: %v", during)
	// Every other key is untouched and warm on both replicas.
	for _, k := range keys[1:] {
		for r := range replicas {
			if a := hover(r, k); a.status != 200 || a.body["prepared"] != false {
				t.Fatalf("%s via replica %d: %d %s", k.repo, r, a.status, a.raw)
			}
		}
	}

	// Money: one −2¢ prepare row per revision; the failover's re-prepare
	// is 0¢; nothing held; the balance is 100 − 2 × 3.
	for _, k := range keys {
		var charged, free int
		for _, r := range filter(rows(t, s, org), "prepare") {
			if r.Repo != k.repo {
				continue
			}
			switch {
			case r.AmountCents == -2:
				charged++
			case r.AmountCents == 0 && r.Reason == "reprepare":
				free++
			default:
				t.Fatalf("%s: unexpected prepare row %+v", k.repo, r)
			}
		}
		if charged != 1 || (k == dead) != (free == 1) || free > 1 {
			t.Fatalf("%s: %d charged and %d free prepare rows", k.repo, charged, free)
		}
	}
	if bal := balance(t, s, org); bal.BalanceCents != 94 || bal.HeldCents != 0 {
		t.Fatalf("balance = %+v; want 94, nothing held", bal)
	}
}
