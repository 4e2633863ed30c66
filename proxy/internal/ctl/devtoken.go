package ctl

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/hanzoai/lsp/proxy/internal/auth"
	"github.com/hanzoai/lsp/proxy/internal/devstack"
)

// devToken is `lspctl dev-token`: it signs a development JWT with the key
// `make run` generated for this run (lspctl dev prints its path). There is
// no built-in key: without --key nothing is signed, and the proxy trusts
// only the public half of the key it was started with.
func devToken(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("dev-token", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	key := fs.String("key", "", "the private key make run generated (printed by lspctl dev; under .dev/keys)")
	owner := fs.String("owner", "", "the principal's home org (the owner claim)")
	sub := fs.String("sub", "dev-user", "the subject")
	orgs := fs.String("orgs", "", "comma-separated further orgs the principal belongs to")
	roles := fs.String("roles", "", "comma-separated ROLE:ORG roles (billing:ORG reads the ledger)")
	aud := fs.String("aud", devstack.Audience, "the audience (the dev stack's by default)")
	ttl := fs.Duration("ttl", time.Hour, "lifetime")
	if err := fs.Parse(args); err != nil {
		return usageError("dev-token: " + err.Error())
	}
	if *key == "" || *owner == "" {
		return usageError("dev-token: --key and --owner are required")
	}
	if _, err := os.Stat(*key); err != nil {
		return usageError("dev-token: --key: " + err.Error())
	}
	tok, err := auth.SignDevToken(*key, auth.DevClaims{
		Subject: *sub, Owner: *owner, Orgs: list(*orgs), Roles: list(*roles), Audience: *aud,
	}, *ttl)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, tok)
	return nil
}

func list(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
