package forge

import (
	"context"
	"testing"
)

// BenchmarkResolve measures a Resolve of the default branch against the
// development forge (which runs git http-backend per request).
func BenchmarkResolve(b *testing.B) {
	fx := newFixture(b, nil)
	f := fx.newForge("")
	ctx := context.Background()
	for b.Loop() {
		if _, err := f.Resolve(ctx, bearer(readerToken), "acme", "app", Rev{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkFetch measures a Fetch of a small tree by its tip commit.
func BenchmarkFetch(b *testing.B) {
	fx := newFixture(b, nil)
	f := fx.newForge("")
	ctx := context.Background()
	for b.Loop() {
		if _, err := f.Fetch(ctx, bearer(readerToken), "acme", "app", fx.c3, Limits{}); err != nil {
			b.Fatal(err)
		}
	}
}
