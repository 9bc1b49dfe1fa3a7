package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/dev/procs"
	"github.com/fibe-dev/billing/internal/kit/proctest"
	"github.com/fibe-dev/billing/internal/kit/testdb"
)

// binPath is the billing binary built once for the process-level tests.
var binPath string

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		testdb.Main(m) // no binary: billingBin skips the tests that run it
		return
	}
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
		_ = os.RemoveAll(dir)
		os.Exit(1)
	}
	code := testdb.Run(m)
	_ = os.RemoveAll(dir) // os.Exit runs no deferred call
	os.Exit(code)
}

// billingBin is the billing binary; under -short, which does not build it,
// it skips the test.
func billingBin(t testing.TB) string {
	t.Helper()
	proctest.Slow(t, "runs the billing binary")
	return binPath
}

// proc is a billing process under test (internal/dev/procs), its output kept.
type proc struct {
	*procs.Proc
	out *procs.TailBuffer
}

// startProc starts `billing args...`; it is killed when t ends, and its
// output is logged when t failed.
func startProc(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	out := &procs.TailBuffer{}
	p := &proc{Proc: procs.New(strings.Join(args, " "), billingBin(t), env, out, args...), out: out}
	require.NoError(t, p.Start())
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			t.Logf("%s output:\n%s", p.Name, out.String())
		}
	})
	return p
}

// stop signals p and requires a clean exit within d.
func (p *proc) stop(t *testing.T, sig os.Signal, d time.Duration) {
	t.Helper()
	require.NoError(t, p.StopWith(sig, d), "after %v:\n%s", sig, p.out.String())
}

func runBilling(t *testing.T, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command(billingBin(t), args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "billing %s:\n%s", strings.Join(args, " "), out)
	return string(out)
}

// runBillingExit runs billing expecting it to fail and returns its exit
// status and output.
func runBillingExit(t *testing.T, env []string, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(billingBin(t), args...)
	cmd.Env = append(cmd.Environ(), env...)
	raw, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	require.True(t, errors.As(err, &exit), "want a failure, got %v:\n%s", err, raw)
	return exit.ExitCode(), string(raw)
}

// runBillingFail runs billing expecting it to fail and returns its output.
func runBillingFail(t *testing.T, env []string, args ...string) string {
	t.Helper()
	_, out := runBillingExit(t, env, args...)
	return out
}

// newDB returns the URL of a fresh migrated database and a pool on it,
// closed when the test ends.
func newDB(t *testing.T) (string, *pgxpool.Pool) {
	t.Helper()
	dbURL := testdb.NewURL(t)
	pool, err := pgxpool.New(context.Background(), dbURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return dbURL, pool
}

func freeAddr(t *testing.T) string {
	t.Helper()
	addr, err := procs.FreeAddr()
	require.NoError(t, err)
	return addr
}

// waitHealthy polls base's /healthz until 200 and returns how long it took.
func waitHealthy(t *testing.T, base string, p *proc, timeout time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	err := procs.WaitHealthy(ctx, http.DefaultClient, base+"/healthz", p.Proc)
	require.NoError(t, err, "output:\n%s", p.out.String())
	return time.Since(start)
}

// apiRequestDeadline bounds one HTTP request of a process test (to the
// API, a metrics listener, Prometheus or the monitor): a checkout calls
// the provider's API (stripe-mock) inside the request, and at load 40 on
// two cores one took more than ten seconds. A busy machine is slow, not
// wrong.
const apiRequestDeadline = time.Minute

// waitDeadline bounds a process test's wait on a condition (a process
// healthy, a metric counted, a job done): seconds on an idle machine,
// many times that at load 40.
const waitDeadline = 2 * time.Minute

func get(t *testing.T, url string, user, pass string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), apiRequestDeadline)
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
