package e2e_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/dev/formation"
	"github.com/fibe-dev/billing/internal/kit/proctest"
	"github.com/fibe-dev/billing/lab/e2e"
)

// TestChaosFailover runs the whole system on a pg_auto_failover formation
// (a monitor and three data nodes, synchronous replication to either
// standby) under the failover faults: the primary's machine killed, the
// primary frozen and resumed beside its successor, a standby then the
// primary killed, commits whose synchronous wait is cancelled. Every
// acknowledged effect must be on the final primary exactly once, nothing
// refused may have left one, and every lost node must be back as a
// standby. `billing-lab chaos --failover` runs the same code by hand.
func TestChaosFailover(t *testing.T) {
	t.Parallel()
	proctest.Slow(t, "chaos suite: multi-process, takes minutes")
	proctest.RequireTool(t, formation.Install, "pg_autoctl")
	// The load lasts as long as the faults take (it stops after the last);
	// Duration only bounds it: on an idle machine they take about three
	// minutes, at load 40 more than five.
	rep := runChaos(t, e2e.Options{Players: 4, Duration: 15 * time.Minute, Settle: settleBound, Failover: true})
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
