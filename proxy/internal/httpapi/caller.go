package httpapi

import (
	"net/http"
	"slices"

	"github.com/hanzoai/lsp/proxy/internal/apierr"
	"github.com/hanzoai/lsp/proxy/internal/auth"
	"github.com/hanzoai/lsp/proxy/internal/forge"
)

// forgeCredential is how this request reaches the forge (CONTRACT §3,
// LSP_FORGE_AUTH):
//
//   - bearer, basic: the caller's X-Forge-Token;
//   - sudo: the proxy's admin token acting as the login of the verified
//     claim the operator named (LSP_FORGE_SUDO_CLAIM); the forge kind
//     refuses an administrator login;
//   - jwt: the caller's own bearer JWT, only when its aud names the forge
//     (LSP_FORGE_JWT_AUDIENCE), so a token minted for this service alone is
//     never replayed to the forge.
//
// Without a usable credential the answer is 401 saying so.
func (s *Server) forgeCredential(h http.Header, p *auth.Principal) (forge.Credential, error) {
	switch s.d.ForgeAuth {
	case "sudo":
		if p.Login == "" {
			return forge.Credential{}, apierr.Unauth("the bearer token carries no forge login claim")
		}
		return forge.Credential{Mode: "sudo", Token: s.d.ForgeSudoToken, User: p.Login}, nil
	case "jwt":
		if s.d.ForgeJWTAudience == "" || !slices.Contains(p.Audience, s.d.ForgeJWTAudience) {
			return forge.Credential{}, apierr.Unauth("the bearer token is not meant for the forge (its audience does not name it)")
		}
		raw, err := auth.BearerToken(h.Get("Authorization"))
		if err != nil {
			return forge.Credential{}, apierr.Unauth("a bearer token is required")
		}
		return forge.Credential{Mode: "jwt", Token: raw}, nil
	}
	tok := h.Get("X-Forge-Token")
	if tok == "" || len(tok) > 4096 {
		return forge.Credential{}, apierr.Unauth("a forge credential is required in X-Forge-Token")
	}
	return forge.Credential{Mode: s.d.ForgeAuth, Token: tok}, nil
}

// rateLimit takes one request from org's bucket: 429 rate_limited with
// Retry-After when it is empty. It runs after 401, 400 and 403 and before
// the forge is asked, so a refused request costs the forge nothing.
func (s *Server) rateLimit(org string) error {
	ok, wait := s.d.RateLimit.Allow(org)
	if ok {
		return nil
	}
	e := apierr.New(http.StatusTooManyRequests, apierr.RateLimited, "too many requests for this org; retry after the time in Retry-After")
	e.RetryAfter = wait
	return e
}
