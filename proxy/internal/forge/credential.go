package forge

import (
	"encoding/base64"
	"fmt"
	"log/slog"
	"strings"
)

// Credential is the caller's forge credential and how it reaches the forge.
// Its String, GoString and LogValue never show the token.
type Credential struct {
	// Mode is "bearer" (the default when empty; Authorization: Bearer),
	// "basic" (the token as the password of basic auth), "jwt" (the
	// service's own JWT, forwarded as a bearer token) or "sudo" (Gitea and
	// Forgejo only: Token is the proxy's admin token and User the forge login
	// to act as, sent as the Sudo header; see NewGitea).
	Mode string
	// Token is the caller's forge token (the admin token in sudo mode).
	Token string
	// User is the basic-auth user name, where empty means "x-access-token",
	// which GitHub and Gitea accept with a token as the password; in sudo
	// mode it is the login to act as.
	User string
}

// defaultBasicUser is the user name sent with a token in basic mode.
const defaultBasicUser = "x-access-token"

func (c Credential) String() string {
	mode := c.Mode
	if mode == "" {
		mode = "bearer"
	}
	if c.Token == "" {
		return "forge.Credential{" + mode + ", no token}"
	}
	return "forge.Credential{" + mode + ", token redacted}"
}

// GoString keeps %#v from printing the token.
func (c Credential) GoString() string { return c.String() }

// LogValue keeps slog from printing the token.
func (c Credential) LogValue() slog.Value { return slog.StringValue(c.String()) }

// authorization returns the Authorization header value. A missing or
// unusable token is ErrUnauthenticated; a token that could smuggle header
// syntax (spaces, control characters, non-ASCII) is unusable.
func (c Credential) authorization() (string, error) {
	if c.Token == "" {
		return "", newError("credential", ErrUnauthenticated, "no forge credential given")
	}
	if !headerSafe(c.Token) {
		return "", newError("credential", ErrUnauthenticated, "forge credential is not a usable token")
	}
	switch strings.ToLower(c.Mode) {
	case "", "bearer", "jwt":
		return "Bearer " + c.Token, nil
	case "sudo":
		// Only the Gitea API understands Sudo; sending the admin token
		// without it would act as the admin.
		return "", fmt.Errorf("credential: sudo mode needs the gitea forge kind")
	case "basic":
		user := c.User
		if user == "" {
			user = defaultBasicUser
		}
		if !headerSafe(user) || strings.Contains(user, ":") {
			return "", fmt.Errorf("credential: basic-auth user name is not usable")
		}
		return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+c.Token)), nil
	}
	return "", fmt.Errorf("credential: unsupported forge credential mode %q", c.Mode)
}

// secrets returns the strings that must never be shown: the token and the
// header value carrying it.
func (c Credential) secrets() []string {
	if c.Token == "" {
		return nil
	}
	s := []string{c.Token}
	if h, err := c.authorization(); err == nil {
		s = append(s, h, strings.TrimPrefix(strings.TrimPrefix(h, "Basic "), "Bearer "))
	}
	return s
}

// redact replaces every secret in s; used on text the forge or git sent back
// before it is logged.
func redact(s string, secrets []string) string {
	for _, sec := range secrets {
		if sec != "" {
			s = strings.ReplaceAll(s, sec, "[redacted]")
		}
	}
	return s
}

func headerSafe(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= 0x20 || s[i] >= 0x7f {
			return false
		}
	}
	return true
}
