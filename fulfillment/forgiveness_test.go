package fulfillment_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/fulfillment"
	"github.com/fibe-dev/billing/internal/events"
	"github.com/fibe-dev/billing/wallet"
)

// Issue 28, finding 1: a write-off is recovered first. The player buys
// 1000 Mana and converts and spends spent of it; a dispute (or Paddle
// chargeback) claws the 1000 back, the shortfall becomes a debt, an
// operator forgives it, then the dispute is won. The Mana given back
// first reverses the forgiveness: the player ends with what was not
// spent, never the forgiven debt and the Mana both.
func TestWonAfterForgivenessRecoversTheWriteOff(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, provider, payment, dispute, opened string
		spent, debt                              int64
	}{
		{"stripe dispute won", "stripe", "pi_f", "dp_f", fulfillment.StateOpen, 1000, 1000},
		{"stripe inquiry closed, half spent", "stripe", "pi_f", "dp_f", fulfillment.StateOpen, 500, 500},
		{"paddle chargeback reversed", "paddle", "txn_f", "chargeback:txn_f", fulfillment.StateLost, 1000, 1000},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			e := newReversalEnv(t)
			ws := wallet.New(e.pool, wallet.Options{})
			o := checkout(t, e.pool, e.player, "mana_1000", c.provider)
			payWith(t, e.pool, e.client, c.provider, "evt_paid", c.payment, o.ID, 999, "usd")
			require.Equal(t, "completed", waitJobs(t, e.pool, 1)[0].State)
			spend(t, ws, e.player, c.spent)
			dispute := func(event, state string) {
				t.Helper()
				reverse(t, e.pool, e.client, fulfillment.ReversePaymentArgs{Provider: c.provider, EventID: event,
					PaymentID: c.payment, ReversalID: c.dispute, ReversalKind: fulfillment.ReversalDispute, State: state,
					Amount: 999, Currency: "usd"})
				e.jobs++
				j := waitKind(t, e.pool, "reverse_payment", e.jobs)
				require.Equal(t, "completed", j[len(j)-1].State, j[len(j)-1].Errors)
			}
			dispute("evt_opened", c.opened)
			require.Equal(t, c.debt, e.debt())
			f, err := fulfillment.ForgiveDebt(ctx, e.pool, ws, e.player, "goodwill", "support ticket 7")
			require.NoError(t, err)
			require.Equal(t, c.debt, f.Mana)
			requireClean(t, e.pool)

			// The won event, redelivered under five ids at once.
			var wg sync.WaitGroup
			errs := make([]error, 5)
			for i := range errs {
				wg.Go(func() {
					errs[i] = tryReverse(e.pool, e.client, fulfillment.ReversePaymentArgs{Provider: c.provider,
						EventID: fmt.Sprintf("evt_won_%d", i), PaymentID: c.payment, ReversalID: c.dispute,
						ReversalKind: fulfillment.ReversalDispute, State: fulfillment.StateWon, Amount: 999, Currency: "usd"})
				})
			}
			wg.Wait()
			for _, err := range errs {
				require.NoError(t, err)
			}
			for _, j := range waitKind(t, e.pool, "reverse_payment", e.jobs+len(errs)) {
				require.Equal(t, "completed", j.State, j.Errors)
			}
			require.Equal(t, 1000-c.spent, e.balances()[wallet.Mana], "the forgiven debt is taken first out of what came back")
			require.Zero(t, e.debt())
			require.Zero(t, count(t, e.pool, `SELECT coalesce(sum(l.amount), 0) FROM ledger_entries l
				JOIN wallet_transactions t ON t.id = l.transaction_id WHERE l.account = 'bad_debt' AND t.player_id = $1`, e.player),
				"the write-off is reversed")
			require.Equal(t, 1, count(t, e.pool, `SELECT count(*) FROM wallet_transactions WHERE kind = 'clawback_reversal'`))
			requireClean(t, e.pool)
		})
	}
}

// spend converts n Mana to Sparks and spends the Sparks.
func spend(t *testing.T, ws *wallet.Store, player, n int64) {
	t.Helper()
	ctx := context.Background()
	c, err := ws.Convert(ctx, wallet.ConvertParams{PlayerID: player, Mana: n, IdempotencyKey: wallet.CallerKey("spend")})
	require.NoError(t, err)
	_, err = ws.Debit(ctx, wallet.PostParams{PlayerID: player, Currency: wallet.Sparks, Amount: c.SparksCredit.Amount,
		Kind: wallet.KindFunding, IdempotencyKey: wallet.FundingKey(1, "2026-11-30")})
	require.NoError(t, err)
}

// A debt forgiven under one key by N operators at once: one write-off,
// one debt.forgiven under the id derived from the forgiveness's key with
// what was written off, every caller answered the same Mana, and the full
// audit, events included, is clean. A key that finds nothing owed spends
// itself and sends nothing; a bad key is refused before anything is
// written.
func TestForgiveDebtEmitsOneEventUnderRacingKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newReversalEnv(t)
	ws := wallet.New(e.pool, wallet.Options{})
	o := e.buy("pi_forgive")
	require.Equal(t, "completed", waitJobs(t, e.pool, 1)[0].State)
	spend(t, ws, e.player, 1000)
	j := e.reverse("evt_refund", "pi_forgive", "re_forgive", fulfillment.ReversalRefund, fulfillment.StateSucceeded, 999, "usd")
	require.Equal(t, "completed", j.State, j.Errors)
	require.Equal(t, int64(1000), e.debt())
	requireClean(t, e.pool)

	const n = 8
	var wg sync.WaitGroup
	got := make([]*wallet.Forgiveness, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			got[i], errs[i] = fulfillment.ForgiveDebt(ctx, e.pool, ws, e.player, "ticket-7", "support ticket 7")
		})
	}
	wg.Wait()
	replays := 0
	for i := range n {
		require.NoError(t, errs[i])
		require.Equal(t, int64(1000), got[i].Mana)
		if got[i].Replayed {
			replays++
		}
	}
	require.Equal(t, n-1, replays, "one forgiveness, the rest replays")
	require.Zero(t, e.debt())
	id := events.ID(events.DebtForgiven, wallet.OperatorKey(wallet.OperatorForgive, "ticket-7").String())
	data := eventData(t, e.pool, id)
	require.NotNil(t, data, "debt.forgiven was written under the forgiveness's key")
	require.Equal(t, map[string]any{"mana_forgiven": float64(1000),
		"mana_outstanding": float64(0), "reason": "support ticket 7"}, data)
	require.Equal(t, 1, count(t, e.pool, `SELECT count(*) FROM events WHERE type = 'debt.forgiven'`))
	require.Equal(t, o.PlayerID, e.player)
	requireClean(t, e.pool)

	f, err := fulfillment.ForgiveDebt(ctx, e.pool, ws, e.player, "nothing-owed", "again")
	require.NoError(t, err)
	require.Zero(t, f.Mana)
	require.False(t, f.Replayed)
	_, err = fulfillment.ForgiveDebt(ctx, e.pool, ws, e.player, "order:1:fulfilment", "a system key")
	require.ErrorIs(t, err, wallet.ErrReservedKey)
	require.Equal(t, 1, count(t, e.pool, `SELECT count(*) FROM events WHERE type = 'debt.forgiven'`), "nothing owed, nothing sent")
	requireClean(t, e.pool)
}
