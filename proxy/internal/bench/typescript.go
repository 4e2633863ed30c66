package bench

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/hanzoai/lsp/proxy/internal/devforge"
	"github.com/hanzoai/lsp/proxy/internal/devstack"
)

// tsProject is a small TypeScript project: enough for tsserver to load a
// program with the standard library.
var tsProject = map[string]string{
	"tsconfig.json": `{"compilerOptions":{"strict":true,"target":"es2022","module":"es2022"},"include":["src"]}` + "\n",
	"src/shape.ts": `export interface Shape { area(): number }
export class Square implements Shape {
  constructor(private side: number) {}
  area(): number { return this.side * this.side }
}
`,
	"src/main.ts": `import { Square } from "./shape";
const s = new Square(3);
console.log(s.area());
`,
}

// runTypeScriptRSS prepares one TypeScript workspace on the stack's daemon
// and reports how much the daemon's process tree grew: the RSS of a warm
// TypeScript workspace (node, typescript-language-server and tsserver).
func runTypeScriptRSS(ctx context.Context, s *devstack.Stack, c *proxyClient, org string) (int64, error) {
	if _, err := devforge.CreateRepo(s.ForgeRoot, org, "tsbench", tsProject, "bench"); err != nil {
		return 0, err
	}
	before := devstack.TreeRSS(s.Daemon.Pid())
	body := map[string]any{"repo": "tsbench", "path": "src/main.ts", "line": 2, "character": 15}
	if _, err := c.do(ctx, "/hover", body); err != nil {
		return 0, err
	}
	time.Sleep(time.Second)
	return devstack.TreeRSS(s.Daemon.Pid()) - before, nil
}

func printTypeScriptRSS(w io.Writer, n int64) {
	fmt.Fprintf(w, "\nRSS of one warm TypeScript workspace (jailed node + typescript-language-server + tsserver): %d MiB\n", n>>20)
}
