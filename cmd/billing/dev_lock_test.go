package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestSecondDevRefuses starts two `billing dev` on one directory at the
// same moment, as real processes: one runs, the other exits 1 with one
// line naming the running one's pid and API address, and the running one
// stays healthy (a failed start once stopped the other's PostgreSQL). A
// third start while the first runs is refused the same way; after the
// first is killed with SIGKILL, the next start runs on the same data.
func TestSecondDevRefuses(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "dev")
	env := func(addr string) []string { return []string{"BILLING_HTTP_ADDR=" + addr, "BILLING_DATABASE_URL="} }
	addrs := []string{freeAddr(t), freeAddr(t)}
	procs := []*proc{startProc(t, env(addrs[0]), "dev", "--dir", dir), startProc(t, env(addrs[1]), "dev", "--dir", dir)}
	loser := -1
	require.Eventually(t, func() bool {
		for i, p := range procs {
			if !p.Running() {
				loser = i
				return true
			}
		}
		return false
	}, devDeadline, 20*time.Millisecond, "one of the two exits")
	winner := 1 - loser
	base := "http://" + addrs[winner]
	waitHealthy(t, base, procs[winner], devDeadline)
	var exit *exec.ExitError
	require.True(t, errors.As(procs[loser].ExitErr(), &exit), "the loser failed: %v", procs[loser].ExitErr())
	requireRefusal(t, exit.ExitCode(), procs[loser].out.String(), procs[winner].Pid(), base)

	code, out := runBillingExit(t, env(freeAddr(t)), "dev", "--dir", dir)
	requireRefusal(t, code, out, procs[winner].Pid(), base)

	key := waitDemoKey(t, procs[winner])
	// A refused start once left a watchdog that stopped the running
	// one's PostgreSQL about a second later: wait until the running one's
	// is the only watchdog of dir, then check it still serves.
	require.Eventually(t, func() bool { return watchdogsOf(filepath.Join(dir, "data")) == 1 }, devDeadline, 50*time.Millisecond,
		"one PostgreSQL watchdog of %s (the running dev's); found %d", dir, watchdogsOf(filepath.Join(dir, "data")))
	requireServing(t, base, key)

	procs[winner].Kill()
	next := startProc(t, env(addrs[winner]), "dev", "--dir", dir)
	waitHealthy(t, base, next, devDeadline)
	require.Equal(t, key, waitDemoKey(t, next), "the same data, the same demo player")
	requireServing(t, base, key)
	next.stop(t, syscall.SIGINT, devDeadline)
}

// requireRefusal checks a refused dev: a failure, one line, naming the
// running dev's pid and API URL.
func requireRefusal(t *testing.T, code int, out string, pid int, api string) {
	t.Helper()
	require.Equal(t, 1, code, out)
	line := strings.TrimSpace(out)
	require.NotContains(t, line, "\n", "one line:\n%s", out)
	require.Contains(t, line, "billing dev is already running")
	require.Contains(t, line, fmt.Sprintf("pid %d", pid))
	require.Contains(t, line, "API "+api)
}

// watchdogsOf counts the live pglocal watchdogs of the cluster in dataDir.
func watchdogsOf(dataDir string) int {
	paths, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	n := 0
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if slices.Contains(args, "pglocal-watchdog") && slices.Contains(args, dataDir) {
			n++
		}
	}
	return n
}

func waitDemoKey(t *testing.T, p *proc) string {
	t.Helper()
	require.Eventually(t, func() bool { return strings.Contains(p.out.String(), "Ctrl-C stops everything") },
		devDeadline, 20*time.Millisecond, "the banner")
	key := between(p.out.String(), "API key:\n  ", "\n")
	require.NotEmpty(t, key)
	return key
}

// requireServing: /healthz answers 200 (the database is up) and a wallet
// call works.
func requireServing(t *testing.T, base, key string) {
	t.Helper()
	code, body := get(t, base+"/healthz", "", "")
	require.Equal(t, http.StatusOK, code, body)
	ctx, cancel := context.WithTimeout(context.Background(), apiRequestDeadline)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/wallets", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
}

// TestDevListensOnLoopbackByDefault: with neither BILLING_HTTP_ADDR nor
// --http-addr, dev's configuration listens on 127.0.0.1:8080; either one
// still overrides it. (The process tests give dev a free port instead.)
func TestDevListensOnLoopbackByDefault(t *testing.T) {
	t.Setenv("BILLING_HTTP_ADDR", "")
	t.Setenv("BILLING_DATABASE_URL", "")
	cmd := newRootCmd()
	dev, _, err := cmd.Find([]string{"dev"})
	require.NoError(t, err)
	require.NoError(t, dev.ParseFlags(nil))
	cfg, err := devConfig(dev)
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1:8080", cfg.HTTPAddr)

	t.Setenv("BILLING_HTTP_ADDR", ":9090")
	cfg, err = devConfig(dev)
	require.NoError(t, err)
	require.Equal(t, ":9090", cfg.HTTPAddr)

	b := devBanner{addr: "127.0.0.1:8080"}
	require.Contains(t, b.listening(), "loopback only")
	b.addr = "[::]:8080"
	require.Contains(t, b.listening(), "reachable from other machines")
}
