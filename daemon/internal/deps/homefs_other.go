//go:build !linux

package deps

import "errors"

type homeDir struct{}

func openHomeDir(home, rel string) (*homeDir, error) {
	return nil, errors.New("writing in a home needs Linux")
}

func (d *homeDir) Close() error { return nil }

func (d *homeDir) writeFile(name string, data []byte, perm uint32) error {
	return errors.New("writing in a home needs Linux")
}

func findHomeDir(home, rel string) (*homeDir, error) { return openHomeDir(home, rel) }

func readHome(home, rel string, max int64) ([]byte, error) {
	return nil, errors.New("reading in a home needs Linux")
}

func inHome(home, rel string) bool { return false }

func (d *homeDir) moveIn(srcDir, name string, readOnlyDir bool) (bool, error) {
	return false, errors.New("writing in a home needs Linux")
}
