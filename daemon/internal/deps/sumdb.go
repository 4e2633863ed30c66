package deps

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"golang.org/x/mod/module"
	"golang.org/x/mod/sumdb"
	"golang.org/x/mod/sumdb/note"
)

// DefaultGoSumDB is the checksum database the go command trusts by
// default: sum.golang.org and its well-known public key.
const DefaultGoSumDB = "sum.golang.org+033de0ae+Ac4zctda0e5eza+HJyk9SxEdh+s3Ux18htTTAD8OuAn8"

// Bounds on what the checksum database client keeps and reads.
const (
	maxSumDBFile  = 1 << 20
	maxSumDBCache = 4096
)

// checksumDB verifies go.sum lines a repository lacks against the checksum
// database, reached only through the operator's mirrors (GOPROXY's
// <proxy>/sumdb/<name>/… protocol). Its tiles and signed tree heads live in
// memory, per Fetcher: a tree head older than one already seen is refused
// by the client (no rollback while the daemon runs).
type checksumDB struct {
	name   string
	key    string
	mu     sync.Mutex
	latest []byte
	cache  map[string][]byte
}

// newChecksumDB parses the verifier key ("name+hash+key"); "" is the
// default and "off" disables verification (then missing lines stay
// warnings).
func newChecksumDB(vkey string) (*checksumDB, error) {
	if vkey == "off" {
		return nil, nil
	}
	if vkey == "" {
		vkey = DefaultGoSumDB
	}
	v, err := note.NewVerifier(vkey)
	if err != nil {
		return nil, fmt.Errorf("checksum database key: %w", err)
	}
	if strings.ContainsAny(v.Name(), "/\\?#%") || v.Name() == "" || strings.Contains(v.Name(), "..") {
		return nil, errors.New("checksum database name is not a plain host name")
	}
	db := &checksumDB{name: v.Name(), key: vkey, cache: map[string][]byte{}}
	return db, nil
}

// phaseOps is the client's view of one phase: reads go through that
// phase's mirror and budget. A client is cheap; one is made per phase over
// the shared cache and tree head.
type phaseOps struct {
	db  *checksumDB
	ctx context.Context
	m   *mirror
}

func (o *phaseOps) ReadRemote(path string) ([]byte, error) {
	var buf bytes.Buffer
	if err := o.m.get(o.ctx, "sumdb/"+o.db.name+path, maxSumDBFile, &buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func (o *phaseOps) ReadConfig(file string) ([]byte, error) {
	if file == "key" {
		return []byte(o.db.key), nil
	}
	if file == o.db.name+"/latest" {
		o.db.mu.Lock()
		defer o.db.mu.Unlock()
		return bytes.Clone(o.db.latest), nil
	}
	return nil, fmt.Errorf("unknown config %s", file)
}

func (o *phaseOps) WriteConfig(file string, old, new []byte) error {
	if file != o.db.name+"/latest" {
		return fmt.Errorf("unknown config %s", file)
	}
	o.db.mu.Lock()
	defer o.db.mu.Unlock()
	if !bytes.Equal(o.db.latest, old) {
		return sumdb.ErrWriteConflict
	}
	o.db.latest = bytes.Clone(new)
	return nil
}

func (o *phaseOps) ReadCache(file string) ([]byte, error) {
	o.db.mu.Lock()
	defer o.db.mu.Unlock()
	if b, ok := o.db.cache[file]; ok {
		return b, nil
	}
	return nil, errors.New("not cached")
}

func (o *phaseOps) WriteCache(file string, data []byte) {
	o.db.mu.Lock()
	defer o.db.mu.Unlock()
	if len(o.db.cache) >= maxSumDBCache {
		clear(o.db.cache) // tiles are fetched again; verification is unchanged
	}
	o.db.cache[file] = bytes.Clone(data)
}

func (o *phaseOps) Log(string) {}

// SecurityError: the database contradicts itself or what was seen
// before; the lookup fails, and so the module is not fetched.
func (o *phaseOps) SecurityError(msg string) {}

// sumLookup verifies module versions' go.sum lines for one phase.
type sumLookup struct {
	client *sumdb.Client
	mu     sync.Mutex
	lines  map[string][]string // verified, by "path version[/go.mod]"
	failed map[string]error
}

func (db *checksumDB) forPhase(ctx context.Context, m *mirror) *sumLookup {
	if db == nil {
		return nil
	}
	return &sumLookup{
		client: sumdb.NewClient(&phaseOps{db: db, ctx: ctx, m: m}),
		lines:  map[string][]string{},
		failed: map[string]error{},
	}
}

// lookup returns the verified hashes of v's go.mod and, with zip, of its
// zip, keyed as go.sum keys them ("path version[/go.mod]"), and remembers
// the lines for the overlays.
func (l *sumLookup) lookup(v module.Version, zip bool) (map[string]string, error) {
	if l == nil {
		return nil, errNoSumDB
	}
	out := map[string]string{}
	vers := []string{v.Version + "/go.mod"}
	if zip {
		vers = append(vers, v.Version)
	}
	for _, ver := range vers {
		key := v.Path + " " + ver
		l.mu.Lock()
		lines, ok := l.lines[key]
		err := l.failed[key]
		l.mu.Unlock()
		if !ok && err == nil {
			lines, err = l.client.Lookup(v.Path, ver)
			l.mu.Lock()
			if err != nil {
				l.failed[key] = err
			} else {
				l.lines[key] = lines
			}
			l.mu.Unlock()
		}
		if err != nil {
			return nil, err
		}
		for k, h := range parseGoSum([]byte(strings.Join(lines, "\n"))) {
			if k == key {
				out[k] = h
			}
		}
	}
	return out, nil
}

// verified is every line the phase verified, as go.sum holds them.
func (l *sumLookup) verified() []string {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, ls := range l.lines {
		out = append(out, ls...)
	}
	return out
}

var errNoSumDB = errors.New("no checksum database")
