package lspdaemonv1

import "regexp"

// LanguageIDPattern is the rule for a QueryRequest's language (an LSP
// languageId such as "go", "python" or "typescriptreact"): the proxy
// refuses a request that breaks it with 400 and states it in the MCP
// tool's schema, and the daemon checks it again, from this one place.
const LanguageIDPattern = `^[a-z0-9][a-z0-9_.+-]{0,63}$`

var languageID = regexp.MustCompile(LanguageIDPattern)

// ValidLanguageID reports whether s keeps LanguageIDPattern.
func ValidLanguageID(s string) bool { return languageID.MatchString(s) }
