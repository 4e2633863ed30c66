//go:build linux

package jail

import (
	"bufio"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hanzoai/lsp/daemon/internal/jsonrpc"
)

// The test servers are this test binary again, chosen by JAILTEST_SERVER
// in the server's environment (a spec's Env):
//
//	adversary  a language server that attacks its jail, one attack per
//	           hover line (below), and answers each with a JSON report
//	sleeper    waits for stdin to close (fork-bomb children)
//	forever    sleeps for an hour (escapees: only a kill ends it)
//	alloc      allocates and touches JAILTEST_ALLOC bytes, then says so
//	hold       as alloc, then holds the memory until stdin closes
//	churn      keeps JAILTEST_ALLOC bytes live while it allocates ten
//	           times as much garbage, as a type checker does, then says so
//	uidlease   leases a uid range as a daemon does (see uidlease_test.go)
//	planter    plants links in its home (JAILTEST_PLANT), then exits
//	unlinker   writes JAILTEST_ALLOC bytes into a file of its home it has
//	           deleted, says so, and holds it open until stdin closes
//	mapper     as unlinker, but holds the file by a shared mapping alone
//	           (mapped, closed, then deleted)
const serverEnv = "JAILTEST_SERVER"

// The adversary's attacks, by hover line.
const (
	attackNetwork = iota + 1
	attackOtherTenant
	attackEnviron
	attackWriteTree
	attackForkBomb
	attackAllocate
	attackEscape
)

// adversaryConfig is the adversary's one argument: what to attack.
type adversaryConfig struct {
	Connect     []string `json:"connect"`
	OtherTenant []string `json:"other_tenant"` // paths of another tenant's tree
	Secret      string   `json:"secret"`       // a value only the daemon's environment holds
	DaemonPID   int      `json:"daemon_pid"`
	ForkLimit   int      `json:"fork_limit"`
	Allocate    int64    `json:"allocate"`
}

// attackReport is one attack's outcome, as the adversary saw it.
type attackReport struct {
	Errors   map[string]string `json:"errors"` // attempt -> error, "" when it worked
	Leaks    []string          `json:"leaks"`  // environments that held the secret or LSP_*
	Forked   int               `json:"forked"`
	ForkErr  string            `json:"fork_err"`
	Tasks    int               `json:"tasks"`
	ExitedBy string            `json:"exited_by"` // how the allocating child ended
}

func testServerMain() (int, bool) {
	switch os.Getenv(serverEnv) {
	case "adversary":
		return adversaryMain(os.Args[1:]), true
	case "sleeper":
		_, _ = io.Copy(io.Discard, os.Stdin)
		return 0, true
	case "forever":
		time.Sleep(time.Hour)
		return 0, true
	case "uidlease":
		return uidLeaseMain(os.Args[1:]), true
	case "planter":
		return planterMain(), true
	case "churn":
		n, _ := strconv.ParseInt(os.Getenv("JAILTEST_ALLOC"), 10, 64)
		const chunk = 1 << 20
		live := make([][]byte, n/chunk)
		for i := 0; i < 10*len(live); i++ {
			b := make([]byte, chunk)
			for j := 0; j < len(b); j += 4096 {
				b[j] = 1
			}
			live[i%len(live)] = b // the one it replaces is garbage
		}
		goruntime.KeepAlive(live)
		fmt.Println("churned", len(live), "MiB live")
		return 0, true
	case "unlinker", "mapper":
		n, _ := strconv.ParseInt(os.Getenv("JAILTEST_ALLOC"), 10, 64)
		f, err := os.CreateTemp(os.Getenv("HOME"), "unlinked")
		if err == nil {
			_, err = io.CopyN(f, zeroes{}, n)
		}
		var mapped []byte
		if err == nil && os.Getenv(serverEnv) == "mapper" {
			if mapped, err = syscall.Mmap(int(f.Fd()), 0, int(n), syscall.PROT_READ, syscall.MAP_SHARED); err == nil {
				err = f.Close()
			}
		}
		if err == nil {
			err = os.Remove(f.Name())
		}
		if err != nil {
			fmt.Println("unlinker:", err)
			return 1, true
		}
		fmt.Println("written", n)
		_, _ = io.Copy(io.Discard, os.Stdin)
		goruntime.KeepAlive(f)
		goruntime.KeepAlive(mapped)
		return 0, true
	case "alloc", "hold":
		n, _ := strconv.ParseInt(os.Getenv("JAILTEST_ALLOC"), 10, 64)
		var chunks [][]byte
		for done := int64(0); done < n; done += 16 << 20 {
			b := make([]byte, 16<<20)
			for i := 0; i < len(b); i += 4096 {
				b[i] = 1
			}
			chunks = append(chunks, b)
		}
		fmt.Println("allocated", len(chunks)*16, "MiB")
		if os.Getenv(serverEnv) == "hold" {
			_, _ = io.Copy(io.Discard, os.Stdin)
			goruntime.KeepAlive(chunks)
		}
		return 0, true
	}
	return 0, false
}

