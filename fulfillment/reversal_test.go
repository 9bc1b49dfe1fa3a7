package fulfillment_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/fulfillment"
	"github.com/fibe-dev/billing/internal/kit/testdb"
	"github.com/fibe-dev/billing/wallet"
)

type reversalEnv struct {
	t      *testing.T
	pool   *pgxpool.Pool
	client *river.Client[pgx.Tx]
	player int64
	jobs   int
}

func newReversalEnv(t *testing.T) *reversalEnv {
	pool := testdb.New(t)
	return &reversalEnv{t: t, pool: pool, client: startRiverWith(t, pool, fulfillment.WorkerOptions{}), player: newPlayer(t, pool)}
}

// buy creates and pays a mana_1000 order with Stripe payment pi.
func (e *reversalEnv) buy(pi string) *fulfillment.Order {
	e.t.Helper()
	o, err := fulfillment.CreateCheckout(context.Background(), e.pool, catalogue, fulfillment.CheckoutParams{
		PlayerID: e.player, SKU: "mana_1000", Provider: "stripe"})
	require.NoError(e.t, err)
	payWith(e.t, e.pool, e.client, "stripe", "evt_"+pi, pi, o.ID, 999, "usd")
	return o
}

// reverse delivers a reversal of pi and waits for its job.
func (e *reversalEnv) reverse(event, pi, id, kind, state string, amount int64, currency string) jobRow {
	e.t.Helper()
	reverse(e.t, e.pool, e.client, fulfillment.ReversePaymentArgs{Provider: "stripe", EventID: event, PaymentID: pi,
		ReversalID: id, ReversalKind: kind, State: state, Amount: amount, Currency: currency})
	e.jobs++
	jobs := waitKind(e.t, e.pool, "reverse_payment", e.jobs)
	return jobs[len(jobs)-1]
}

func (e *reversalEnv) balances() map[wallet.Currency]int64 {
	e.t.Helper()
	b, err := wallet.New(e.pool, wallet.Options{}).Balances(context.Background(), e.player)
	require.NoError(e.t, err)
	return b
}

func (e *reversalEnv) debt() int64 {
	e.t.Helper()
	n, err := wallet.OutstandingDebt(context.Background(), e.pool, e.player)
	require.NoError(e.t, err)
	return n
}

// Mana converted and spent, then a full refund: Mana 0, Sparks reduced,
// the rest a debt; conversions are refused meanwhile; a later purchase
// settles the debt first.
func TestShortfallBecomesDebtSettledByNextPurchase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newReversalEnv(t)
	ws := wallet.New(e.pool, wallet.Options{})
	e.buy("pi_a")
	require.Equal(t, "completed", waitJobs(t, e.pool, 1)[0].State)
	_, err := ws.Convert(ctx, wallet.ConvertParams{PlayerID: e.player, Mana: 600, IdempotencyKey: wallet.CallerKey("conv")})
	require.NoError(t, err)
	_, err = ws.Debit(ctx, wallet.PostParams{PlayerID: e.player, Currency: wallet.Sparks, Amount: 500,
		Kind: wallet.KindFunding, IdempotencyKey: wallet.FundingKey(1, "2026-11-30")})
	require.NoError(t, err)

	j := e.reverse("evt_refund", "pi_a", "charge:ch_a", fulfillment.ReversalRefund, fulfillment.StateSucceeded, 999, "usd")
	require.Equal(t, "completed", j.State, j.Errors)
	require.Equal(t, map[wallet.Currency]int64{wallet.Mana: 0, wallet.Sparks: 0}, e.balances())
	require.Equal(t, int64(500), e.debt(), "1000 clawed back: 400 Mana, 100 Sparks, 500 owed")
	err = wallet.CheckNoDebt(ctx, e.pool, e.player)
	var owed *wallet.OutstandingDebtError
	require.True(t, errors.As(err, &owed))
	require.Equal(t, int64(500), owed.Mana)
	requireClean(t, e.pool)

	e.buy("pi_b")
	require.Equal(t, "completed", waitJobs(t, e.pool, 2)[1].State)
	require.Equal(t, int64(500), e.balances()[wallet.Mana], "the purchase paid the debt first")
	require.Zero(t, e.debt())
	require.NoError(t, wallet.CheckNoDebt(ctx, e.pool, e.player))
	requireClean(t, e.pool)
}

