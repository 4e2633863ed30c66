package deps

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
)

// errNotServed: every mirror answered 404 or 410 (a private or missing
// module).
var errNotServed = errors.New("not served by the mirror")

// errTooLarge: a file or the phase's byte budget ran over its bound.
var errTooLarge = errors.New("over the size bound")

// mirror fetches files from the operator's mirrors and nowhere else.
type mirror struct {
	bases  []*url.URL
	client *http.Client
	// left is the phase's remaining byte budget.
	left *atomic.Int64
}

func newClient(bases []*url.URL) *http.Client {
	return &http.Client{
		Transport: http.DefaultTransport,
		// A redirect may stay on the mirror's own scheme and host only: the
		// phase reaches nothing the operator did not name.
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) >= 5 {
				return errors.New("too many redirects")
			}
			for _, b := range bases {
				if req.URL.Scheme == b.Scheme && req.URL.Host == b.Host && req.URL.User == nil {
					return nil
				}
			}
			return errors.New("redirect away from the mirror")
		},
	}
}

// get copies rel (a slash path of safe, already escaped characters) from
// the first mirror that serves it into w, at most limit bytes and within
// the budget.
func (m *mirror) get(ctx context.Context, rel string, limit int64, w io.Writer) error {
	if rel == "" || strings.HasPrefix(rel, "/") || strings.Contains(rel, "..") || strings.ContainsAny(rel, "\\?#%\x00") {
		return fmt.Errorf("get %q: not a plain relative path", rel)
	}
	for _, b := range m.bases {
		body, err := m.open(ctx, b, rel)
		if errors.Is(err, errNotServed) {
			continue
		}
		if err != nil {
			return err
		}
		err = m.copy(w, body, limit)
		body.Close()
		return err
	}
	return errNotServed
}

func (m *mirror) open(ctx context.Context, b *url.URL, rel string) (io.ReadCloser, error) {
	if b.Scheme == "file" {
		f, err := os.Open(filepath.Join(b.Path, filepath.FromSlash(rel)))
		if errors.Is(err, fs.ErrNotExist) {
			return nil, errNotServed
		}
		if err != nil {
			return nil, fmt.Errorf("open %s: %w", rel, err)
		}
		if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
			f.Close()
			return nil, errNotServed
		}
		return f, nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.String()+"/"+rel, nil)
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", rel, err)
	}
	req.Header.Set("User-Agent", "lsp-daemon-deps")
	resp, err := m.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", rel, err)
	}
	switch resp.StatusCode {
	case http.StatusOK:
		return resp.Body, nil
	case http.StatusNotFound, http.StatusGone:
		resp.Body.Close()
		return nil, errNotServed
	default:
		resp.Body.Close()
		return nil, fmt.Errorf("get %s: status %d", rel, resp.StatusCode)
	}
}

// copy reads at most limit bytes, charging each to the budget.
func (m *mirror) copy(w io.Writer, r io.Reader, limit int64) error {
	buf := make([]byte, 32<<10)
	var n int64
	for {
		k, err := r.Read(buf)
		if k > 0 {
			n += int64(k)
			if n > limit || m.left.Add(-int64(k)) < 0 {
				return errTooLarge
			}
			if _, werr := w.Write(buf[:k]); werr != nil {
				return werr
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}
