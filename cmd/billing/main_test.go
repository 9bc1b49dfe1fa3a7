package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/pglocal"
	"github.com/fibe-dev/billing/internal/testdb"
)

// binPath is the billing binary built once for the process-level tests.
var binPath string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "billing-bin-")
	if err != nil {
		panic(err)
	}
	binPath = filepath.Join(dir, "billing")
	args := []string{"build", "-o", binPath}
	if raceEnabled {
		args = append(args, "-race")
	}
	build := exec.Command("go", append(args, ".")...)
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build billing:", err)
		os.Exit(1)
	}
	defer os.RemoveAll(dir)
	testdb.Main(m)
}

// proc is a billing process under test.
type proc struct {
	cmd    *exec.Cmd
	out    *syncBuffer
	waited chan error
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func startProc(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(binPath, args...)
	cmd.Env = append(os.Environ(), env...)
	p := &proc{cmd: cmd, out: &syncBuffer{}, waited: make(chan error, 1)}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	require.NoError(t, cmd.Start())
	go func() { p.waited <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-p.waited
		}
		if t.Failed() {
			t.Logf("%s output:\n%s", strings.Join(args, " "), p.out.String())
		}
	})
	return p
}

// stop signals p and requires a clean exit within d.
func (p *proc) stop(t *testing.T, sig os.Signal, d time.Duration) {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(sig))
	select {
	case err := <-p.waited:
		require.NoError(t, err, "exit after %v:\n%s", sig, p.out.String())
	case <-time.After(d):
		t.Fatalf("no exit within %v after %v:\n%s", d, sig, p.out.String())
	}
}

func runBilling(t *testing.T, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command(binPath, args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "billing %s:\n%s", strings.Join(args, " "), out)
	return string(out)
}

func freeAddr(t *testing.T) string {
	t.Helper()
	port, err := pglocal.FreePort()
	require.NoError(t, err)
	return fmt.Sprintf("127.0.0.1:%d", port)
}

// waitHealthy polls /healthz until 200 and returns how long it took.
func waitHealthy(t *testing.T, base string, p *proc, timeout time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for time.Since(start) < timeout {
		select {
		case err := <-p.waited:
			t.Fatalf("process exited (%v) before healthy:\n%s", err, p.out.String())
		default:
		}
		resp, err := http.Get(base + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return time.Since(start)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("not healthy within %v:\n%s", timeout, p.out.String())
	return 0
}

func get(t *testing.T, url string, user, pass string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	require.NoError(t, err)
	if user != "" {
		req.SetBasicAuth(user, pass)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body)
}
