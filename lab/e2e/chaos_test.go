package e2e_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/kit/proctest"
	"github.com/fibe-dev/billing/lab/e2e"
)

// TestChaos runs the whole system as real processes under SIGKILLs, a web
// crash and a PostgreSQL restart, at a size CI finishes in a few minutes.
// `billing-lab chaos` runs the same code at any size by hand.
func TestChaos(t *testing.T) {
	proctest.Slow(t, "chaos suite: multi-process, takes minutes")
	rep := runChaos(t, e2e.Options{Players: 4, Duration: 40 * time.Second, Settle: settleBound,
		WorkerKillEvery: 2 * time.Second})
	require.GreaterOrEqual(t, rep.WorkerKills, 5)
	require.Equal(t, 1, rep.PGRestarts)
	require.Equal(t, 1, rep.WebKills)
	require.Positive(t, rep.BackendKills)
	require.Positive(t, rep.Fulfilled)
	require.Positive(t, rep.ProxyDropped, "the proxy must have dropped committed responses")
	require.Equal(t, 1, rep.ProviderOutages)
	require.Positive(t, rep.ProviderRefused, "checkouts met the provider outage")
	require.Positive(t, rep.LostWebhooks, "some payments relied on reconciliation")
}

// settleBound is how long a chaos test gives the system to finish its work
// after the load. The settle ends as soon as the system is quiet (seconds
// on an idle machine); the bound only decides when a system that is not
// quiet fails, so it is generous: after four failovers at load 40 on two
// cores the work took more than 90 s to drain.
const settleBound = 4 * time.Minute

// runChaos runs e2e.Execute with opts (its seed, binary and directory
// filled in: BILLING_CHAOS_SEED replays a seed), logs the report, and on
// a failure the tail of every process's log, then requires a passing
// verdict.
func runChaos(t *testing.T, opts e2e.Options) *e2e.Report {
	t.Helper()
	opts.Dir, opts.Binary = t.TempDir(), billingBinary(t)
	opts.Seed = time.Now().UnixNano() % 1_000_000
	if s := os.Getenv("BILLING_CHAOS_SEED"); s != "" {
		_, err := fmt.Sscan(s, &opts.Seed)
		require.NoError(t, err)
	}
	t.Logf("chaos seed %d (BILLING_CHAOS_SEED=%d reproduces the workload)", opts.Seed, opts.Seed)
	var out bytes.Buffer
	opts.Out = &out
	rep, err := e2e.Execute(context.Background(), opts)
	if rep != nil {
		rep.Print(&out)
	}
	t.Log("\n" + out.String())
	if t.Failed() || err != nil || rep == nil || !rep.OK() {
		logs, _ := filepath.Glob(filepath.Join(opts.Dir, "*.log"))
		more, _ := filepath.Glob(filepath.Join(opts.Dir, "formation", "*.log"))
		for _, name := range append(logs, more...) {
			b, _ := os.ReadFile(name)
			if len(b) > 3000 {
				b = b[len(b)-3000:]
			}
			t.Logf("%s tail:\n%s", strings.TrimPrefix(name, opts.Dir), b)
		}
	}
	require.NoError(t, err)
	// Again after the log tails, so the end of a long CI log names them.
	require.True(t, rep.OK(), "chaos verdict FAIL (seed %d); failed checks:\n%s", opts.Seed, rep.Failed())
	logs, err := filepath.Glob(filepath.Join(opts.Dir, "*.log"))
	require.NoError(t, err)
	require.NoError(t, dataRace(logs...))
	return rep
}
