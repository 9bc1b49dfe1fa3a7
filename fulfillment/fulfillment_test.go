package fulfillment_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/fulfillment"
	"github.com/fibe-dev/billing/internal/kit/testdb"
	"github.com/fibe-dev/billing/internal/provider"
)

func TestCreateCheckoutSnapshotsPrice(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.Tx(t)
	player := newPlayer(t, db)

	o := checkout(t, db, player, "mana_5000", "paddle")
	require.Equal(t, int64(3999), o.Amount)
	require.Equal(t, "usd", o.Currency)
	require.Equal(t, int64(5000), o.Mana)
	require.Equal(t, fulfillment.StatusPending, o.Status)
	require.Equal(t, "paddle", o.Provider)

	require.Empty(t, o.Reason, "no reason while pending")

	got, err := fulfillment.GetOrder(ctx, db, player, o.ID)
	require.NoError(t, err)
	require.Equal(t, o.Amount, got.Amount)
	require.Equal(t, o.CreatedAt, got.CreatedAt)
}

func TestCreateCheckoutRejectsUnknownSKUAndProvider(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.Tx(t)
	player := newPlayer(t, db)

	_, err := fulfillment.CreateCheckout(ctx, db, catalogue, fulfillment.CheckoutParams{
		PlayerID: player, SKU: "mana_9", Provider: "stripe"})
	require.ErrorIs(t, err, fulfillment.ErrUnknownSKU)
	_, err = fulfillment.CreateCheckout(ctx, db, catalogue, fulfillment.CheckoutParams{
		PlayerID: player, SKU: "mana_1000", Provider: "paypal"})
	require.ErrorIs(t, err, provider.ErrUnknown)
	require.Zero(t, count(t, db, `SELECT count(*) FROM orders`))
}

func TestGetOrderHidesOtherPlayersOrders(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.Tx(t)
	alice, bob := newPlayer(t, db), newPlayer(t, db)
	o := checkout(t, db, alice, "mana_1000", "creem")

	_, err := fulfillment.GetOrder(ctx, db, bob, o.ID)
	require.ErrorIs(t, err, fulfillment.ErrNotFound)
	_, err = fulfillment.GetOrder(ctx, db, alice, o.ID+1000)
	require.ErrorIs(t, err, fulfillment.ErrNotFound)
	got, err := fulfillment.GetOrder(ctx, db, alice, o.ID)
	require.NoError(t, err)
	require.Equal(t, alice, got.PlayerID)
}

// Ten completed-payment events for one order (redeliveries under fresh
// event ids), worked concurrently: one credit of exactly the snapshot.
func TestConcurrentFulfilmentsCreditOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	client := startRiver(t, pool)
	player := newPlayer(t, pool)
	o := checkout(t, pool, player, "mana_1000", "stripe")

	var wg sync.WaitGroup
	for i := range 10 {
		wg.Go(func() { pay(t, pool, client, fmt.Sprintf("evt_%d", i), o.ID, 999, "usd") })
	}
	wg.Wait()

	for _, j := range waitJobs(t, pool, 10) {
		require.Equal(t, "completed", j.State, j.Errors)
	}
	require.Equal(t, int64(1000), manaBalance(t, pool, player))
	require.Equal(t, 1, count(t, pool, `SELECT count(*) FROM wallet_transactions WHERE player_id = $1`, player))
	got, err := fulfillment.GetOrder(ctx, pool, player, o.ID)
	require.NoError(t, err)
	require.Equal(t, fulfillment.StatusFulfilled, got.Status)
	require.NotZero(t, got.WalletTransactionID)
	require.NotNil(t, got.FulfilledAt)
	requireClean(t, pool)
}