// A dispute takes the Mana when it opens and gives it back, once, when it
// is won; a lost dispute after a full refund takes nothing more.
func TestDisputeWonGivesBackOnce(t *testing.T) {
	t.Parallel()
	e := newReversalEnv(t)
	o := e.buy("pi_d")
	waitJobs(t, e.pool, 1)
	require.Equal(t, "completed", e.reverse("e1", "pi_d", "dp_1", fulfillment.ReversalDispute, fulfillment.StateOpen, 999, "usd").State)
	require.Zero(t, e.balances()[wallet.Mana])
	for _, ev := range []string{"e2", "e3"} { // the closing event redelivered under two ids
		require.Equal(t, "completed", e.reverse(ev, "pi_d", "dp_1", fulfillment.ReversalDispute, fulfillment.StateWon, 999, "usd").State)
	}
	require.Equal(t, int64(1000), e.balances()[wallet.Mana])
	// A late copy of an older state never moves the dispute back.
	for _, state := range []string{fulfillment.StateLost, fulfillment.StateOpen} {
		require.Equal(t, "completed", e.reverse("e_late_"+state, "pi_d", "dp_1", fulfillment.ReversalDispute, state, 999, "usd").State)
		require.Equal(t, int64(1000), e.balances()[wallet.Mana], "a won dispute stays won after a late %s", state)
	}
	got, err := fulfillment.GetOrder(context.Background(), e.pool, e.player, o.ID)
	require.NoError(t, err)
	require.Equal(t, fulfillment.StatusFulfilled, got.Status)
	require.Zero(t, got.ClawedBackMana)
	require.Equal(t, 1, count(t, e.pool, `SELECT count(*) FROM wallet_transactions WHERE kind = 'clawback_reversal'`))

	require.Equal(t, "completed", e.reverse("e4", "pi_d", "charge:ch_d", fulfillment.ReversalRefund, fulfillment.StateSucceeded, 999, "usd").State)
	require.Equal(t, "completed", e.reverse("e5", "pi_d", "dp_2", fulfillment.ReversalDispute, fulfillment.StateLost, 999, "usd").State)
	require.Zero(t, e.balances()[wallet.Mana])
	require.Equal(t, 2, count(t, e.pool, `SELECT count(*) FROM wallet_transactions WHERE kind = 'clawback' AND currency = 'mana'`))
	requireClean(t, e.pool)
}

// A refund that arrives before its payment is recorded; the payment then
// mints and is clawed back at once.
func TestRefundBeforePayment(t *testing.T) {
	t.Parallel()
	e := newReversalEnv(t)
	j := e.reverse("e_early", "pi_late", "charge:ch_late", fulfillment.ReversalRefund, fulfillment.StateSucceeded, 500, "usd")
	require.Equal(t, "completed", j.State, j.Errors)
	require.Zero(t, count(t, e.pool, `SELECT count(*) FROM wallet_transactions`))
	o := e.buy("pi_late")
	require.Equal(t, "completed", waitJobs(t, e.pool, 1)[0].State)
	require.Equal(t, int64(1000-501), e.balances()[wallet.Mana])
	got, err := fulfillment.GetOrder(context.Background(), e.pool, e.player, o.ID)
	require.NoError(t, err)
	require.Equal(t, fulfillment.StatusPartiallyRefunded, got.Status)
	require.Equal(t, int64(500), got.RefundedAmount)
	requireClean(t, e.pool)
}