type adversary struct {
	cfg      adversaryConfig
	w        io.Writer
	children []*exec.Cmd // kept alive until the adversary dies
}

func adversaryMain(args []string) int {
	a := &adversary{w: os.Stdout}
	if len(args) != 1 || json.Unmarshal([]byte(args[0]), &a.cfg) != nil {
		fmt.Fprintln(os.Stderr, "adversary: want one JSON argument")
		return 2
	}
	r := bufio.NewReader(os.Stdin)
	for {
		body, err := jsonrpc.ReadFrame(r, 0)
		if err != nil {
			return 0
		}
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params struct {
				Position struct {
					Line int `json:"line"`
				} `json:"position"`
			} `json:"params"`
		}
		if json.Unmarshal(body, &m) != nil {
			return 2
		}
		switch m.Method {
		case "initialize":
			a.reply(m.ID, map[string]any{
				"capabilities": map[string]any{"positionEncoding": "utf-16", "textDocumentSync": 1, "hoverProvider": true},
				"serverInfo":   map[string]any{"name": "adversary", "version": "0.0.1"},
			})
		case "textDocument/hover":
			rep := a.attack(m.Params.Position.Line)
			b, _ := json.Marshal(rep)
			// Hex: the client escapes plaintext for markdown.
			a.reply(m.ID, map[string]any{"contents": map[string]string{"kind": "plaintext", "value": hex.EncodeToString(b)}})
		case "shutdown":
			a.reply(m.ID, nil)
		case "exit":
			return 0
		default:
			if len(m.ID) > 0 && string(m.ID) != "null" {
				a.send(map[string]any{"jsonrpc": "2.0", "id": m.ID, "error": map[string]any{"code": -32601, "message": "no"}})
			}
		}
	}
}

func (a *adversary) send(v any) {
	b, _ := json.Marshal(v)
	_ = jsonrpc.WriteFrame(a.w, b)
}

func (a *adversary) reply(id json.RawMessage, result any) {
	a.send(map[string]any{"jsonrpc": "2.0", "id": id, "result": result})
}

