package deps

import "github.com/hanzoai/lsp/daemon/internal/safefs"

// A home is writable by the jailed servers of every revision of its
// repository, and they may be running while a prepare writes there: any
// directory in it may have been replaced by a link. So the phase touches a
// home only through safefs (descriptors, never following a link, files
// renamed over the old ones) and gives what it creates to the home's owner.
// The home itself lies in a daemon-owned directory.

// openHomeDir opens rel (a slash path of plain names) beneath home,
// making what is missing for the home's owner (directories found keep
// theirs), and returns it with the owner for what is written in it.
func openHomeDir(home, rel string) (*safefs.Dir, safefs.Owner, error) {
	h, err := safefs.Open(home)
	if err != nil {
		return nil, safefs.Keep, err
	}
	defer h.Close()
	o, err := h.Owner()
	if err != nil {
		return nil, safefs.Keep, err
	}
	d, err := h.MkdirAll(rel, 0o755, safefs.MkdirOpts{Owner: o, KeepFound: true})
	if err != nil {
		return nil, safefs.Keep, err
	}
	return d, o, nil
}

// readHome reads the regular file rel beneath home, at most max bytes,
// never through a link.
func readHome(home, rel string, max int64) ([]byte, error) {
	h, err := safefs.Open(home)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	return h.ReadFile(rel, max)
}

// inHome reports whether rel exists beneath home (a link counts, and is
// never followed).
func inHome(home, rel string) bool {
	h, err := safefs.Open(home)
	if err != nil {
		return false
	}
	defer h.Close()
	_, err = h.Lstat(rel)
	return err == nil
}
