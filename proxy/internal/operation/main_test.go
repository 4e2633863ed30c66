package operation

import (
	"testing"

	"github.com/hanzoai/lsp/proxy/internal/pgtest"
)

// TestMain stops the throwaway Postgres that the hold tests use.
func TestMain(m *testing.M) { pgtest.Main(m) }
