package auth

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"regexp"
	"strings"
)

// loginRE is a forge login as Gitea and Forgejo allow it: letters, digits,
// '-', '_', '.', at most 40, not starting with punctuation. Anything else in
// the claim is not a login and is not passed on.
var loginRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,39}$`)

// loginClaim returns the string claim name of raw, a token Verify has just
// verified (so its payload is the signed one), or "" when the claim is
// absent, not a string, or not a well-formed login. The payload is decoded
// with encoding/json as golang-jwt decodes it, so both read the same value
// even from a payload that repeats a name.
//
// Which claim is safe to name is the operator's decision: it must be set by
// the identity provider from the forge account and be one the user cannot
// change (an immutable user name or a dedicated claim, never a display name
// or an email the user edits).
func loginClaim(raw, name string) string {
	parts := strings.Split(raw, ".")
	if len(parts) != 3 {
		return ""
	}
	payload, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(parts[1], "="))
	if err != nil {
		return ""
	}
	var claims map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(payload))
	if err := dec.Decode(&claims); err != nil {
		return ""
	}
	var login string
	if v, ok := claims[name]; !ok || json.Unmarshal(v, &login) != nil || !loginRE.MatchString(login) {
		return ""
	}
	return login
}
