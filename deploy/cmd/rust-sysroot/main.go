// Command rust-sysroot makes, once at install, the standard-library source
// tree rust-analyzer loads the sysroot from: a copy of Debian's
// rust-web-src library/ (/usr/lib/rustlib/src/rust/library) whose
// cargo metadata resolves offline.
//
// rust-analyzer reads the sysroot with `cargo metadata` on library/'s
// workspace. Debian ships the crates std depends on vendored in
// library/vendor, but no source replacement pointing at them, and the
// workspace's test crates and std's dev- and build-dependencies (rand,
// rand_xorshift, cc) are not vendored: offline, metadata fails and
// rust-analyzer falls back to --no-deps, which loses std's own
// dependencies (std is degraded: hashbrown's HashMap, libc, …). The copy
// gets a .cargo/config.toml replacing crates-io with library/vendor, and
// each dependency cargo reports missing is removed from the manifest of
// the crate that wants it (only dev-, build- and optional dependencies:
// what a library built for analysis never needs), until cargo metadata
// --offline succeeds; the resulting Cargo.lock is written once, here, so
// that nothing under the copy is written at serving time.
//
// Usage: rust-sysroot -src /usr/lib/rustlib/src/rust/library -out DIR
// (DIR/library is made; rerunning with the same source is a no-op). The
// ground truth of the corpus reads the same copy (cargo.sysrootSrc).
package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
)

func main() {
	src := flag.String("src", "/usr/lib/rustlib/src/rust/library", "Debian's standard-library sources (rust-web-src)")
	out := flag.String("out", "", "directory to make the patched copy in (DIR/library)")
	cargo := flag.String("cargo", "/usr/bin/cargo", "cargo (cargo-web)")
	flag.Parse()
	if *out == "" {
		fmt.Fprintln(os.Stderr, "rust-sysroot: -out is required")
		os.Exit(2)
	}
	if err := run(*src, *out, *cargo); err != nil {
		fmt.Fprintln(os.Stderr, "rust-sysroot:", err)
		os.Exit(1)
	}
}

// stampFile records what a finished copy was made from.
const stampFile = ".patched-from"

func run(src, out, cargo string) error {
	stamp, err := sourceStamp(src)
	if err != nil {
		return err
	}
	lib := filepath.Join(out, "library")
	if b, err := os.ReadFile(filepath.Join(lib, stampFile)); err == nil && string(b) == stamp {
		return nil
	}
	tmp := lib + ".new"
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	if out, err := exec.Command("cp", "-a", src, tmp).CombinedOutput(); err != nil {
		return fmt.Errorf("copy %s: %v: %s", src, err, out)
	}
	// The vendored sources by absolute path: cargo resolves a directory
	// source relative to the config file's parent's parent otherwise, and
	// the copy's final place is lib, not tmp; cargo runs here in tmp, so
	// both names are written, the final one last.
	cfg := func(dir string) []byte {
		return []byte("[source.crates-io]\nreplace-with = \"vendored-sources\"\n\n[source.vendored-sources]\ndirectory = \"" + filepath.Join(dir, "vendor") + "\"\n")
	}
	if err := os.MkdirAll(filepath.Join(tmp, ".cargo"), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(tmp, ".cargo", "config.toml"), cfg(tmp), 0o644); err != nil {
		return err
	}
	home, err := os.MkdirTemp("", "rust-sysroot-cargo-home-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(home)
	for i := 0; ; i++ {
		if i == 64 {
			return errors.New("cargo metadata still fails after 64 removals")
		}
		cmd := exec.Command(cargo, "metadata", "--offline", "--format-version", "1")
		cmd.Dir = tmp
		cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + home, "CARGO_HOME=" + home, "RUSTC_BOOTSTRAP=1", "CARGO_NET_OFFLINE=true"}
		var stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = nil, &stderr
		if err := cmd.Run(); err == nil {
			break
		}
		name, manifest, ok := missing(stderr.String())
		if !ok {
			return fmt.Errorf("cargo metadata: %s", strings.TrimSpace(stderr.String()))
		}
		if !strings.HasPrefix(manifest, tmp+"/") {
			return fmt.Errorf("cargo names %s outside the copy", manifest)
		}
		removed, err := dropDependency(filepath.Join(manifest, "Cargo.toml"), name)
		if err != nil {
			return err
		}
		if !removed {
			return fmt.Errorf("%s needs %s, which is not vendored and not a dev-, build- or optional dependency", manifest, name)
		}
		fmt.Printf("rust-sysroot: %s: removed %s (not vendored)\n", strings.TrimPrefix(manifest, tmp+"/"), name)
	}
	if err := os.WriteFile(filepath.Join(tmp, ".cargo", "config.toml"), cfg(lib), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(tmp, stampFile), []byte(stamp), 0o644); err != nil {
		return err
	}
	if err := os.RemoveAll(lib); err != nil {
		return err
	}
	return os.Rename(tmp, lib)
}

// sourceStamp names the source by its Cargo.lock and Cargo.toml (what a
// Debian upgrade of rust-web-src changes).
func sourceStamp(src string) (string, error) {
	h := sha256.New()
	for _, f := range []string{"Cargo.lock", "Cargo.toml", "std/Cargo.toml"} {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			return "", fmt.Errorf("%s: %w (is rust-web-src installed?)", src, err)
		}
		h.Write(b)
	}
	return src + " sha256:" + hex.EncodeToString(h.Sum(nil)) + "\n", nil
}

var (
	missingRE  = regexp.MustCompile("(?:searched package name: |no matching package named )`([A-Za-z0-9_-]+)`")
	requiredRE = regexp.MustCompile("required by package `[^(`]*\\(([^)`]+)\\)`")
)

// missing finds, in cargo's error, the package it could not find and the
// directory of the package that requires it.
func missing(stderr string) (name, dir string, ok bool) {
	m := missingRE.FindStringSubmatch(stderr)
	r := requiredRE.FindStringSubmatch(stderr)
	if m == nil || r == nil {
		return "", "", false
	}
	return m[1], filepath.Clean(r[1]), true
}

var sectionRE = regexp.MustCompile(`^\s*\[([^\]]+)\]\s*$`)

// dropDependency removes name from the dev-, build- and optional
// dependencies of a manifest, and the features that enable it, reporting
// whether anything was removed. A normal, required dependency stays: the
// copy would then no longer be std.
func dropDependency(manifest, name string) (bool, error) {
	data, err := os.ReadFile(manifest)
	if err != nil {
		return false, err
	}
	entry := regexp.MustCompile(`^\s*` + regexp.QuoteMeta(name) + `\s*=`)
	feature := regexp.MustCompile(`"(dep:)?` + regexp.QuoteMeta(name) + `(\??/[^"]*)?"\s*,?\s*`)
	var out []string
	section := ""
	removed := false
	for _, l := range strings.Split(string(data), "\n") {
		if m := sectionRE.FindStringSubmatch(l); m != nil {
			section = m[1]
		}
		dev := strings.HasSuffix(section, "dev-dependencies") || strings.HasSuffix(section, "build-dependencies")
		if entry.MatchString(l) && strings.HasSuffix(section, "dependencies") && (dev || strings.Contains(l, "optional = true")) {
			removed = true
			continue
		}
		if section == "features" {
			l = feature.ReplaceAllString(l, "")
		}
		out = append(out, l)
	}
	if !removed {
		return false, nil
	}
	fi, err := os.Stat(manifest)
	if err != nil {
		return false, err
	}
	return true, os.WriteFile(manifest, []byte(strings.Join(out, "\n")), fi.Mode()&fs.ModePerm|0o200)
}
