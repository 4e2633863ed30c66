package auth

import (
	"context"
	"testing"

	"github.com/golang-jwt/jwt/v5"
)

// BenchmarkVerify measures the whole Verify path (parse, key lookup, signature, claims) per algorithm.
// Baseline (BASELINES.md, golang-jwt v5 alone): RS256 31–34 µs, EdDSA 46–48 µs, ES256 72–76 µs.
func BenchmarkVerify(b *testing.B) {
	k := keys(b)
	v := newTestVerifier(b, baseConfig(b))
	for _, key := range []*testKey{k.rsa, k.ec, k.ed} {
		tok := sign(b, key, claims(nil), nil)
		b.Run(key.method.Alg(), func(b *testing.B) {
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := v.Verify(ctx, tok); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkBaselineJWT is golang-jwt on its own (MapClaims, a keyfunc returning the key), for a ratio
// against BenchmarkVerify measured in the same run.
func BenchmarkBaselineJWT(b *testing.B) {
	k := keys(b)
	for _, key := range []*testKey{k.rsa, k.ec, k.ed} {
		tok := sign(b, key, claims(nil), nil)
		parser := jwt.NewParser(jwt.WithValidMethods([]string{key.method.Alg()}))
		keyfunc := func(*jwt.Token) (any, error) { return key.pub, nil }
		b.Run(key.method.Alg(), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := parser.Parse(tok, keyfunc); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
