// Package e2e runs the whole billing system as real processes on one real
// PostgreSQL and proves, under faults, that no money is lost or doubled.
//
// A Run starts 2 `billing web` and 3 `billing worker` processes built from
// the tree, drives a seeded workload through them (signed provider webhooks
// delivered several times to both web processes, SDK calls through a proxy
// that drops responses after the server committed), kills workers with
// SIGKILL, kills a web process, restarts PostgreSQL, and finally checks the
// database against a model of what was sent and acknowledged. The same code
// backs the e2e tests and `billing-lab chaos`.
package e2e

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"sync"

	"github.com/fibe-dev/billing/internal/dev/procs"
)

// Proc is one supervised billing process (internal/dev/procs); a web process
// also knows the address it listens on.
type Proc struct {
	*procs.Proc
	mu   sync.Mutex
	addr string // a retried start may move it
}

// NewProc describes a billing process; Start launches it.
func NewProc(name, bin string, env []string, logw io.Writer, args ...string) *Proc {
	return &Proc{Proc: procs.New(name, bin, env, logw, args...)}
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
	p.SetEnv("BILLING_HTTP_ADDR=" + addr)
}

// BuildBinary compiles cmd/billing from the module at moduleDir into dir,
// with the race detector when race is set.
func BuildBinary(ctx context.Context, moduleDir, dir string, race bool) (string, error) {
	bin := filepath.Join(dir, "billing")
	args := []string{"build", "-o", bin}
	if race {
		args = append(args, "-race")
	}
	cmd := exec.CommandContext(ctx, "go", append(args, "./cmd/billing")...)
	cmd.Dir = moduleDir
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("e2e: go build: %w\n%s", err, out)
	}
	return bin, nil
}

// waitHealthy polls web process p's /healthz until it answers 200, p exits
// (procs.ErrExited), or ctx ends.
func waitHealthy(ctx context.Context, hc procs.Getter, p *Proc) error {
	if err := procs.WaitHealthy(ctx, hc, "http://"+p.Addr()+"/healthz", p.Proc); err != nil {
		return fmt.Errorf("e2e: %w (see %s.log)", err, p.Name)
	}
	return nil
}
