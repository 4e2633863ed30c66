package depstest

import (
	"archive/tar"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"go.yaml.in/yaml/v3"
)

// CorpusDir is the real-repository corpus (shared/corpus, beside the
// clone) as seen from a package three levels below the repository root,
// daemon/internal/<package>, where tests run.
const CorpusDir = "../../../../shared/corpus"

// CorpusFiles reads the regular files of the corpus snapshot repo (a
// <repo>.tar.gz holding one top folder named repo) that keep accepts, by
// path in the repository. A missing snapshot is os.ErrNotExist, for the
// caller to skip on.
func CorpusFiles(repo string, keep func(name string) bool) (map[string]string, error) {
	f, err := os.Open(filepath.Join(CorpusDir, repo+".tar.gz"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("corpus %s: %w", repo, err)
	}
	defer zr.Close()
	tr := tar.NewReader(zr)
	out := map[string]string{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("corpus %s: %w", repo, err)
		}
		name, ok := strings.CutPrefix(h.Name, repo+"/")
		if !ok || h.Typeflag != tar.TypeReg || !keep(name) {
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			return nil, fmt.Errorf("corpus %s: %w", repo, err)
		}
		out[name] = string(b)
	}
}

// PrunePNPM keeps only the named direct dependencies of a pnpm-lock.yaml's
// root importer, so that a test installs a real lockfile's few small
// packages (with what they depend on) rather than all of them.
func PrunePNPM(data string, keep ...string) (string, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(data), &doc); err != nil {
		return "", err
	}
	root := child(doc.Content[0], "importers")
	if root != nil {
		root = child(root, ".")
	}
	if root == nil {
		return "", errors.New("no root importer")
	}
	want := map[string]bool{}
	for _, k := range keep {
		want[k] = true
	}
	for i := 0; i+1 < len(root.Content); i += 2 {
		deps := root.Content[i+1]
		var kept []*yaml.Node
		for j := 0; j+1 < len(deps.Content); j += 2 {
			if want[deps.Content[j].Value] {
				kept = append(kept, deps.Content[j], deps.Content[j+1])
			}
		}
		deps.Content = kept
	}
	b, err := yaml.Marshal(&doc)
	return string(b), err
}

func child(m *yaml.Node, key string) *yaml.Node {
	if m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}
