package e2e_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/e2e"
)

// TestChaos runs the whole system as real processes under SIGKILLs, a web
// crash and a PostgreSQL restart, at a size CI finishes in a few minutes.
// `billing chaos` runs the same code at any size by hand.
func TestChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos suite: multi-process, takes minutes")
	}
	ctx := context.Background()
	dir := t.TempDir()
	bin := billingBinary(t)
	seed := time.Now().UnixNano() % 1_000_000
	if s := os.Getenv("BILLING_CHAOS_SEED"); s != "" {
		_, err := fmt.Sscan(s, &seed)
		require.NoError(t, err)
	}
	t.Logf("chaos seed %d (BILLING_CHAOS_SEED=%d reproduces the workload)", seed, seed)
	var out bytes.Buffer
	rep, err := e2e.Execute(ctx, e2e.Options{
		Seed: seed, Players: 4, Duration: 40 * time.Second, Settle: 90 * time.Second,
		Binary: bin, Dir: dir, WorkerKillEvery: 2 * time.Second, Out: &out,
	})
	if rep != nil {
		rep.Print(&out)
	}
	t.Log("\n" + out.String())
	if t.Failed() || err != nil || rep == nil || !rep.OK() {
		for _, name := range []string{"chaos", "migrate", "web1", "web2", "worker1", "worker2", "worker3"} {
			b, _ := os.ReadFile(filepath.Join(dir, name+".log"))
			if len(b) > 3000 {
				b = b[len(b)-3000:]
			}
			t.Logf("%s.log tail:\n%s", name, b)
		}
	}
	require.NoError(t, err)
	require.True(t, rep.OK(), "chaos verdict FAIL (seed %d)", seed)
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
