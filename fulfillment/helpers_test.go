package fulfillment_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/fulfillment"
	"github.com/fibe-dev/billing/fulfillment/fulfillmenttest"
	"github.com/fibe-dev/billing/internal/domain/players"
	"github.com/fibe-dev/billing/internal/kit/testdb"
	"github.com/fibe-dev/billing/internal/kit/testkit"
	"github.com/fibe-dev/billing/internal/ops/audit"
	"github.com/fibe-dev/billing/internal/ops/audit/audittest"
	"github.com/fibe-dev/billing/wallet"
)

func TestMain(m *testing.M) { testdb.Main(m) }

var catalogue = testkit.Catalogue()

// startRiver starts the fulfilment and reversal workers on pool.
func startRiver(t *testing.T, pool *pgxpool.Pool) *river.Client[pgx.Tx] {
	t.Helper()
	return fulfillmenttest.StartRiver(t, pool, fulfillment.WorkerOptions{})
}

// startRiverWith is startRiver with opts (refunders, clock).
func startRiverWith(t *testing.T, pool *pgxpool.Pool, opts fulfillment.WorkerOptions) *river.Client[pgx.Tx] {
	t.Helper()
	return fulfillmenttest.StartRiver(t, pool, opts)
}

func newPlayer(t *testing.T, db fulfillment.DB) int64 {
	t.Helper()
	p, _, err := players.Create(context.Background(), db, "buyer")
	require.NoError(t, err)
	return p.ID
}

// checkout opens an order of sku for player through provider.
func checkout(t *testing.T, db fulfillment.DB, player int64, sku, provider string) *fulfillment.Order {
	t.Helper()
	o, err := fulfillment.CreateCheckout(context.Background(), db, catalogue, fulfillment.CheckoutParams{
		PlayerID: player, SKU: sku, Provider: provider})
	require.NoError(t, err)
	return o
}

// pay does what webhook intake does for a completed payment of the order's
// one payment through the order's provider (stripe for an unknown order):
// claim an event row and insert its job, in one transaction.
func pay(t *testing.T, pool *pgxpool.Pool, client *river.Client[pgx.Tx], eventID string, orderID, amount int64, currency string) {
	t.Helper()
	payWith(t, pool, client, orderProvider(t, pool, orderID), eventID, "", orderID, amount, currency)
}

func orderProvider(t *testing.T, pool *pgxpool.Pool, orderID int64) string {
	t.Helper()
	provider := "stripe"
	err := pool.QueryRow(context.Background(), `SELECT provider FROM orders WHERE id = $1`, orderID).Scan(&provider)
	if err != nil {
		require.ErrorIs(t, err, pgx.ErrNoRows)
	}
	return provider
}

// payWith is pay through provider for the provider payment paymentID
// ("": the order's one payment).
func payWith(t *testing.T, pool *pgxpool.Pool, client *river.Client[pgx.Tx], provider, eventID, paymentID string,
	orderID, amount int64, currency string) {
	t.Helper()
	require.NoError(t, tryPay(pool, client, provider, eventID, paymentID, orderID, amount, currency))
}

// tryPay is payWith for any goroutine: it returns the error.
func tryPay(pool *pgxpool.Pool, client *river.Client[pgx.Tx], provider, eventID, paymentID string,
	orderID, amount int64, currency string) error {
	return tryPayArgs(pool, client, fulfillment.FulfillOrderArgs{OrderID: orderID, EventID: eventID,
		Provider: provider, PaidAmount: amount, PaidCurrency: currency, PaymentID: paymentID})
}

// tryPayArgs claims an event row for a and inserts its job, in one transaction.
func tryPayArgs(pool *pgxpool.Pool, client *river.Client[pgx.Tx], a fulfillment.FulfillOrderArgs) error {
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `INSERT INTO webhook_events (provider, event_id, event_type, order_id, paid_amount,
		paid_currency, payload) VALUES ($5, $1, 'checkout.session.completed', $2, $3, $4, '{}')`,
		a.EventID, a.OrderID, a.PaidAmount, a.PaidCurrency, a.Provider)
	if err != nil {
		return err
	}
	_, err = client.InsertTx(ctx, tx, a, nil)
	if err != nil {
		return err
	}
	return tx.Commit(ctx)
}

type jobRow struct {
	State  string
	Errors []string
}

// waitJobs waits until n fulfill_order jobs exist and all are finalized,
// and returns them in id order.
func waitJobs(t *testing.T, pool *pgxpool.Pool, n int) []jobRow {
	t.Helper()
	return waitKind(t, pool, "fulfill_order", n)
}

func manaBalance(t *testing.T, pool *pgxpool.Pool, playerID int64) int64 {
	t.Helper()
	b, err := wallet.New(pool, wallet.Options{}).Balances(context.Background(), playerID)
	require.NoError(t, err)
	return b[wallet.Mana]
}

func count(t *testing.T, db fulfillment.DB, sql string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, db.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

// requireClean runs the full audit: every invariant.
func requireClean(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	audittest.RequireClean(t, pool, audit.Options{})
}

// reverse does what webhook intake does for a refund or dispute: claim an
// event row and insert its reverse_payment job, in one transaction.
func reverse(t *testing.T, pool *pgxpool.Pool, client *river.Client[pgx.Tx], a fulfillment.ReversePaymentArgs) {
	t.Helper()
	require.NoError(t, tryReverse(pool, client, a))
}

// tryReverse is reverse for any goroutine: it returns the error.
func tryReverse(pool *pgxpool.Pool, client *river.Client[pgx.Tx], a fulfillment.ReversePaymentArgs) error {
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `INSERT INTO webhook_events (provider, event_id, event_type, payload)
		VALUES ($1, $2, 'charge.refunded', '{}')`, a.Provider, a.EventID)
	if err != nil {
		return err
	}
	if _, err = client.InsertTx(ctx, tx, a, nil); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// waitKind waits until n jobs of kind were worked to their end, and returns
// them in id order. A constraint violation fails at once (no retry mends
// it), and so does any failed attempt of a reversal job: none of these
// tests makes one fail on purpose.
func waitKind(t *testing.T, pool *pgxpool.Pool, kind string, n int) []jobRow {
	t.Helper()
	jobs := testkit.JobsOn(pool).Wait(t, testkit.Kind(kind), n, testkit.WaitOptions{Strict: kind == "reverse_payment"})
	out := make([]jobRow, len(jobs))
	for i, j := range jobs {
		out[i] = jobRow{State: string(j.State), Errors: j.Errors}
	}
	return out
}
