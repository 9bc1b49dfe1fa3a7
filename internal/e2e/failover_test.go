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

	"github.com/fibe-dev/billing/internal/e2e"
	"github.com/fibe-dev/billing/internal/formation"
	"github.com/fibe-dev/billing/internal/proctest"
)

// TestChaosFailover runs the whole system on a pg_auto_failover formation
// (a monitor and three data nodes, synchronous replication to either
// standby) under the failover faults: the primary's machine killed, the
// primary frozen and resumed beside its successor, a standby then the
// primary killed, commits whose synchronous wait is cancelled. Every
// acknowledged effect must be on the final primary exactly once, nothing
// refused may have left one, and every lost node must be back as a
// standby. `billing chaos --failover` runs the same code by hand.
func TestChaosFailover(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("chaos suite: multi-process, takes minutes")
	}
	proctest.RequireTool(t, formation.Install, "pg_autoctl")
	dir := t.TempDir()
	bin := billingBinary(t)
	seed := time.Now().UnixNano() % 1_000_000
	if s := os.Getenv("BILLING_CHAOS_SEED"); s != "" {
		_, err := fmt.Sscan(s, &seed)
		require.NoError(t, err)
	}
	t.Logf("chaos seed %d (BILLING_CHAOS_SEED=%d reproduces the workload)", seed, seed)
	var out bytes.Buffer
	rep, err := e2e.Execute(context.Background(), e2e.Options{
		Seed: seed, Players: 4, Duration: 5 * time.Minute, Settle: 90 * time.Second,
		Binary: bin, Dir: dir, Failover: true, Out: &out,
	})
	if rep != nil {
		rep.Print(&out)
	}
	t.Log("\n" + out.String())
	if t.Failed() || err != nil || rep == nil || !rep.OK() {
		logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
		more, _ := filepath.Glob(filepath.Join(dir, "formation", "*.log"))
		for _, name := range append(logs, more...) {
			b, _ := os.ReadFile(name)
			if len(b) > 3000 {
				b = b[len(b)-3000:]
			}
			t.Logf("%s tail:\n%s", strings.TrimPrefix(name, dir), b)
		}
	}
	require.NoError(t, err)
	require.True(t, rep.OK(), "chaos verdict FAIL (seed %d)", seed)
	require.NotNil(t, rep.Failover)
	failovers := 0
	for _, f := range rep.Failover.Faults {
		if f.OldPrimary != f.NewPrimary {
			failovers++
		}
	}
	require.GreaterOrEqual(t, failovers, 3)
	require.Len(t, rep.Failover.Faults, 4)
	require.Positive(t, rep.Failover.NotDurable, "the cancelled waits were refused")
	require.Positive(t, rep.Fulfilled)
	require.Positive(t, rep.Failover.OK)
}
