package bench

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/kit/testdb"
	"github.com/fibe-dev/billing/wallet"
)

// The timeline bench at a tiny size: it makes every kind of history
// through the intake and workers, grows the ledger, and times every kind
// of timeline on both sizes without one failing.
func TestTimelineBenchRuns(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	env := Env{Pool: pool, Wallet: wallet.New(pool, wallet.Options{}), TZ: time.UTC, Clients: 2,
		Duration: 300 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)}
	fs := pflag.NewFlagSet("timeline", pflag.ContinueOnError)
	All()[indexOf(t, "timeline")].Flags(fs)
	require.NoError(t, fs.Parse([]string{"--transactions", "3000", "--players", "30", "--histories", "1", "--orders", "10"}))
	r, err := runTimeline(context.Background(), env, fs)
	require.NoError(t, err)
	steps := r.Notes["steps"].([]*timelineStep)
	require.Len(t, steps, 2)
	require.Greater(t, steps[1].Transactions, steps[0].Transactions+2900, "the ledger grew (to about --transactions)")
	for _, st := range steps {
		for _, rep := range []*Report{st.Order, st.Payment, st.Player} {
			require.Positive(t, rep.Ops, rep.Name)
			require.Zero(t, rep.Errors, rep.Name)
		}
	}
	require.Positive(t, steps[1].Whale.Ops)
	require.Contains(t, r.Baselines, "order_empty")
}

func indexOf(t *testing.T, name string) int {
	t.Helper()
	for i, b := range All() {
		if b.Name == name {
			return i
		}
	}
	t.Fatalf("no benchmark %s", name)
	return -1
}
