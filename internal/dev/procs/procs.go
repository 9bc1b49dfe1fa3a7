// Package procs supervises child processes for the end-to-end harness
// (`billing-lab chaos` and the e2e tests), the multi-process benchmarks and
// the command's process tests: one way to start a process, signal it,
// wait for it with a bound, find a free loopback port for it and wait for
// its /healthz.
package procs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// Proc is one supervised process. It may be started again after it exits
// (a fault-injection restart), never while it runs.
type Proc struct {
	Name string
	bin  string
	args []string
	logw io.Writer

	mu       sync.Mutex
	env      []string
	isolated bool                 // env is the whole environment (Isolated)
	attr     *syscall.SysProcAttr // OwnGroup
	cmd      *exec.Cmd
	done     chan struct{}
	exitErr  error
}

// New describes a process running bin with args; env is added to (and
// overrides) this process's environment; its stdout and stderr go to logw.
// Start launches it.
func New(name, bin string, env []string, logw io.Writer, args ...string) *Proc {
	if logw == nil {
		logw = io.Discard
	}
	return &Proc{Name: name, bin: bin, args: args, env: env, logw: logw}
}

// Isolated is New for a process that inherits nothing of this process's
// environment: env is the whole of it.
func Isolated(name, bin string, env []string, logw io.Writer, args ...string) *Proc {
	p := New(name, bin, env, logw, args...)
	p.isolated = true
	return p
}

// SetEnv adds key=value pairs to the environment of the next Start; a
// later value of a key wins.
func (p *Proc) SetEnv(kv ...string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.env = append(p.env, kv...)
}

// Start launches the process. Starting it while it runs is refused: the
// first process would be orphaned, outside the supervisor's control.
func (p *Proc) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.runningLocked() {
		return fmt.Errorf("procs: start %s: already running", p.Name)
	}
	cmd := exec.Command(p.bin, p.args...)
	// Never nil: a nil Env would give the process this one's environment.
	base := []string{}
	if !p.isolated {
		base = os.Environ()
	}
	cmd.Env = append(base, p.env...)
	cmd.Stdout, cmd.Stderr = p.logw, p.logw
	cmd.SysProcAttr = p.attr
	// A grandchild that inherited the output pipe must not keep Wait (and
	// so Running) from seeing the process itself exit.
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("procs: start %s: %w", p.Name, err)
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

func (p *Proc) runningLocked() bool {
	if p.done == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Running reports whether the process is alive.
func (p *Proc) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.runningLocked()
}

// Pid is the process id of the last start (0 before any).
func (p *Proc) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// ExitErr is how the last started process exited (nil while it runs).
func (p *Proc) ExitErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exitErr
}

// Wait waits up to d for the process to exit by itself and returns its
// exit error; past d it kills the process and says so.
func (p *Proc) Wait(d time.Duration) error {
	if !p.waitExit(d) {
		p.Kill()
		return fmt.Errorf("procs: %s still running after %v", p.Name, d)
	}
	return p.ExitErr()
}

// Kill sends SIGKILL and waits for the process to be gone.
func (p *Proc) Kill() { p.signalAndWait(syscall.SIGKILL, time.Minute) }

// Stop sends SIGTERM (a graceful shutdown) and waits up to d; see StopWith.
func (p *Proc) Stop(d time.Duration) error { return p.StopWith(syscall.SIGTERM, d) }

// ErrNotStopped means a process did not exit in time after the signal
// that asked it to, and was killed.
var ErrNotStopped = errors.New("killed")

// StopWith sends sig and waits up to d for the process to exit, then
// returns its exit error. A process still alive after d is killed, and
// that is an error (ErrNotStopped): it did not shut down.
func (p *Proc) StopWith(sig os.Signal, d time.Duration) error {
	if !p.signalAndWait(sig, d) {
		p.Kill()
		return fmt.Errorf("procs: %s did not exit within %v of %v: %w", p.Name, d, sig, ErrNotStopped)
	}
	return p.ExitErr()
}

// signalAndWait reports whether the process is gone within d of sig (a
// process never started or already gone is).
func (p *Proc) signalAndWait(sig os.Signal, d time.Duration) bool {
	p.mu.Lock()
	cmd, running := p.cmd, p.runningLocked()
	p.mu.Unlock()
	if !running {
		return true
	}
	_ = cmd.Process.Signal(sig)
	return p.waitExit(d)
}

// waitExit reports whether the current process exits within d.
func (p *Proc) waitExit(d time.Duration) bool {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	if done == nil {
		return true
	}
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

// ErrExited means a process exited before it became healthy.
var ErrExited = errors.New("exited before it became healthy")

// Getter is the part of *http.Client WaitHealthy uses.
type Getter interface {
	Get(url string) (*http.Response, error)
}

// WaitHealthy polls url (a /healthz) until it answers 200. It fails with
// ErrExited as soon as p exits, and with ctx's error when ctx ends first:
// give ctx the deadline.
func WaitHealthy(ctx context.Context, hc Getter, url string, p *Proc) error {
	for {
		if resp, err := hc.Get(url); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if !p.Running() {
			return fmt.Errorf("procs: %s (%s): %w: %v", p.Name, url, ErrExited, p.ExitErr())
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("procs: %s not healthy at %s: %w", p.Name, url, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// FreePort asks the kernel for a TCP port on localhost that was free a
// moment ago. Another process can take it before ours binds it: callers
// that start servers on it retry on ErrExited.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// FreeAddr is FreePort as a host:port on 127.0.0.1.
func FreeAddr() (string, error) {
	port, err := FreePort()
	if err != nil {
		return "", err
	}
	return net.JoinHostPort("127.0.0.1", fmt.Sprint(port)), nil
}

// TailBuffer is a concurrency-safe log sink that keeps the last Max bytes
// written to it (all of them when Max is 0): a child's output, for the
// error that reports its death.
type TailBuffer struct {
	Max int
	mu  sync.Mutex
	buf []byte
}

// Write implements io.Writer.
func (t *TailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if t.Max > 0 && len(t.buf) > t.Max {
		t.buf = append([]byte(nil), t.buf[len(t.buf)-t.Max:]...)
	}
	return len(p), nil
}

// String is what the buffer holds.
func (t *TailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}
