package devforge

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"
)

// Prefixes of a file's content in CreateRepo and Commit that give the entry
// another kind than a regular file. A regular file whose content starts with
// one of them cannot be expressed; that is the price of a flat map.
const (
	// SymlinkPrefix + target makes a symbolic link to target (mode 120000).
	SymlinkPrefix = "symlink:"
	// ExecPrefix + content makes an executable file (mode 100755).
	ExecPrefix = "exec:"
	// SubmodulePrefix + sha makes a submodule entry pointing at commit sha
	// (mode 160000); the commit need not exist anywhere.
	SubmodulePrefix = "submodule:"
)

var hexPattern = regexp.MustCompile(`^([0-9a-f]{40}|[0-9a-f]{64})$`)

// CreateRepo creates the bare repository {root}/{owner}/{repo}.git when it is
// missing (default branch main, partial fetches allowed) and adds a commit on
// main whose tree is exactly files, on top of the current main if any. It
// returns the new commit's sha. See Commit for the meaning of files.
func CreateRepo(root, owner, repo string, files map[string]string, message string) (commit string, err error) {
	return Commit(root, owner, repo, "main", files, message)
}

// Commit adds a commit on branch whose tree is exactly files (path → content;
// SymlinkPrefix, ExecPrefix and SubmodulePrefix select other entry kinds),
// creating the repository as CreateRepo does when it is missing. The commit's
// parent is the branch's current tip, or none for a new branch. It returns
// the new commit's sha.
func Commit(root, owner, repo, branch string, files map[string]string, message string) (string, error) {
	ctx := context.Background()
	git, err := exec.LookPath("git")
	if err != nil {
		return "", fmt.Errorf("devforge: commit: %w", err)
	}
	dir, err := ensureRepo(ctx, git, root, owner, repo)
	if err != nil {
		return "", err
	}
	ref := "refs/heads/" + branch
	if _, err := runGit(ctx, git, dir, nil, "check-ref-format", ref); err != nil {
		return "", fmt.Errorf("devforge: commit: invalid branch %q", branch)
	}
	var parent string
	if out, err := runGit(ctx, git, dir, nil, "rev-parse", "--verify", "--quiet", ref+"^{commit}"); err == nil {
		parent = strings.TrimSpace(string(out))
	}

	// fast-import builds the commit from one stream without a work tree,
	// and expresses symlinks and submodules directly.
	var in bytes.Buffer
	fmt.Fprintf(&in, "commit %s\n", ref)
	fmt.Fprintf(&in, "committer devforge <devforge@localhost> %d +0000\n", time.Now().Unix())
	fmt.Fprintf(&in, "data %d\n%s\n", len(message), message)
	if parent != "" {
		fmt.Fprintf(&in, "from %s\n", parent)
	}
	in.WriteString("deleteall\n")
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		content := files[p]
		qp := quotePath(p)
		switch {
		case strings.HasPrefix(content, SubmodulePrefix):
			sha := strings.TrimPrefix(content, SubmodulePrefix)
			if !hexPattern.MatchString(sha) {
				return "", fmt.Errorf("devforge: commit: submodule %q: not a full sha", p)
			}
			fmt.Fprintf(&in, "M 160000 %s %s\n", sha, qp)
			continue
		case strings.HasPrefix(content, SymlinkPrefix):
			content = strings.TrimPrefix(content, SymlinkPrefix)
			fmt.Fprintf(&in, "M 120000 inline %s\n", qp)
		case strings.HasPrefix(content, ExecPrefix):
			content = strings.TrimPrefix(content, ExecPrefix)
			fmt.Fprintf(&in, "M 100755 inline %s\n", qp)
		default:
			fmt.Fprintf(&in, "M 100644 inline %s\n", qp)
		}
		fmt.Fprintf(&in, "data %d\n%s\n", len(content), content)
	}
	in.WriteString("done\n")
	if _, err := runGit(ctx, git, dir, &in, "fast-import", "--quiet", "--done"); err != nil {
		return "", fmt.Errorf("devforge: commit: %w", err)
	}
	out, err := runGit(ctx, git, dir, nil, "rev-parse", "--verify", ref+"^{commit}")
	if err != nil {
		return "", fmt.Errorf("devforge: commit: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// Tag creates tag name on target (a commit sha or any revision git accepts
// in the repository). A non-empty message makes an annotated tag, otherwise
// a lightweight one. An existing tag of that name is replaced.
func Tag(root, owner, repo, name, target, message string) error {
	ctx := context.Background()
	git, err := exec.LookPath("git")
	if err != nil {
		return fmt.Errorf("devforge: tag: %w", err)
	}
	dir, err := repoDir(root, owner, repo)
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(dir, "HEAD")); err != nil {
		return errNoRepo
	}
	args := []string{"tag", "--force"}
	if message != "" {
		args = append(args, "--annotate", "--message", message)
	}
	args = append(args, "--", name, target)
	if _, err := runGit(ctx, git, dir, nil, args...); err != nil {
		return fmt.Errorf("devforge: tag: %w", err)
	}
	return nil
}

func ensureRepo(ctx context.Context, git, root, owner, repo string) (string, error) {
	dir, err := repoDir(root, owner, repo)
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(filepath.Join(dir, "HEAD")); err == nil {
		return dir, nil
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return "", fmt.Errorf("devforge: create repo: %w", err)
	}
	// No templates: a served repository needs no hooks or samples.
	if _, err := runGit(ctx, git, filepath.Dir(dir), nil, "init", "--quiet", "--bare", "--template=", "--initial-branch=main", dir); err != nil {
		return "", fmt.Errorf("devforge: create repo: %w", err)
	}
	if _, err := runGit(ctx, git, dir, nil, "config", "uploadpack.allowFilter", "true"); err != nil {
		return "", fmt.Errorf("devforge: create repo: %w", err)
	}
	return dir, nil
}

// quotePath quotes a path for fast-import when it needs it (a leading quote
// or a newline); other paths go verbatim.
func quotePath(p string) string {
	if !strings.HasPrefix(p, `"`) && !strings.ContainsAny(p, "\n") {
		return p
	}
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(p); i++ {
		switch c := p[i]; c {
		case '"', '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case '\n':
			b.WriteString(`\n`)
		default:
			if c < 0x20 {
				fmt.Fprintf(&b, `\%03o`, c)
			} else {
				b.WriteByte(c)
			}
		}
	}
	b.WriteByte('"')
	return b.String()
}
