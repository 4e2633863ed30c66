package corpus

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

func TestZZDryRun(t *testing.T) {
	dir := os.Getenv("PROBE_DIR")
	if dir == "" {
		t.Skip()
	}
	out, err := run(t.Context(), dir, nil, "make", "-n", "-k", "-w")
	if err != nil && len(out) == 0 {
		t.Fatal(err)
	}
	e := dryRunEntries(string(out), dir)
	data, _ := json.MarshalIndent(e, "", " ")
	os.WriteFile(filepath.Join(dir, "compile_commands.json"), data, 0o644)
	t.Log(len(e))
}
