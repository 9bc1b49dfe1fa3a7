package fulfillment_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/fulfillment"
	"github.com/fibe-dev/billing/internal/kit/testdb"
)

// TestKeyedCheckoutRace: 20 concurrent creations with one key make one
// order; the same key for another SKU is refused and creates nothing.
func TestKeyedCheckoutRace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	player := newPlayer(t, pool)
	const n = 20
	ids, errs := make([]int64, n), make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			o, err := fulfillment.CreateCheckout(ctx, pool, catalogue, fulfillment.CheckoutParams{
				PlayerID: player, SKU: "mana_1000", Provider: "stripe", Key: "k1"})
			errs[i] = err
			if err == nil {
				ids[i] = o.ID
			}
		})
	}
	wg.Wait()
	for i := range n {
		require.NoError(t, errs[i])
		require.Equal(t, ids[0], ids[i])
	}
	require.Equal(t, 1, count(t, pool, `SELECT count(*) FROM orders`))
	_, err := fulfillment.CreateCheckout(ctx, pool, catalogue, fulfillment.CheckoutParams{
		PlayerID: player, SKU: "mana_5000", Provider: "stripe", Key: "k1"})
	require.ErrorIs(t, err, fulfillment.ErrCheckoutKeyReused)
	other := newPlayer(t, pool)
	o, err := fulfillment.CreateCheckout(ctx, pool, catalogue, fulfillment.CheckoutParams{
		PlayerID: other, SKU: "mana_5000", Provider: "stripe", Key: "k1"})
	require.NoError(t, err, "keys are per player")
	require.NotEqual(t, ids[0], o.ID)
	require.Equal(t, 2, count(t, pool, `SELECT count(*) FROM orders`))
}

// TestSetCheckoutOnce: racing stores of different provider checkouts for
// one order keep exactly one, and every caller gets that one back.
func TestSetCheckoutOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	o := checkout(t, pool, newPlayer(t, pool), "mana_1000", "paddle")
	const n = 20
	got, errs := make([]*fulfillment.Order, n), make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			got[i], errs[i] = fulfillment.SetCheckout(ctx, pool, o.ID, fmt.Sprintf("txn_%d", i), fmt.Sprintf("https://pay.test/%d", i))
		})
	}
	wg.Wait()
	for i := range n {
		require.NoError(t, errs[i])
		require.NotEmpty(t, got[i].CheckoutID)
		require.Equal(t, got[0].CheckoutID, got[i].CheckoutID)
		require.Equal(t, got[0].CheckoutURL, got[i].CheckoutURL)
	}
	require.Equal(t, "https://pay.test/"+got[0].CheckoutID[len("txn_"):], got[0].CheckoutURL, "id and URL from the same store")
	requireClean(t, pool)
}
