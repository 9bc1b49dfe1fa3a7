// Package e2e runs the whole billing system as real processes on one real
// PostgreSQL and proves, under faults, that no money is lost or doubled.
//
// A Run starts 2 `billing web` and 3 `billing worker` processes built from
// the tree, drives a seeded workload through them (signed provider webhooks
// delivered several times to both web processes, SDK calls through a proxy
// that drops responses after the server committed), kills workers with
// SIGKILL, kills a web process, restarts PostgreSQL, and finally checks the
// database against a model of what was sent and acknowledged. The same code
// backs the e2e tests and `billing chaos`.
package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// Proc is one supervised billing process.
type Proc struct {
	Name string
	addr string // web processes: host:port (guarded by mu: a retried start may move it)
	bin  string
	args []string
	env  []string
	logw io.Writer

	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{}
	exitErr error
}

// NewProc describes a billing process; Start launches it.
func NewProc(name, bin string, env []string, logw io.Writer, args ...string) *Proc {
	return &Proc{Name: name, bin: bin, args: args, env: env, logw: logw}
}

// Addr is a web process's listen address, host:port.
func (p *Proc) Addr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.addr
}

// listenOn sets the web process's address for its next Start.
func (p *Proc) listenOn(addr string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.addr = addr
	p.env = append(p.env, "BILLING_HTTP_ADDR="+addr) // the last one wins
}

// Start launches the process. Starting it while it runs is refused: the
// first process would be orphaned, outside the harness's control.
func (p *Proc) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done != nil {
		select {
		case <-p.done:
		default:
			return fmt.Errorf("e2e: start %s: already running", p.Name)
		}
	}
	cmd := exec.Command(p.bin, p.args...)
	cmd.Env = append(os.Environ(), p.env...)
	cmd.Stdout, cmd.Stderr = p.logw, p.logw
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("e2e: start %s: %w", p.Name, err)
	}
	done := make(chan struct{})
	p.cmd, p.done = cmd, done
	go func() {
		err := cmd.Wait()
		p.mu.Lock()
		p.exitErr = err
		p.mu.Unlock()
		close(done)
	}()
	return nil
}

// Running reports whether the process is alive.
func (p *Proc) Running() bool {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	if done == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}

// Wait waits up to d for the process to exit by itself and returns its exit error.
func (p *Proc) Wait(d time.Duration) error {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	select {
	case <-done:
	case <-time.After(d):
		p.Kill()
		return fmt.Errorf("e2e: %s still running after %v", p.Name, d)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exitErr
}

// Kill sends SIGKILL and waits for the process to be gone.
func (p *Proc) Kill() {
	p.signalAndWait(syscall.SIGKILL, time.Minute)
}

// Stop sends SIGTERM and waits up to d; it returns the exit error.
func (p *Proc) Stop(d time.Duration) error {
	if !p.signalAndWait(syscall.SIGTERM, d) {
		p.Kill()
		return fmt.Errorf("e2e: %s did not exit within %v of SIGTERM", p.Name, d)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exitErr
}

func (p *Proc) signalAndWait(sig syscall.Signal, d time.Duration) bool {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil || done == nil {
		return true
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

// BuildBinary compiles cmd/billing from the module at moduleDir into dir.
func BuildBinary(ctx context.Context, moduleDir, dir string) (string, error) {
	bin := filepath.Join(dir, "billing")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/billing")
	cmd.Dir = moduleDir
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("e2e: go build: %w\n%s", err, out)
	}
	return bin, nil
}

// errExited: the process exited before it became healthy.
var errExited = errors.New("exited before it became healthy")

// waitHealthy polls p's /healthz until it answers 200, p exits, or ctx
// ends.
func waitHealthy(ctx context.Context, hc httpGetter, p *Proc) error {
	for {
		resp, err := hc.Get("http://" + p.Addr() + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
		}
		if !p.Running() {
			return fmt.Errorf("e2e: %s on %s %w (see %s.log)", p.Name, p.Addr(), errExited, p.Name)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("e2e: %s on %s not healthy: %w", p.Name, p.Addr(), ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
