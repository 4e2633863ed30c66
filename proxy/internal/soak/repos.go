package soak

import (
	"fmt"
	"strings"

	"github.com/hanzoai/lsp/proxy/internal/devforge"
	"github.com/hanzoai/lsp/proxy/internal/devstack"
)

// goRepo is a small Go module: the dev sample plus a package of its own, so
// repositories differ and each revision is a workspace of its own.
func goRepo(name string, rev int) map[string]string {
	files := map[string]string{}
	for k, v := range devstack.SampleRepo {
		files[k] = v
	}
	files["calc/calc.go"] = fmt.Sprintf(`// Package calc adds numbers for %s.
package calc

// Revision is bumped by every soak commit.
const Revision = %d

// Add returns a plus b.
func Add(a, b int) int { return a + b }

// Broken is a deliberate type error, so diagnostics has something to say.
var Broken int = "%s"
`, name, rev, name)
	return files
}

// The hostile repositories: each probes one tree rule of CONTRACT §3 with
// bounds the ordinary repositories stay far below (see proxyEnv).
const (
	treeMaxFiles     = 400
	treeMaxFileBytes = 1 << 20
	treeMaxBytes     = 12 << 20
	treeMaxDepth     = 24
	treeMaxDirs      = 200
)

func hostileRepos() map[string]map[string]string {
	base := func(extra map[string]string) map[string]string {
		f := goRepo("hostile", 0)
		for k, v := range extra {
			f[k] = v
		}
		return f
	}
	many := map[string]string{}
	for i := 0; i < treeMaxFiles+10; i++ {
		many[fmt.Sprintf("gen/f%03d.txt", i)] = fmt.Sprintf("file %d\n", i)
	}
	bulky := map[string]string{}
	for i := 0; i < treeMaxBytes/(900<<10)+2; i++ {
		// Distinct content per file; compressible, so the forge stays small.
		bulky[fmt.Sprintf("blob/b%02d.txt", i)] = strings.Repeat(fmt.Sprintf("%02d", i), 450<<10)
	}
	deep := strings.Repeat("d/", treeMaxDepth+2) + "x.txt"
	// Few files, each at the end of a chain of directories of its own.
	chains := map[string]string{}
	for i := 0; i < 20; i++ {
		chains[fmt.Sprintf("c%02d/", i)+strings.Repeat("d/", treeMaxDirs/20)+"x.txt"] = "x\n"
	}
	// A blob of every byte value, NULs included.
	var bin strings.Builder
	for i := 0; i < 64<<10; i++ {
		bin.WriteByte(byte(i * 7))
	}
	return map[string]map[string]string{
		"symlinks": base(map[string]string{
			"escape":         devforge.SymlinkPrefix + "../../../../etc/passwd",
			"abs":            devforge.SymlinkPrefix + "/etc/shadow",
			"dangling":       devforge.SymlinkPrefix + "nowhere/at/all",
			"inside.go.link": devforge.SymlinkPrefix + "main.go",
		}),
		"hugefile":  base(map[string]string{"big.txt": strings.Repeat("x", treeMaxFileBytes+1)}),
		"manyfiles": base(many),
		"bulky":     base(bulky),
		"deep":      base(map[string]string{deep: "deep\n"}),
		"chains":    base(chains),
		"binary":    base(map[string]string{"blob.bin": bin.String(), "blob.go": "package main\n\x00\x01\x02\xff\xfe"}),
		"dotdot":    base(map[string]string{"%2e%2e/x.go": "package x\n"}),
	}
}
