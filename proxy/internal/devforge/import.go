package devforge

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// ErrNotGitRepository: Import was given a directory that is not a git
// repository (or not a directory at all).
var ErrNotGitRepository = errors.New("not a git repository")

// Import serves the local git repository at src as {owner}/{repo}: a bare
// copy of its branches and tags as they are now (committed work only; the
// working tree and its uncommitted changes are not served), with its
// current branch as the default. The copy shares no files with src, so
// nothing the forge does can touch the user's repository. It returns the
// default branch's commit.
func Import(root, owner, repo, src string) (string, error) {
	ctx := context.Background()
	git, err := exec.LookPath("git")
	if err != nil {
		return "", fmt.Errorf("devforge: import: %w", err)
	}
	dir, err := repoDir(root, owner, repo)
	if err != nil {
		return "", err
	}
	gitDir, err := repositoryGitDir(ctx, git, src)
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(filepath.Join(dir, "HEAD")); err == nil {
		return "", fmt.Errorf("devforge: import %s: repository %s/%s exists already", src, owner, repo)
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return "", fmt.Errorf("devforge: import: %w", err)
	}
	// --bare maps src's branches to refs/heads and brings its tags;
	// --no-hardlinks and --no-local copy the objects instead of sharing
	// them.
	if _, err := runGit(ctx, git, filepath.Dir(dir), nil, "clone", "--quiet", "--bare", "--no-local", "--no-hardlinks", "--template=", "--", gitDir, dir); err != nil {
		return "", fmt.Errorf("devforge: import %s: %w", src, err)
	}
	// The copy must not point back at the user's repository.
	if _, err := runGit(ctx, git, dir, nil, "remote", "remove", "origin"); err != nil {
		return "", fmt.Errorf("devforge: import %s: %w", src, err)
	}
	if _, err := runGit(ctx, git, dir, nil, "config", "uploadpack.allowFilter", "true"); err != nil {
		return "", fmt.Errorf("devforge: import %s: %w", src, err)
	}
	out, err := runGit(ctx, git, dir, nil, "rev-parse", "--verify", "--quiet", "HEAD^{commit}")
	if err != nil {
		return "", fmt.Errorf("devforge: import %s: it has no commit on its current branch", src)
	}
	return strings.TrimSpace(string(out)), nil
}

// RepoName is the forge name Import gives a local repository: its
// directory's name, or an error when that is not a valid repository slug.
func RepoName(src string) (string, error) {
	abs, err := filepath.Abs(src)
	if err != nil {
		return "", err
	}
	name := strings.TrimSuffix(filepath.Base(abs), ".git")
	if !namePattern.MatchString(name) {
		return "", fmt.Errorf("devforge: %s: the folder name %q is not a valid repository name (letters, digits, '.', '_', '-')", src, name)
	}
	return name, nil
}

// CheckRepository reports whether src is the top folder of a git
// repository (a work tree or a bare repository), as Import needs it: a
// clear error otherwise, before anything is started or copied.
func CheckRepository(src string) error {
	git, err := exec.LookPath("git")
	if err != nil {
		return fmt.Errorf("devforge: %w", err)
	}
	_, err = repositoryGitDir(context.Background(), git, src)
	return err
}

// repositoryGitDir is the git directory of the repository whose top folder
// is src.
func repositoryGitDir(ctx context.Context, git, src string) (string, error) {
	if fi, err := os.Stat(src); err != nil || !fi.IsDir() {
		return "", fmt.Errorf("devforge: %s: %w", src, ErrNotGitRepository)
	}
	// rev-parse in src itself: a directory inside another repository's
	// work tree is not a repository of its own.
	top, err := runGit(ctx, git, src, nil, "rev-parse", "--path-format=absolute", "--git-dir")
	if err != nil {
		return "", fmt.Errorf("devforge: %s: %w", src, ErrNotGitRepository)
	}
	gitDir := strings.TrimSpace(string(top))
	abs, _ := filepath.Abs(src)
	if gitDir != filepath.Join(abs, ".git") && gitDir != abs {
		return "", fmt.Errorf("devforge: %s: %w (it is inside the repository at %s)", src, ErrNotGitRepository, filepath.Dir(gitDir))
	}
	return gitDir, nil
}
