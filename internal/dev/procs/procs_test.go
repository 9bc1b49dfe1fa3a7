package procs_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/dev/procs"
)

func sh(name, script string, out *procs.TailBuffer) *procs.Proc {
	var w io.Writer = io.Discard
	if out != nil {
		w = out
	}
	return procs.New(name, "/bin/sh", []string{"PROCS_TEST=from-env"}, w, "-c", script)
}

// TestStartStopRestart: a process gets its environment and output, is
// never started twice at once, stops on SIGTERM with its exit status, and
// may be started again once it is gone.
func TestStartStopRestart(t *testing.T) {
	t.Parallel()
	out := &procs.TailBuffer{}
	// The trap is set before the line the test waits for: a SIGTERM that
	// came first would end the shell by the signal, not with status 3.
	p := sh("sleeper", `trap 'echo bye; exit 3' TERM; echo "env=$PROCS_TEST late=$LATE"; while :; do sleep 0.05; done`, out)
	p.SetEnv("LATE=set")
	require.False(t, p.Running())
	require.NoError(t, p.Start())
	t.Cleanup(p.Kill)
	require.ErrorContains(t, p.Start(), "already running")
	require.Eventually(t, func() bool { return strings.Contains(out.String(), "env=from-env late=set") }, time.Minute, 10*time.Millisecond)
	require.True(t, p.Running())
	require.Positive(t, p.Pid())

	err := p.Stop(5 * time.Second)
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "the exit status is the caller's to judge")
	require.Equal(t, 3, exit.ExitCode())
	require.Contains(t, out.String(), "bye")
	require.False(t, p.Running())

	require.NoError(t, p.Start(), "a process that is gone may be started again")
	require.True(t, p.Running())
	p.Kill()
	require.False(t, p.Running())
	require.ErrorContains(t, p.Stop(time.Second), "signal: killed", "a process that is gone says how it ended")
}

// TestIsolatedInheritsNothing: a process New starts has this process's
// environment and its own; one Isolated starts has only its own, so a
// variable of the caller's shell cannot reach it.
func TestIsolatedInheritsNothing(t *testing.T) {
	t.Parallel()
	require.NotEmpty(t, os.Getenv("PATH"), "the test process has an environment to leave out")
	for _, c := range []struct {
		start   func(string, string, []string, io.Writer, ...string) *procs.Proc
		inherit bool
	}{{procs.New, true}, {procs.Isolated, false}} {
		out := &procs.TailBuffer{}
		p := c.start("env", "/usr/bin/env", []string{"PROCS_TEST=own"}, out)
		p.SetEnv("LATE=set")
		require.NoError(t, p.Start())
		require.NoError(t, p.Wait(time.Minute))
		lines := strings.Fields(out.String())
		require.Subset(t, lines, []string{"PROCS_TEST=own", "LATE=set"})
		require.Equal(t, c.inherit, slices.Contains(lines, "PATH="+os.Getenv("PATH")), "inherits PATH: %v", lines)
		if !c.inherit {
			require.Len(t, lines, 2, "only its own environment: %v", lines)
		}
	}
}

// TestStopKillsWhatIgnoresTheSignal: a process that ignores SIGTERM is
// killed after the bound, and that is an error.
func TestStopKillsWhatIgnoresTheSignal(t *testing.T) {
	t.Parallel()
	out := &procs.TailBuffer{}
	p := sh("stubborn", `trap '' TERM; echo ready; while :; do sleep 0.05; done`, out)
	require.NoError(t, p.Start())
	t.Cleanup(p.Kill)
	require.Eventually(t, func() bool { return strings.Contains(out.String(), "ready") }, time.Minute, 10*time.Millisecond)
	start := time.Now()
	require.ErrorContains(t, p.Stop(300*time.Millisecond), "did not exit within 300ms")
	require.Less(t, time.Since(start), 5*time.Second)
	require.False(t, p.Running())
}

// TestWait returns the exit error of a process that ends by itself, and
// kills one that outlives the bound.
func TestWait(t *testing.T) {
	t.Parallel()
	ok := sh("ok", `exit 0`, nil)
	require.NoError(t, ok.Start())
	require.NoError(t, ok.Wait(5*time.Second))

	slow := sh("slow", `sleep 30`, nil)
	require.NoError(t, slow.Start())
	require.ErrorContains(t, slow.Wait(100*time.Millisecond), "still running")
	require.False(t, slow.Running())
}

// TestWaitHealthy: waits for 200, gives up as soon as the process exits
// (ErrExited), and when ctx ends.
func TestWaitHealthy(t *testing.T) {
	t.Parallel()
	var healthy atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !healthy.Load() {
			http.Error(w, "starting", http.StatusServiceUnavailable)
		}
	}))
	t.Cleanup(srv.Close)
	p := sh("web", `sleep 30`, nil)
	require.NoError(t, p.Start())
	t.Cleanup(p.Kill)
	go func() { time.Sleep(200 * time.Millisecond); healthy.Store(true) }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, procs.WaitHealthy(ctx, srv.Client(), srv.URL+"/healthz", p))

	short, cancelShort := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancelShort()
	addr, err := procs.FreeAddr()
	require.NoError(t, err)
	require.ErrorIs(t, procs.WaitHealthy(short, srv.Client(), "http://"+addr+"/healthz", p), context.DeadlineExceeded)

	dead := sh("dies", `echo cannot bind; exit 1`, nil)
	require.NoError(t, dead.Start())
	require.ErrorIs(t, procs.WaitHealthy(ctx, srv.Client(), "http://"+addr+"/healthz", dead), procs.ErrExited)
}

// TestTailBuffer keeps the last Max bytes, or everything without Max.
func TestTailBuffer(t *testing.T) {
	t.Parallel()
	tail := &procs.TailBuffer{Max: 5}
	_, _ = tail.Write([]byte("hello "))
	_, _ = tail.Write([]byte("world"))
	require.Equal(t, "world", tail.String())
	all := &procs.TailBuffer{}
	_, _ = all.Write([]byte("hello "))
	_, _ = all.Write([]byte("world"))
	require.Equal(t, "hello world", all.String())
}
