package auth

import (
	"errors"
	"strings"
	"testing"
)

func TestSelectOrg(t *testing.T) {
	p := &Principal{Subject: "agent-7", Owner: "acme", Orgs: []string{"team.b-2", "widgets"}}
	tests := []struct {
		header string
		want   string
		err    error
	}{
		{"", "acme", nil},           // owner by default
		{"acme", "acme", nil},       // owner named explicitly
		{"widgets", "widgets", nil}, // a member org
		{"team.b-2", "team.b-2", nil},
		{"globex", "", ErrForbidden}, // not a member
		{"ACME", "", ErrForbidden},   // no case folding
		{" acme", "", ErrForbidden},  // no trimming
		{"widgets,acme", "", ErrForbidden},
		{"../acme", "", ErrForbidden},
	}
	for _, tc := range tests {
		got, err := p.SelectOrg(tc.header)
		if got != tc.want || !errors.Is(err, tc.err) {
			t.Errorf("SelectOrg(%q) = %q, %v; want %q, %v", tc.header, got, err, tc.want, tc.err)
		}
		if err != nil && errors.Is(err, ErrUnauthenticated) {
			t.Errorf("SelectOrg(%q): a membership refusal must be 403, not 401", tc.header)
		}
	}
}

func TestHasRole(t *testing.T) {
	p := &Principal{Owner: "acme", Roles: []Role{{"billing", "acme"}, {"admin", "widgets"}}}
	tests := []struct {
		role, org string
		want      bool
	}{
		{"billing", "acme", true},
		{"admin", "widgets", true},
		{"billing", "widgets", false},
		{"admin", "acme", false},
		{"Billing", "acme", false},
		{"", "", false},
	}
	for _, tc := range tests {
		if got := p.HasRole(tc.role, tc.org); got != tc.want {
			t.Errorf("HasRole(%q, %q) = %v; want %v", tc.role, tc.org, got, tc.want)
		}
	}
}

func TestValidOrg(t *testing.T) {
	valid := []string{"a", "0", "acme", "team.b-2", "a_b", "a..", "a-", strings.Repeat("a", 64), "9lives"}
	invalid := []string{"", ".", "..", "-a", "_a", ".a", "Acme", "a b", "a/b", "a:b", "a\x00", "ácme", "a\n",
		strings.Repeat("a", 65), "a+b", "a@b"}
	for _, s := range valid {
		if !ValidOrg(s) {
			t.Errorf("ValidOrg(%q) = false", s)
		}
	}
	for _, s := range invalid {
		if ValidOrg(s) {
			t.Errorf("ValidOrg(%q) = true", s)
		}
	}
}

// TestTenantKeyGolden pins values computed independently with coreutils and OpenSSL:
//
//	printf acme | sha256sum
//	printf acme | openssl dgst -sha256 -hmac tenant-secret
func TestTenantKeyGolden(t *testing.T) {
	tests := []struct {
		secret, org, want string
	}{
		{"", "acme", "822b33ad87c148a0a20a5ba7cd5ebcaa68d36a18e7aad165554903f52ca82757"},
		{"", "team.b-2", "f7db49c26dda41ab9f5339620a9b52a14a66ae3d50a3879b857ff3785ae004a4"},
		{"tenant-secret", "acme", "bd2d43ce45056756016f08aa372a20f9200213c9b11b482eb8ab00ab0a27a976"},
		{"tenant-secret", "team.b-2", "0df654c8794128226a375a30c1f1ef3e2ccebee60fee4fa979a2bf6628d8863d"},
	}
	for _, tc := range tests {
		got := TenantKey([]byte(tc.secret), tc.org)
		if got != tc.want {
			t.Errorf("TenantKey(%q, %q) = %s; want %s", tc.secret, tc.org, got, tc.want)
		}
		if !isTenantKeyShape(got) {
			t.Errorf("TenantKey(%q, %q) = %q is not 64 lowercase hex", tc.secret, tc.org, got)
		}
	}
	if TenantKey(nil, "acme") != TenantKey([]byte{}, "acme") {
		t.Error("nil and empty secrets differ")
	}
}

// isTenantKeyShape is the daemon's acceptance rule, ^[0-9a-f]{64}$.
func isTenantKeyShape(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !(s[i] >= '0' && s[i] <= '9' || s[i] >= 'a' && s[i] <= 'f') {
			return false
		}
	}
	return true
}

func TestBearerToken(t *testing.T) {
	const tok = "eyJhbGciOiJFZERTQSJ9.eyJzdWIiOiJ4In0.c2ln"
	tests := []struct {
		header string
		want   string
		reason string
	}{
		{"Bearer " + tok, tok, ""},
		{"bearer " + tok, tok, ""},
		{"BEARER   " + tok + " ", tok, ""},
		{"Bearer abc+/~_-.==", "abc+/~_-.==", ""},
		{"", "", "missing bearer token"},
		{"Bearer", "", "missing bearer token"},
		{"Bearer    ", "", "missing bearer token"},
		{"Basic dXNlcjpwYXNz", "", "not a bearer token"},
		{"Bearer" + tok, "", "not a bearer token"},
		{"Token " + tok, "", "not a bearer token"},
		{"Bearer a b", "", "malformed bearer token"},
		{"Bearer a\tb", "", "malformed bearer token"},
		{"Bearer a=b", "", "malformed bearer token"},
		{"Bearer =abc", "", "malformed bearer token"},
		{"Bearer a,Bearer b", "", "malformed bearer token"},
		{"Bearer a\x00", "", "malformed bearer token"},
		{"Bearer " + strings.Repeat("a", MaxTokenBytes), strings.Repeat("a", MaxTokenBytes), ""},
		{"Bearer " + strings.Repeat("a", MaxTokenBytes+1), "", "token too large"},
		{"Bearer " + strings.Repeat("a", 10*MaxTokenBytes), "", "token too large"},
	}
	for _, tc := range tests {
		name := tc.header
		if len(name) > 40 {
			name = name[:40] + "…"
		}
		got, err := BearerToken(tc.header)
		if tc.reason == "" {
			if err != nil || got != tc.want {
				t.Errorf("BearerToken(%q) = %q, %v; want %q", name, got, err, tc.want)
			}
			continue
		}
		if !errors.Is(err, ErrUnauthenticated) || !strings.HasSuffix(err.Error(), ": "+tc.reason) || got != "" {
			t.Errorf("BearerToken(%q) = %q, %v; want reason %q", name, got, err, tc.reason)
		}
	}
}