func TestPaymentMismatchRejectsAndCancels(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		amount   int64
		currency string
	}{
		{"amount", 998, "usd"},
		{"currency", 999, "eur"},
		{"zero", 0, "usd"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			pool := testdb.New(t)
			client := startRiver(t, pool)
			player := newPlayer(t, pool)
			o := checkout(t, pool, player, "mana_1000", "stripe")

			pay(t, pool, client, "evt_bad", o.ID, tc.amount, tc.currency)
			jobs := waitJobs(t, pool, 1)
			require.Equal(t, "cancelled", jobs[0].State)
			require.Contains(t, jobs[0].Errors[0], "does not match")

			got, err := fulfillment.GetOrder(ctx, pool, player, o.ID)
			require.NoError(t, err)
			require.Equal(t, fulfillment.StatusRejected, got.Status)
			require.Contains(t, got.Reason, fmt.Sprintf("paid %d %s", tc.amount, tc.currency))
			require.Contains(t, got.Reason, "snapshot is 999 usd")
			require.Zero(t, manaBalance(t, pool, player))

			// A later, correct payment does not revive a rejected order:
			// an operator settles it (refund), nothing is minted.
			pay(t, pool, client, "evt_good", o.ID, 999, "usd")
			jobs = waitJobs(t, pool, 2)
			require.Equal(t, "cancelled", jobs[1].State)
			require.Contains(t, jobs[1].Errors[0], "rejected earlier")
			require.Zero(t, manaBalance(t, pool, player))
			require.Zero(t, count(t, pool, `SELECT count(*) FROM wallet_transactions`))
			requireClean(t, pool)
		})
	}
}

func TestCurrencyComparedCaseInsensitively(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	client := startRiver(t, pool)
	player := newPlayer(t, pool)
	o := checkout(t, pool, player, "mana_1000", "paddle")

	pay(t, pool, client, "evt_upper", o.ID, 999, "USD")
	jobs := waitJobs(t, pool, 1)
	require.Equal(t, "completed", jobs[0].State, jobs[0].Errors)
	require.Equal(t, int64(1000), manaBalance(t, pool, player))
	requireClean(t, pool)
}

func TestUnknownOrderCancelsJob(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	client := startRiver(t, pool)

	pay(t, pool, client, "evt_ghost", 424242, 999, "usd")
	jobs := waitJobs(t, pool, 1)
	require.Equal(t, "cancelled", jobs[0].State)
	require.Contains(t, jobs[0].Errors[0], "order 424242, which does not exist")
	require.Zero(t, count(t, pool, `SELECT count(*) FROM wallet_transactions`))
	requireClean(t, pool)
}

// A catalogue change after checkout changes neither the price the order
// must be paid nor the Mana it grants; new orders take the new snapshot.
func TestCatalogueChangeAfterCheckout(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	client := startRiver(t, pool)
	player := newPlayer(t, pool)
	skus := map[string]fulfillment.SKU{"pack": {Amount: 999, Currency: "usd", Mana: 1000}}
	old, err := fulfillment.CreateCheckout(ctx, pool, skus, fulfillment.CheckoutParams{
		PlayerID: player, SKU: "pack", Provider: "stripe"})
	require.NoError(t, err)

	skus["pack"] = fulfillment.SKU{Amount: 1999, Currency: "eur", Mana: 3000}
	newer, err := fulfillment.CreateCheckout(ctx, pool, skus, fulfillment.CheckoutParams{
		PlayerID: player, SKU: "pack", Provider: "stripe"})
	require.NoError(t, err)
	require.Equal(t, int64(1999), newer.Amount)

	pay(t, pool, client, "evt_old", old.ID, 999, "usd")
	pay(t, pool, client, "evt_new", newer.ID, 1999, "eur")
	for _, j := range waitJobs(t, pool, 2) {
		require.Equal(t, "completed", j.State, j.Errors)
	}
	require.Equal(t, int64(1000+3000), manaBalance(t, pool, player))
	var amounts []int64
	rows, err := pool.Query(ctx, `SELECT amount FROM wallet_transactions WHERE player_id = $1 ORDER BY id`, player)
	require.NoError(t, err)
	for rows.Next() {
		var a int64
		require.NoError(t, rows.Scan(&a))
		amounts = append(amounts, a)
	}
	require.NoError(t, rows.Err())
	require.ElementsMatch(t, []int64{1000, 3000}, amounts)
	requireClean(t, pool)
}
