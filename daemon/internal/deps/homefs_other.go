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