// Hostile reversals: a clear cancelled job with its reason (or a job that
// only records an unknown payment), never a post. (More than was paid is
// not hostile: the provider took it back; see truth_test.go.)
func TestHostileReversalsPostNothing(t *testing.T) {
	t.Parallel()
	e := newReversalEnv(t)
	e.buy("pi_h")
	waitJobs(t, e.pool, 1)
	for _, c := range []struct {
		name, pi, id, kind, state, currency string
		amount                              int64
		wantState, reason                   string
	}{
		{"wrong currency", "pi_h", "re_eur", fulfillment.ReversalRefund, fulfillment.StateSucceeded, "eur", 10, "cancelled", "the payment was in usd"},
		{"negative", "pi_h", "re_neg", fulfillment.ReversalRefund, fulfillment.StateSucceeded, "usd", -10, "cancelled", "negative"},
		{"unknown state", "pi_h", "dp_x", fulfillment.ReversalDispute, "maybe", "usd", 10, "cancelled", "unknown kind"},
		{"unknown payment", "pi_nobody", "re_ghost", fulfillment.ReversalRefund, fulfillment.StateSucceeded, "usd", 10, "completed", ""},
	} {
		j := e.reverse("evt_"+c.name, c.pi, c.id, c.kind, c.state, c.amount, c.currency)
		require.Equal(t, c.wantState, j.State, c.name)
		if c.reason != "" {
			require.Contains(t, j.Errors[0], c.reason, c.name)
		}
	}
	require.Equal(t, int64(1000), e.balances()[wallet.Mana])
	require.Equal(t, 1, count(t, e.pool, `SELECT count(*) FROM wallet_transactions`), "only the purchase")
	requireClean(t, e.pool)
}

// Ten deliveries of one payment (fresh event ids) and ten of one refund
// and one dispute, all enqueued at once and worked concurrently: one mint,
// one clawback to the single target, whichever job runs first.
func TestPaymentAndReversalsRacing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newReversalEnv(t)
	o, err := fulfillment.CreateCheckout(ctx, e.pool, catalogue, fulfillment.CheckoutParams{
		PlayerID: e.player, SKU: "mana_1000", Provider: "stripe"})
	require.NoError(t, err)
	const n = 10
	errs := make([]error, 3*n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs[i] = tryPay(e.pool, e.client, "stripe", fmt.Sprintf("p%d", i), "pi_r", o.ID, 999, "usd") })
		wg.Go(func() {
			errs[n+i] = tryReverse(e.pool, e.client, fulfillment.ReversePaymentArgs{Provider: "stripe", EventID: fmt.Sprintf("r%d", i),
				PaymentID: "pi_r", ReversalID: "charge:ch_r", ReversalKind: fulfillment.ReversalRefund,
				State: fulfillment.StateSucceeded, Amount: 400, Currency: "usd"})
		})
		wg.Go(func() {
			errs[2*n+i] = tryReverse(e.pool, e.client, fulfillment.ReversePaymentArgs{Provider: "stripe", EventID: fmt.Sprintf("d%d", i),
				PaymentID: "pi_r", ReversalID: "dp_r", ReversalKind: fulfillment.ReversalDispute,
				State: fulfillment.StateLost, Amount: 100, Currency: "usd"})
		})
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	for _, j := range waitJobs(t, e.pool, n) {
		require.Equal(t, "completed", j.State, j.Errors)
	}
	for _, j := range waitKind(t, e.pool, "reverse_payment", 2*n) {
		require.Equal(t, "completed", j.State, j.Errors)
	}
	want := int64(501) // ceil(1000 x 500 / 999)
	require.Equal(t, 1000-want, e.balances()[wallet.Mana])
	got, err := fulfillment.GetOrder(ctx, e.pool, e.player, o.ID)
	require.NoError(t, err)
	require.Equal(t, want, got.ClawedBackMana)
	require.Equal(t, fulfillment.StatusDisputed, got.Status)
	require.Equal(t, 1, count(t, e.pool, `SELECT count(*) FROM wallet_transactions WHERE kind = 'purchase'`))
	require.Equal(t, want, int64(-count(t, e.pool, `SELECT coalesce(sum(amount), 0) FROM wallet_transactions WHERE kind = 'clawback'`)))
	requireClean(t, e.pool)
}
