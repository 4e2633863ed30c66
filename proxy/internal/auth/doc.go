// Package auth owns the proxy's notion of who is calling and for which org (CONTRACT §2).
//
// A [Verifier] checks the bearer JWT of every /v1/lsp request with golang-jwt/jwt/v5 against keys the
// operator configured, and nothing else: a PEM file of public keys, a JWKS endpoint, and, only when the
// operator both provides a secret file and allows an HS* algorithm, one HMAC secret. There is no built-in
// key; [GenerateDevKey] and [SignDevToken] make a fresh pair for `make run` and tests.
//
// # Choosing the key
//
// A key is chosen by the token's `kid` header AND by the family of its `alg` (RSA for RS*/PS*, EC for
// ES* with the matching curve, OKP for EdDSA, HMAC for HS*). The allow-list is handed to the parser
// (jwt.WithValidMethods) and the keyfunc refuses any key whose type does not belong to the token's
// family, so an RSA public key can never be used as an HMAC secret, and an ES256 token can never be
// checked against an RSA key that happens to carry the same kid. "none" is never allowed.
//
// Key ids:
//   - PEM file: a block may carry an explicit label as a PEM header line `kid: LABEL`. Every key is
//     also reachable by its RFC 7638 JWK thumbprint (base64url SHA-256 of the canonical JWK); a key
//     without a label is known by its thumbprint only. [SignDevToken] uses the thumbprint by default.
//   - JWKS: the JWK's `kid`, or its thumbprint when it has none. A JWK's `alg`, when present, further
//     restricts the key to that algorithm; keys with `use` other than "sig", symmetric ("oct") keys and
//     keys that publish private material are ignored.
//   - HMAC: the single secret has no kid; an HS* token must not carry one.
//
// A token without `kid` is accepted only when exactly one configured key can verify its algorithm.
//
// # JWKS caching
//
// The set is fetched when the Verifier is built (a failure there is a start-up error), refreshed in the
// background every few minutes until the ctx given to [NewVerifier] ends or [Verifier.Close] is called,
// and refetched on demand for an unknown kid at most once per 30 s (concurrent callers share one
// fetch). A failed or unusable fetch keeps the previous keys. Responses are bounded in size and key
// count. Outside development mode the URL must be https unless it points at a loopback address.
//
// # Claims
//
// `exp` is required, `nbf` and `iat` are honoured when present, `iss` is checked when configured and
// `aud` is required outside development mode; an optional maximum lifetime caps exp−iat (or exp−nbf, or
// exp−now), all with a small clock leeway. `sub` and `owner` are required; `orgs` and `roles` (each
// "ROLE:ORG") are optional. Every org name must satisfy [ValidOrg]; any violation refuses the whole
// token. All refusals wrap [ErrUnauthenticated] with a short reason that never echoes token content.
//
// The selected org ([Principal.SelectOrg]) is the tenant and the payer; [TenantKey] is what the daemon
// sees of it.
package auth