func (a *adversary) attack(line int) attackReport {
	r := attackReport{Errors: map[string]string{}}
	try := func(name string, err error) { r.Errors[name] = errString(err) }
	switch line {
	case attackNetwork:
		for _, addr := range a.cfg.Connect {
			c, err := net.DialTimeout("tcp", addr, 2*time.Second)
			if err == nil {
				c.Close()
			}
			try("tcp "+addr, err)
		}
		c, err := net.DialTimeout("udp", "8.8.8.8:53", 2*time.Second)
		if err == nil {
			_, err = c.Write([]byte("x"))
			c.Close()
		}
		try("udp 8.8.8.8:53", err)
	case attackOtherTenant:
		for _, p := range a.cfg.OtherTenant {
			_, err := os.ReadFile(p)
			if errors.Is(err, syscall.EISDIR) {
				_, err = os.ReadDir(p)
			}
			try("read "+p, err)
		}
	case attackEnviron:
		paths := []string{"/proc/1/environ", "/proc/self/environ", fmt.Sprintf("/proc/%d/environ", a.cfg.DaemonPID)}
		entries, _ := os.ReadDir("/proc")
		for _, e := range entries {
			if _, err := strconv.Atoi(e.Name()); err == nil {
				paths = append(paths, "/proc/"+e.Name()+"/environ")
			}
		}
		for _, p := range paths {
			b, err := os.ReadFile(p)
			if err != nil {
				continue
			}
			if strings.Contains(string(b), a.cfg.Secret) || strings.Contains(string(b), "LSP_") {
				r.Leaks = append(r.Leaks, p+": "+strings.ReplaceAll(string(b), "\x00", " "))
			}
		}
		for _, kv := range os.Environ() {
			if strings.Contains(kv, a.cfg.Secret) || strings.HasPrefix(kv, "LSP_") {
				r.Leaks = append(r.Leaks, "own environment: "+kv)
			}
		}
	case attackWriteTree:
		wd, _ := os.Getwd()
		try("create", os.WriteFile(filepath.Join(wd, "planted.go"), []byte("package x"), 0o644))
		f, err := os.OpenFile(filepath.Join(wd, "a.txt"), os.O_WRONLY|os.O_TRUNC, 0)
		if err == nil {
			f.Close()
		}
		try("truncate a.txt", err)
		try("chmod", os.Chmod(filepath.Join(wd, "a.txt"), 0o666))
		try("rename", os.Rename(filepath.Join(wd, "a.txt"), filepath.Join(wd, "b.txt")))
		try("remove", os.Remove(filepath.Join(wd, "a.txt")))
		try("mkdir", os.Mkdir(filepath.Join(wd, "d"), 0o755))
	case attackForkBomb:
		// The jail's own bomber (canary -bomb): the adversary stays out of
		// the line of fire so that it can report; the bomber's children
		// live until the adversary dies.
		exe, _ := os.Executable()
		cmd := exec.Command(exe, modeCanary, "-bomb", strconv.Itoa(a.cfg.ForkLimit))
		_, err1 := cmd.StdinPipe()
		out, err2 := cmd.StdoutPipe()
		if err := errors.Join(err1, err2, cmd.Start()); err != nil {
			r.ForkErr = err.Error()
			break
		}
		a.children = append(a.children, cmd)
		var b bombReport
		if err := json.NewDecoder(out).Decode(&b); err != nil {
			r.ForkErr = "the bomber died: " + err.Error()
			break
		}
		r.Forked, r.ForkErr, r.Tasks = b.Forked, b.ForkErr, b.Tasks
	case attackAllocate:
		exe, _ := os.Executable()
		cmd := exec.Command(exe)
		cmd.Env = []string{serverEnv + "=alloc", "JAILTEST_ALLOC=" + strconv.FormatInt(a.cfg.Allocate, 10)}
		out, err := cmd.Output()
		r.ExitedBy = fmt.Sprintf("err=%v output=%q", err, out)
		if err == nil {
			r.Errors["allocate"] = ""
		} else {
			r.Errors["allocate"] = err.Error()
		}
	case attackEscape:
		// A child in a new session leaves the server's process group, as
		// gopls's telemetry child once did; only the PID namespace can
		// still take it down.
		exe, _ := os.Executable()
		cmd := exec.Command(exe, "escapee-marker")
		cmd.Env = []string{serverEnv + "=forever"}
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		try("setsid child", cmd.Start())
		a.children = append(a.children, cmd)
	}
	return r
}

// zeroes reads as endless zero bytes.
type zeroes struct{}

func (zeroes) Read(b []byte) (int, error) {
	clear(b)
	return len(b), nil
}
