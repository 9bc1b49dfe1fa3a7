package main

import (
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/fulfillment"
	"github.com/fibe-dev/billing/internal/domain/players"
	"github.com/fibe-dev/billing/internal/payments/reconcile"
	"github.com/fibe-dev/billing/internal/provider/providerevents"
	"github.com/fibe-dev/billing/internal/provider/providertest"
)

// TestReconcileCommand runs `billing reconcile` against a provider fake
// listing one payment whose webhook never came: --dry-run claims nothing,
// the real run recovers it (and enqueues its fulfilment), the next run
// counts it already claimed.
func TestReconcileCommand(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL, pool := newDB(t)
	fake := providertest.StartFake()
	defer fake.Close()
	p, _, err := players.Create(ctx, pool, "buyer")
	require.NoError(t, err)
	o, err := fulfillment.CreateCheckout(ctx, pool, fulfillment.DefaultSKUs(),
		fulfillment.CheckoutParams{PlayerID: p.ID, SKU: "mana_1000", Provider: "stripe"})
	require.NoError(t, err)
	fake.AddEvent("stripe", providerevents.CompletedEvent("stripe", "evt_lost_1", o.ID, o.Amount, o.Currency))
	env := []string{"BILLING_DATABASE_URL=" + dbURL, "BILLING_STRIPE_SECRET_KEY=sk_test_cli", "BILLING_STRIPE_API_URL=" + fake.URL}

	summary := func(args ...string) reconcile.Summary {
		out := runBilling(t, env, append([]string{"reconcile", "--provider", "stripe", "--since", "1h", "--json"}, args...)...)
		lines := strings.Split(strings.TrimSpace(out), "\n") // logs (stderr) come first
		var s reconcile.Summary
		require.NoError(t, json.Unmarshal([]byte(lines[len(lines)-1]), &s), out)
		return s
	}
	count := func(sql string) int {
		var n int
		require.NoError(t, pool.QueryRow(ctx, sql).Scan(&n))
		return n
	}
	dry := summary("--dry-run")
	require.Equal(t, [3]int{1, 0, 1}, [3]int{dry.Seen, dry.AlreadyClaimed, dry.Recovered})
	require.True(t, dry.DryRun)
	require.Zero(t, count(`SELECT count(*) FROM webhook_events`))

	run := summary()
	require.Equal(t, [3]int{1, 0, 1}, [3]int{run.Seen, run.AlreadyClaimed, run.Recovered})
	require.Equal(t, 1, count(`SELECT count(*) FROM webhook_events WHERE event_id = 'evt_lost_1'`))
	require.Equal(t, 1, count(`SELECT count(*) FROM river_job WHERE kind = 'fulfill_order'`))

	again := summary()
	require.Equal(t, [3]int{1, 1, 0}, [3]int{again.Seen, again.AlreadyClaimed, again.Recovered})

	cmd := exec.Command(billingBin(t), "reconcile", "--provider", "creem")
	cmd.Env = append(cmd.Environ(), env...)
	raw, err := cmd.CombinedOutput()
	require.Error(t, err)
	require.Contains(t, string(raw), "no event listing")
}
